"""torch_tpu: PyTorch on XLA accelerators through the PJRT C API.

Installing the package is enough: torch imports it through the ``torch.backends`` entry point,
so ``torch.device("tpu")`` works without ``import torch_tpu``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import os
import sys
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Literal


def _autoload() -> None:
    """Entry point for torch's backend autoload (``torch.backends`` group).

    Defined before ``import torch``: when torch_tpu itself is imported first, torch's autoload
    finds this half-initialised module; the initialisation at the bottom then does the work.
    """
    initialize = globals().get("_initialize")
    if initialize is not None:
        initialize()


import torch  # noqa: E402

from . import _plugin  # noqa: E402

__all__ = [
    "__version__",
    "EagerMode",
    "eager_mode",
    "get_eager_mode",
    "metrics",
    "plugin_path",
    "reset_metrics",
    "set_eager_mode",
    "version_info",
]


def _installed_version() -> str:
    try:
        return importlib.metadata.version("torch_tpu")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, never installed
        return "unknown"


# "0.1.0+torch2.13": the local part names the torch release the extension was built against.
__version__ = _installed_version()

EagerMode = Literal["strict", "debug", "defer_and_fuse"]

_state: dict[str, object] = {}


def _torch_release(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _load_extension() -> ModuleType:
    """torch_tpu._C, checked against the running torch: the extension links torch's C++
    libraries, and another torch release than the one it was compiled against fails in the
    loader with an undefined symbol, or worse. Say so plainly."""
    running = _torch_release(torch.__version__)
    try:
        from . import _C
    except ImportError as error:
        raise ImportError(
            f"torch_tpu {__version__}: its extension does not load with torch {torch.__version__}"
            f" (was it built against another torch release?): {error}"
        ) from error
    built = _C._built_against_torch()
    if _torch_release(built) != running:
        raise ImportError(
            f"torch_tpu was built against torch {built}, but torch {torch.__version__} is "
            f"installed: install torch=={_torch_release(built)}.* or a torch_tpu built "
            f"against torch {running}"
        )
    return _C


def _start_runtime(kind: str, path: str) -> None:
    from . import _C
    from .distributed import _multi_process

    _plugin.apply_xla_flags(kind)
    # One process drives one device by default, as on TPU; the CPU plugin would otherwise
    # expose one device per core group.
    count = int(os.environ.get("TORCH_TPU_CPU_DEVICE_COUNT", "1")) if kind == "cpu" else 0
    options, key_value = _multi_process.client_setup(kind)  # a torchrun job's XLA engine
    if kind in ("cuda", "tpu") and not os.environ.get("TORCH_TPU_LOG_LEVEL"):
        # XLA's own INFO lines (allocator sizes, each JIT compile, ptxas notes) stay off, as
        # the CPU plugin's start-up lines do; a value the user set wins.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if kind == "cuda":
        _plugin.preload_cuda_libraries()
        options = {**_plugin.gpu_client_options(), **options}
    local_rank, local_world_size = _torchrun_place()
    _C._initialize(path, count, options, key_value, local_rank, local_world_size)


def _torchrun_place() -> tuple[int, int]:
    """(LOCAL_RANK, LOCAL_WORLD_SIZE) where torchrun set both, else (-1, 0). A process that
    drives one chip numbers it LOCAL_RANK and reports LOCAL_WORLD_SIZE devices (see
    docs/guide/distributed.md, "Devices under torchrun")."""
    try:
        return int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return -1, 0


def _initialize() -> None:
    if _state.get("initialized"):
        return
    _C = _load_extension()
    torch.utils.rename_privateuse1_backend("tpu")
    from . import device_module

    try:
        kind, path = _plugin.resolve()
        _start_runtime(kind, str(path))
    except _plugin.NoPluginInstalledError as error:
        # Installed without a plugin extra: torch imports as it does without a GPU, the device
        # reports no devices, and using it raises this message, which names the extras.
        _C._set_unavailable_reason(str(error))
        _state["unavailable"] = error
        kind, path = "none", None
    torch._register_device_module("tpu", device_module)
    from . import _legacy_storages

    _legacy_storages.install(device_module)  # torch.tpu.FloatStorage, ...
    from . import memory

    device_module.memory = memory  # type: ignore[attr-defined]
    sys.modules["torch.tpu.memory"] = memory
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
    )
    from . import distributed

    distributed.register()
    device_module.distributed = distributed  # torch.tpu.distributed
    from . import _fake_impls, _optimizer_kernels, integrations, profiler

    _fake_impls.register()
    _optimizer_kernels.register()
    profiler.install()

    integrations.install()
    _state.update(initialized=True, plugin=path, kind=kind)
    atexit.register(_finish_device_work)


def _finish_device_work() -> None:
    """Lets enqueued device work finish before the interpreter tears down: work still running
    on the plugin's threads while the process exits can end it in std::terminate."""
    from . import _C, device_module

    try:
        for index in device_module._local_device_indices():
            _C._synchronize(index)
    except RuntimeError as error:  # an asynchronous failure nobody read: say so, do not hide it
        print(f"torch_tpu: device work failed before exit: {error}", file=sys.stderr)
    # The autograd engine's tpu worker thread drops its last graph task (Python objects) just
    # after backward() returns; if that lands during interpreter finalization, taking the GIL
    # ends the thread by a forced unwind and the process by std::terminate. Releasing the GIL
    # for a moment lets it finish first.
    time.sleep(0.05)


