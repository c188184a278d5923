"""Finding the PJRT plugin that torch_tpu drives.

``TORCH_TPU_PJRT_PLUGIN`` selects it: a path to a plugin ``.so``, or one of ``cpu``, ``tpu``,
``cuda``. Unset, the first installed of libtpu, the XLA CUDA plugin and the XLA CPU plugin is
used, in that order; libtpu only where TPU devices exist (``/dev/accel*`` or ``/dev/vfio/*``):
elsewhere it queries the cloud metadata service over the network before failing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "TORCH_TPU_PJRT_PLUGIN"
# Where TPU device nodes are looked for; tests point it at a fake folder.
DEV_ROOT_VAR = "TORCH_TPU_DEV_ROOT"

# Each names the package extra (pyproject.toml) that installs the plugin.
_INSTALL_HINT = {
    "cpu": "pip install 'torch_tpu[cpu]'  (the XLA CPU PJRT plugin)",
    "tpu": "pip install 'torch_tpu[tpu]'  (libtpu, on a Cloud TPU VM; it is only loaded where "
    "TPU devices, /dev/accel* or /dev/vfio/*, exist)",
    "cuda": "pip install 'torch_tpu[cuda]'  (the XLA CUDA plugin, on an NVIDIA GPU machine)",
}


# XLA's CPU compiler (the version our CPU plugin carries) hands a reduction, together with the
# elementwise ops that feed it, to YNNPACK as one fusion. With scalars as runtime inputs (ours
# are: a new learning rate must not recompile) that fusion runs several times slower than XLA's
# own loop fusion followed by the reduction: 25 multiply-adds then a sum over 4M floats took 7x
# jax.jit (bench/peers.py, "chain + sum"). Matrix products and convolutions stay with YNNPACK.
_XLA_FLAGS = {
    "cpu": {
        "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,"
        "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION",
    },
}


def apply_xla_flags(kind: str) -> None:
    """Adds torch_tpu's compiler flags for a `kind` plugin to XLA_FLAGS, which the plugin reads
    at its first compile; a flag the user already set there is left as it is."""
    current = os.environ.get("XLA_FLAGS", "")
    added = [
        f"--{name}={value}"
        for name, value in _XLA_FLAGS.get(kind, {}).items()
        if f"--{name}=" not in current
    ]
    if added:
        os.environ["XLA_FLAGS"] = " ".join([current, *added]).strip()


# The XLA CUDA plugin's allocator, set as PyTorch users expect of a GPU: memory is taken as
# tensors need it (a caching allocator), not three quarters of the card at start-up, which is
# the plugin's default and would leave nothing to another framework (or another client) in the
# same process. These variables override it, with the plugin's own option values.
_GPU_OPTION_VARS = {
    "TORCH_TPU_GPU_PREALLOCATE": ("preallocate", bool),
    "TORCH_TPU_GPU_MEMORY_FRACTION": ("memory_fraction", float),
    "TORCH_TPU_GPU_ALLOCATOR": ("allocator", str),  # default (BFC), platform, cuda_async
}


def gpu_client_options(env: Mapping[str, str] = os.environ) -> dict[str, object]:
    """PJRT_Client_Create options for the XLA CUDA plugin's memory, from the environment."""
    options: dict[str, object] = {"preallocate": False}
    for var, (name, kind) in _GPU_OPTION_VARS.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue
        if kind is bool:
            if raw.lower() not in ("0", "1", "true", "false"):
                raise ValueError(f"torch_tpu: {var}={raw!r}; expected true or false")
            options[name] = raw.lower() in ("1", "true")
        elif kind is float:
            try:
                fraction = float(raw)
            except ValueError:
                fraction = -1.0
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"torch_tpu: {var}={raw!r}; expected a fraction in (0, 1]")
            options[name] = fraction
        else:
            options[name] = raw
    return options


