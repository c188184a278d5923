"""torch_tpu: PyTorch on XLA accelerators through the PJRT C API.

Installing the package is enough: torch imports it through the ``torch.backends`` entry point,
so ``torch.device("tpu")`` works without ``import torch_tpu``.
"""

from __future__ import annotations

import os


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

__all__ = ["metrics", "reset_metrics", "plugin_path"]

_state: dict[str, object] = {}


def _initialize() -> None:
    if _state.get("initialized"):
        return
    torch.utils.rename_privateuse1_backend("tpu")
    from . import _C, device_module

    kind, path = _plugin.resolve()
    # One process drives one device by default, as on TPU; the CPU plugin would otherwise
    # expose one device per core group.
    count = int(os.environ.get("TORCH_TPU_CPU_DEVICE_COUNT", "1")) if kind == "cpu" else 0
    _C._initialize(str(path), count)
    torch._register_device_module("tpu", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
    )
    _state.update(initialized=True, plugin=str(path), kind=kind)


def plugin_path() -> str:
    """Path of the PJRT plugin in use."""
    return str(_state["plugin"])


def metrics() -> dict[str, int]:
    """Dispatcher counters: compiles, cache_hits, cache_misses, executions, host_syncs, ..."""
    from . import _C

    return dict(_C._metrics())


def reset_metrics() -> None:
    from . import _C

    _C._reset_metrics()


_initialize()