def plugin_path() -> str:
    """Path of the PJRT plugin in use."""
    if _state.get("plugin") is None:
        raise RuntimeError(str(_state.get("unavailable", "torch_tpu is not initialized")))
    return str(_state["plugin"])


def version_info() -> dict[str, str]:
    """What a bug report needs: torch_tpu's version, the torch running it, and the PJRT plugin
    in use with the API version it speaks, next to the API header torch_tpu was built with."""
    from . import _C, device_module

    info = {
        "torch_tpu": __version__,
        "torch": torch.__version__,
        "built_against_torch": _C._built_against_torch(),
        "pjrt_header": _C._pjrt_header_version(),
        "plugin_kind": str(_state.get("kind")),
    }
    if device_module.is_available():
        props = device_module.get_device_properties()
        info.update(
            plugin=props.plugin_path,
            platform=f"{props.platform_name} {props.platform_version}",
            pjrt_api=props.pjrt_api_version,
        )
    return info


def set_eager_mode(mode: EagerMode) -> None:
    """Selects how eager ops run: "strict" (default; each op enqueued asynchronously), "debug"
    (each op waited for, indexing ops bounds-checked) or "defer_and_fuse" (ops gathered into
    fused executables). Pending deferred work is materialized first."""
    from . import _C

    _C._set_eager_mode(mode)


def get_eager_mode() -> EagerMode:
    from . import _C

    return _C._get_eager_mode()  # type: ignore[no-any-return]


@contextlib.contextmanager
def eager_mode(mode: EagerMode) -> Iterator[None]:
    """Runs the block in `mode`, restoring the previous mode afterwards."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


def metrics() -> dict[str, int]:
    """Dispatcher counters: compiles, cache_hits, cache_misses, executions, host_syncs, ...; and
    max_in_flight, the most executions enqueued and not yet finished at any launch (above 1,
    the host ran ahead of the device); donated_buffers, the buffers fused and compiled graphs
    updated in place (an optimizer step's parameters) instead of copying; run_ahead_waits, the
    launches that first waited for the device because buffers the host had let go of, but
    executions in flight still read, passed TORCH_TPU_RETIRED_PERCENT of the live memory;
    size_bucket_ops, the ops run at a size bucket's length instead of their exact one (see
    docs/design/buckets.md)."""
    from . import _C

    return dict(_C._metrics())


def reset_metrics() -> None:
    from . import _C

    _C._reset_metrics()


# Submodules reachable as attributes without importing them first, as torch.cuda.memory is;
# imported on first use so that `import torch` pays nothing for them (kernels loads jax only
# when a kernel lowers). memory and profiler are imported at start-up already.
_LAZY_SUBMODULES = ("debug", "diagnose", "docs", "kernels", "memory", "profiler")


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'torch_tpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


def _running_doctor() -> bool:
    """Whether this process is ``python -m torch_tpu doctor``, which reports a failed start
    (no plugin, a plugin that does not load) instead of dying of it, or ``python -m torch_tpu
    docs``, which searches the documentation and needs no device."""
    return sys.orig_argv[1:3] == ["-m", "torch_tpu"] and sys.orig_argv[3:4] in (
        ["doctor"],
        ["docs"],
    )


try:
    _initialize()
except Exception as error:
    if not _running_doctor():
        raise
    _state["start_error"] = error
