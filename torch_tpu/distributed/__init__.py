"""``tpu_dist``: the torch.distributed backend for tpu tensors, and ``torch.tpu.distributed``.

Registered when torch_tpu loads, for the ``tpu`` and ``cpu`` device types, so that
``init_process_group("tpu_dist")`` and ``init_process_group()`` (which then picks it for tpu
tensors) work unchanged under torchrun. The backend is C++ (``torch_tpu._C._TpuBackend``):
collectives on tpu tensors are staged through the host and run on a Gloo group over the same
ranks; CPU tensors (object collectives too) go to that group directly.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ._topology import order_ranks

__all__ = ["BACKEND_NAME", "device_attributes", "set_collective_checks", "topology_aware_mesh"]

BACKEND_NAME = "tpu_dist"
ENGINE_VAR = "TORCH_TPU_DIST_ENGINE"


def _engine() -> str:
    engine = os.environ.get(ENGINE_VAR, "host").strip() or "host"
    if engine == "xla":
        raise NotImplementedError(
            f"tpu_dist: {ENGINE_VAR}=xla (collectives compiled into XLA executables) is not "
            "available yet; unset it or use 'host' (host-staged collectives over Gloo)"
        )
    if engine != "host":
        raise ValueError(f"tpu_dist: {ENGINE_VAR}={engine!r}; expected 'host' or 'xla'")
    return engine


def _create_backend(options: Any, backend_options: Any) -> dist.Backend:
    """The backend creator torch.distributed calls for each new group (extended API)."""
    from .. import _C

    _engine()
    timeout: datetime.timedelta = options.timeout
    host = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, timeout)
    return _C._TpuBackend(options.group_rank, options.group_size, host, timeout)


def set_collective_checks(enabled: bool) -> bool:
    """Turns the cross-rank agreement check on or off; returns the previous setting.

    With it on (the default, or ``TORCH_TPU_DIST_CHECK=1``), every collective first exchanges
    (collective, dtype, element count) with the other ranks, overlapped with staging, so a
    mismatched call raises an error naming both sides instead of hanging or mixing bytes. It
    costs one small host all_gather per collective; turn it off on every rank alike once a
    program is known to be consistent.
    """
    from .. import _C

    previous = bool(_C._collective_checks_enabled())
    _C._set_collective_checks(bool(enabled))
    return previous


def register() -> None:
    """Registers ``tpu_dist`` with torch.distributed (idempotent)."""
    if not dist.is_available() or BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(
        BACKEND_NAME, _create_backend, extended_api=True, devices=["tpu", "cpu"]
    )
    _allow_bf16_comm_hooks()


_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")


def _allow_bf16_comm_hooks() -> None:
    """DDP refuses torch's bf16 compression hooks by name unless CUDA+NCCL or XPU+XCCL is
    present; tpu_dist reduces bfloat16 too, so a tpu model's check runs on a renamed proxy
    (every other check, signature included, still applies)."""
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel._check_comm_hook

    def check(self: DistributedDataParallel, hook: Any) -> None:
        if getattr(self, "device_type", None) == "tpu" and getattr(hook, "__name__", "") in (
            _BF16_HOOKS
        ):
            proxy = functools.wraps(hook)(lambda *args, **kwargs: hook(*args, **kwargs))
            proxy.__name__ = f"tpu_{hook.__name__}"
            return original(self, proxy)
        return original(self, hook)

    DistributedDataParallel._check_comm_hook = check  # type: ignore[method-assign]


def device_attributes(device: int | None = None) -> dict[str, list[int]]:
    """Where this process's tpu device sits: PJRT's integer attributes (``coords``,
    ``core_on_chip``, ``slice_index`` on TPU), ``process_index`` and ``id``."""
    from .. import _C, device_module

    index = device_module.current_device() if device is None else device
    return {k: list(v) for k, v in _C._device_topology(index).items()}


def topology_aware_mesh(
    mesh_shape: Sequence[int],
    mesh_dim_names: Sequence[str] | None = None,
    *,
    dcn_mesh_shape: Sequence[int] | None = None,
    group: dist.ProcessGroup | None = None,
    attributes: Sequence[dict[str, Sequence[int]]] | None = None,
) -> Any:
    """A ``DeviceMesh`` over the default group whose dimensions follow the interconnect.

    Ranks all-gather their device attributes; neighbouring positions along each dimension are
    then neighbouring chips, and the ``dcn_mesh_shape`` part of each dimension (default: all
    ones) spans slices, so a dimension of ``dcn_mesh_shape`` size > 1 replicates across slices
    while the rest shards within one. On the CPU plugin (no coordinates) this is rank order.
    ``attributes`` (one dict per rank) replaces the gathered ones, for tests and planning.
    """
    from torch.distributed.device_mesh import DeviceMesh

    if not dist.is_initialized():
        raise RuntimeError(
            "topology_aware_mesh needs torch.distributed initialised "
            '(dist.init_process_group("tpu_dist"))'
        )
    if attributes is None:
        gathered: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, device_attributes(), group=group)
        attributes = gathered
    order = order_ranks(attributes, list(mesh_shape), dcn_mesh_shape)
    ranks = dist.get_process_group_ranks(group) if group is not None else None
    if ranks is not None:
        order = [ranks[r] for r in order]
    mesh = torch.tensor(order, dtype=torch.int64).reshape(tuple(mesh_shape))
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
    return DeviceMesh("tpu", mesh, mesh_dim_names=names)
