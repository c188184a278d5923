"""The XLA collective engine, in one process over several local devices: each collective is
one replicated executable (StableHLO all_reduce, all_gather, reduce_scatter, all_to_all,
collective_permute) launched on every device at once, with no host copy.

tpu_dist's XLA engine runs the same lowering across processes (one replica per rank) on
plugins whose client spans them (libtpu, the CUDA plugin). The CPU plugin has no
cross-process transport, so here it runs over the CPU devices of one process
(``TORCH_TPU_CPU_DEVICE_COUNT=2``); its tests compare it with the host-staged engine's
arithmetic on the CPU.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _reducer(op: dist.ReduceOp, dtype: torch.dtype) -> str:
    """XLA's reducer for `op` on `dtype`, as tpu_dist's engine across processes picks it."""
    from .. import _C

    # PREMUL_SUM's factor travels in the op object, which this one-process API does not read.
    reducer = None if op == dist.ReduceOp.PREMUL_SUM else _C._xla_reducer(op, dtype)
    if reducer is None:
        raise ValueError(f"tpu_dist xla: reduce op {op} is not supported for {dtype} tensors")
    return reducer


def _run(kind: str, tensors: list[torch.Tensor], reducer: str = "add", dim: int = 0):
    from .. import _C

    return list(_C._xla_collective(kind, tensors, reducer, dim))


def all_reduce(
    tensors: list[torch.Tensor], op: dist.ReduceOp = dist.ReduceOp.SUM
) -> list[torch.Tensor]:
    """The reduction of every device's tensor, on each device."""
    out = _run("all_reduce", tensors, _reducer(op, tensors[0].dtype))
    return [t / len(tensors) for t in out] if op == dist.ReduceOp.AVG else out


def all_gather(tensors: list[torch.Tensor], dim: int = 0) -> list[torch.Tensor]:
    """Every device's tensor concatenated along `dim`, on each device."""
    return _run("all_gather", tensors, dim=dim)


def reduce_scatter(
    tensors: list[torch.Tensor], op: dist.ReduceOp = dist.ReduceOp.SUM, dim: int = 0
) -> list[torch.Tensor]:
    """Device i gets chunk i (along `dim`) of the reduction of every device's tensor."""
    out = _run("reduce_scatter", tensors, _reducer(op, tensors[0].dtype), dim)
    return [t / len(tensors) for t in out] if op == dist.ReduceOp.AVG else out


def all_to_all(tensors: list[torch.Tensor], dim: int = 0) -> list[torch.Tensor]:
    """Device i gets chunk i (along `dim`) of every device's tensor, concatenated in device
    order."""
    return _run("all_to_all", tensors, dim=dim)


def permute(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Device i's tensor moves to device i + 1 (a ring), as pipeline stages pass activations."""
    return _run("permute", tensors)