# The CUDA libraries the plugin links by name, found in NVIDIA's pip packages (CUDA 13 puts
# them all in nvidia/cu13/lib). Loaded first, as jax's own loader for this plugin does, so the
# plugin finds them whichever torch is installed: a CUDA build of torch has loaded them already
# (as on the H200 checked), a CPU build has not.
_CUDA_LIBRARIES = (
    "libcudart.so.13",
    "libnvrtc.so.13",
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libnccl.so.2",
    "libcupti.so.13",
    "libcusparse.so.12",
    "libcusolver.so.12",
    "libcufft.so.12",
    "libnvshmem_host.so.3",
    "libcudnn.so.9",
)


def preload_cuda_libraries() -> None:
    """Loads the CUDA libraries from NVIDIA's pip packages where they are installed; a library
    not found there is left to the system's loader path."""
    import ctypes

    roots = [
        path / "lib"
        for name in ("cu13", "cuda_runtime", "cublas", "nccl", "cudnn", "cufft", "cusolver")
        if (path := _package_dir(f"nvidia.{name}")) is not None
    ]
    for library in _CUDA_LIBRARIES:
        for root in roots:
            if (root / library).exists():
                try:
                    ctypes.CDLL(str(root / library), mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    continue
                break


class PluginNotFoundError(RuntimeError):
    """No PJRT plugin could be found; the message says how to install one."""


class NoPluginInstalledError(PluginNotFoundError):
    """No plugin was asked for and none is installed: torch_tpu was installed without a plugin
    extra. Unlike a plugin asked for and missing, this leaves the device unavailable instead of
    failing the import."""


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a dotted name whose parent package is not installed
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _find_cpu() -> Path | None:
    root = _package_dir("lammps_jax_pjrt_cpu")
    if root is not None and (root / "pjrt_c_api_cpu_plugin.so").exists():
        return root / "pjrt_c_api_cpu_plugin.so"
    root = _package_dir("xla_plugins")
    if root is not None and (root / "xla_cpu_pjrt" / "xla_cpu_pjrt.so").exists():
        return root / "xla_cpu_pjrt" / "xla_cpu_pjrt.so"
    return None


def tpu_devices_present() -> bool:
    dev = Path(os.environ.get(DEV_ROOT_VAR, "/dev"))
    return any(dev.glob("accel*")) or any((dev / "vfio").glob("[0-9]*"))


def _find_tpu() -> Path | None:
    if not tpu_devices_present():
        return None
    root = _package_dir("libtpu")
    if root is not None and (root / "libtpu.so").exists():
        return root / "libtpu.so"
    return None


def _find_cuda() -> Path | None:
    root = _package_dir("jax_plugins")
    if root is None:
        return None
    for name in ("xla_cuda13", "xla_cuda12"):
        candidate = root / name / "xla_cuda_plugin.so"
        if candidate.exists():
            return candidate
    return None


_FINDERS = {"tpu": _find_tpu, "cuda": _find_cuda, "cpu": _find_cpu}


def resolve(spec: str | None = None) -> tuple[str, Path]:
    """Returns (kind, path) of the plugin to load; raises PluginNotFoundError if none."""
    spec = spec if spec is not None else os.environ.get(ENV_VAR, "")
    spec = spec.strip()
    if spec in _FINDERS:
        if spec == "tpu" and not tpu_devices_present():
            raise PluginNotFoundError(
                f"torch_tpu: {ENV_VAR}=tpu but this machine has no TPU devices (/dev/accel*, "
                "/dev/vfio/*); libtpu is not loaded without them"
            )
        path = _FINDERS[spec]()
        if path is None:
            raise PluginNotFoundError(
                f"torch_tpu: {ENV_VAR}={spec} but no {spec} PJRT plugin is installed; "
                f"install one with: {_INSTALL_HINT[spec]}"
            )
        return spec, path
    if spec:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise PluginNotFoundError(
                f"torch_tpu: {ENV_VAR}={spec!r} is neither a file nor one of cpu, tpu, cuda"
            )
        return "custom", path
    for kind in ("tpu", "cuda", "cpu"):
        path = _FINDERS[kind]()
        if path is not None:
            return kind, path
    hints = "; ".join(_INSTALL_HINT.values())
    raise NoPluginInstalledError(
        f"torch_tpu: no PJRT plugin is installed, so no tpu device is available. Install the "
        f"one for this machine with an extra: {hints}; or set {ENV_VAR} to a plugin's path."
    )
