"""One process, two CPU devices (TORCH_TPU_CPU_DEVICE_COUNT=2): the XLA collective engine
against the host engine's arithmetic on the CPU (what Gloo computes for the same call). Writes
one JSON line per case to $DIST_RESULTS.0."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.distributed as dist

from torch_tpu.distributed import _xla_engine as xla

DEVICES = [torch.device("tpu", 0), torch.device("tpu", 1)]
DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def inputs(dtype: torch.dtype, shape: tuple[int, ...] = (4, 6)) -> list[torch.Tensor]:
    out = []
    for i in range(len(DEVICES)):
        g = torch.Generator().manual_seed(i)
        if dtype == torch.bool:
            out.append(torch.rand(shape, generator=g) > 0.5)
        elif dtype.is_floating_point:
            out.append(torch.randint(-8, 9, shape, generator=g).to(dtype))  # exact in bf16
        else:
            out.append(torch.randint(-8, 9, shape, generator=g, dtype=dtype))
    return out


def on_devices(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.to(d) for t, d in zip(tensors, DEVICES, strict=True)]


def check(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for device, g, w in zip(DEVICES, got, want, strict=True):
        assert g.device == device, (g.device, device)
        torch.testing.assert_close(g.cpu(), w)


def reduce_on_cpu(parts: list[torch.Tensor], op: dist.ReduceOp) -> torch.Tensor:
    stacked = torch.stack(parts)
    if op == dist.ReduceOp.SUM:
        return stacked.any(0) if stacked.dtype == torch.bool else stacked.sum(0).to(stacked.dtype)
    if op == dist.ReduceOp.MAX:
        return stacked.amax(0)
    if op == dist.ReduceOp.MIN:
        return stacked.amin(0)
    if op == dist.ReduceOp.AVG:
        return stacked.sum(0) / len(parts)
    return stacked.prod(0).to(stacked.dtype)


def cases() -> dict[str, Callable[[], None]]:
    out: dict[str, Callable[[], None]] = {}
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
        if dtype in (torch.float32, torch.int64):
            ops.append(dist.ReduceOp.PRODUCT)
        if dtype == torch.float32:
            ops.append(dist.ReduceOp.AVG)
        for op in ops:

            def all_reduce(dtype: torch.dtype = dtype, op: dist.ReduceOp = op) -> None:
                parts = inputs(dtype)
                want = reduce_on_cpu(parts, op)
                check(xla.all_reduce(on_devices(parts), op), [want] * len(DEVICES))

            out[f"all_reduce[{op}]-{name}"] = all_reduce

        for dim in (0, 1):

            def all_gather(dtype: torch.dtype = dtype, dim: int = dim) -> None:
                parts = inputs(dtype)
                check(xla.all_gather(on_devices(parts), dim), [torch.cat(parts, dim)] * 2)

            def all_to_all(dtype: torch.dtype = dtype, dim: int = dim) -> None:
                parts = inputs(dtype)
                chunks = [p.chunk(len(DEVICES), dim) for p in parts]
                want = [torch.cat([c[i] for c in chunks], dim) for i in range(len(DEVICES))]
                check(xla.all_to_all(on_devices(parts), dim), want)

            out[f"all_gather[dim{dim}]-{name}"] = all_gather
            out[f"all_to_all[dim{dim}]-{name}"] = all_to_all

        if dtype != torch.bool:

            def reduce_scatter(dtype: torch.dtype = dtype) -> None:
                parts = inputs(dtype)
                want = reduce_on_cpu(parts, dist.ReduceOp.SUM).chunk(len(DEVICES), 0)
                check(xla.reduce_scatter(on_devices(parts)), list(want))

            out[f"reduce_scatter-{name}"] = reduce_scatter

        def permute(dtype: torch.dtype = dtype) -> None:
            parts = inputs(dtype)
            check(xla.permute(on_devices(parts)), parts[-1:] + parts[:-1])

        out[f"permute-{name}"] = permute

    def strided_input() -> None:
        parts = [p.t() for p in inputs(torch.float32)]  # non-contiguous views
        check(xla.all_reduce(on_devices(parts)), [parts[0] + parts[1]] * 2)

    def both_on_one_device_is_an_error() -> None:
        parts = [t.to(DEVICES[0]) for t in inputs(torch.float32)]
        try:
            xla.all_reduce(parts)
        except RuntimeError as error:
            assert "two tensors on tpu:0" in str(error), error
        else:
            raise AssertionError("no error")

    def mismatched_shapes_are_an_error() -> None:
        parts = on_devices([torch.zeros(2, 3), torch.zeros(3, 2)])
        try:
            xla.all_reduce(parts)
        except RuntimeError as error:
            assert "must match" in str(error), error
        else:
            raise AssertionError("no error")

    out["strided_input"] = strided_input
    out["both_on_one_device_is_an_error"] = both_on_one_device_is_an_error
    out["mismatched_shapes_are_an_error"] = mismatched_shapes_are_an_error
    return out


def main() -> None:
    from training_common import Results  # run as a script: its folder is on sys.path

    assert torch.tpu.device_count() == len(DEVICES), torch.tpu.device_count()
    results = Results(0)
    for name, fn in cases().items():
        results.case(name, fn)
    results.save()


if __name__ == "__main__":
    os.environ.setdefault("DIST_RESULTS", "/tmp/xla_engine")
    main()
