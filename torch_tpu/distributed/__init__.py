"""``tpu_dist``: the torch.distributed backend for tpu tensors, and ``torch.tpu.distributed``.

Registered when torch_tpu loads, for the ``tpu`` and ``cpu`` device types, so that
``init_process_group("tpu_dist")`` and ``init_process_group()`` (which then picks it for tpu
tensors) work unchanged under torchrun. The backend is C++ (``torch_tpu._C._TpuBackend``)
with two engines, chosen per plugin (``TORCH_TPU_DIST_ENGINE=host|xla`` forces one):

- *xla* (libtpu, the CUDA plugin): each collective is compiled into a program over every
  rank's device and PJRT moves the data between devices (see ``_multi_process``).
- *host* (the CPU plugin, and what the XLA engine does not take): tensors are staged through
  the host and the collective runs on a Gloo group over the same ranks.

CPU tensors (object collectives too) go to the Gloo group directly.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from . import _dtensor_attention
from ._multi_process import ENGINE_VAR, engine_for, requested_engine
from ._topology import order_ranks

__all__ = ["BACKEND_NAME", "device_attributes", "set_collective_checks", "topology_aware_mesh"]

BACKEND_NAME = "tpu_dist"


def _xla_assignment(host: Any, size: int) -> list[int]:
    """Each rank's PJRT device id, in group rank order, for the XLA engine; empty (the host
    engine) where this process's client does not span the group's processes, which is an
    error only where ``TORCH_TPU_DIST_ENGINE=xla`` asked for it."""
    from .. import _C, _state, device_module

    mine = _C._device_topology(device_module.current_device())
    own = torch.tensor([mine["id"][0], mine["process_index"][0]], dtype=torch.int64)
    gathered = [[torch.empty_like(own) for _ in range(size)]]
    host.allgather(gathered, [own]).wait()
    ids = [int(t[0]) for t in gathered[0]]
    processes = [int(t[1]) for t in gathered[0]]
    # Where the client spans the processes, each rank's device has its own global id and
    # process index; separate clients each see only their own device 0 of process 0.
    if len(set(ids)) == size and len(set(processes)) == size:
        return ids
    if requested_engine() == "xla":
        pairs = list(zip(ids, processes, strict=True))
        raise RuntimeError(
            f"tpu_dist: {ENGINE_VAR}=xla needs a PJRT client that spans the group's processes "
            f"(libtpu, or the CUDA plugin under torchrun), but the ranks' (device id, process "
            f"index) are {pairs}: each process's {_state.get('kind')} client "
            f"knows only its own device. Use the host engine ({ENGINE_VAR}=host, or unset)."
        )
    return []


def _create_backend(options: Any, backend_options: Any) -> dist.Backend:
    """The backend creator torch.distributed calls for each new group (extended API)."""
    from .. import _C, _state

    _dtensor_attention.register()  # DTensor's own import waits until a group exists
    engine = engine_for(str(_state.get("kind", "cpu")))
    timeout: datetime.timedelta = options.timeout
    host = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, timeout)
    assignment = _xla_assignment(host, options.group_size) if engine == "xla" else []
    return _C._TpuBackend(options.group_rank, options.group_size, host, timeout, assignment)


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
