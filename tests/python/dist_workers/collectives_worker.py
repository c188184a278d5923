"""torchrun worker: every collective x dtype x async_op on tpu tensors through tpu_dist, each
compared with the same call on CPU tensors through a Gloo group over the same ranks.

Writes one JSON line per case to $DIST_RESULTS.<rank>: {"case": ..., "error": null | "..."}.
"""

from __future__ import annotations

import datetime
import json
import os
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import torch_tpu

TPU = torch.device("tpu")
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
    "complex64": torch.complex64,
}


def make(seed: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-5, 6, shape, generator=g, dtype=dtype)


def run_both(
    call: Callable[[Callable[[torch.Tensor], torch.Tensor], Any, bool], list[torch.Tensor]],
    tpu_group: Any,
    gloo_group: Any,
    async_op: bool,
) -> None:
    """`call(place, group, async_op)` builds its tensors with `place` and returns the tensors to
    compare; it runs once on tpu (tpu_dist) and once on CPU (Gloo)."""
    got = call(lambda t: t.to(TPU), tpu_group, async_op)
    want = call(lambda t: t, gloo_group, False)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "tpu", f"result on {g.device}"
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)


def finish(work: Any, async_op: bool) -> None:
    if async_op:
        assert work is not None
        work.wait()
        assert work.is_completed()
        work.get_future().wait()
    else:
        assert work is None


def cases(rank: int, world: int) -> dict[str, Callable[[Any, Any, bool], None]]:
    out: dict[str, Callable[[Any, Any, bool], None]] = {}
    for name, dtype in DTYPES.items():
        reduce_ops = ["SUM"] if dtype != torch.bool else ["MAX", "MIN"]
        if dtype in (torch.float32, torch.int64):
            reduce_ops = ["SUM", "MIN", "MAX", "PRODUCT"]
        if dtype == torch.float32:
            reduce_ops.append("AVG")

        def all_reduce(place, group, async_op, dtype=dtype, op_name="SUM"):  # noqa: ANN001
            op = getattr(dist.ReduceOp, op_name)
            if op_name == "AVG" and group is not None and "gloo" in str(dist.get_backend(group)):
                x = place(make(rank, (3, 5), dtype))
                dist.all_reduce(x, group=group)
                return [x / world]
            x = place(make(rank, (3, 5), dtype))
            finish(dist.all_reduce(x, op=op, group=group, async_op=async_op), async_op)
            return [x]

        for op_name in reduce_ops:
            out[f"all_reduce[{op_name}]-{name}"] = lambda p, g, a, f=all_reduce, o=op_name: f(
                p, g, a, op_name=o
            )

        def broadcast(place, group, async_op, dtype=dtype):  # noqa: ANN001
            x = place(make(rank + 10, (4, 3), dtype))
            finish(dist.broadcast(x, src=1, group=group, async_op=async_op), async_op)
            return [x]

        def reduce(place, group, async_op, dtype=dtype):  # noqa: ANN001
            x = place(make(rank + 20, (6,), dtype))
            op = dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM
            finish(dist.reduce(x, dst=0, op=op, group=group, async_op=async_op), async_op)
            return [x] if rank == 0 else []

        def all_gather(place, group, async_op, dtype=dtype):  # noqa: ANN001
            outs = [place(torch.zeros(2, 3, dtype=dtype)) for _ in range(world)]
            x = place(make(rank + 30, (2, 3), dtype))
            finish(dist.all_gather(outs, x, group=group, async_op=async_op), async_op)
            return outs

        def all_gather_into_tensor(place, group, async_op, dtype=dtype):  # noqa: ANN001
            out = place(torch.zeros(world * 4, dtype=dtype))
            x = place(make(rank + 40, (4,), dtype))
            work = dist.all_gather_into_tensor(out, x, group=group, async_op=async_op)
            finish(work, async_op)
            return [out]

        def all_gather_into_own_view(place, group, async_op, dtype=dtype):  # noqa: ANN001
            # FSDP2's pattern: the input is this rank's chunk of the output buffer.
            out = place(torch.zeros(world * 4, dtype=dtype))
            chunk = out.narrow(0, rank * 4, 4)
            chunk.copy_(place(make(rank + 45, (4,), dtype)))
            work = dist.all_gather_into_tensor(out, chunk, group=group, async_op=async_op)
            finish(work, async_op)
            return [out]

        def reduce_scatter(place, group, async_op, dtype=dtype):  # noqa: ANN001
            ins = [place(make(rank * 7 + i, (3,), dtype)) for i in range(world)]
            out = place(torch.zeros(3, dtype=dtype))
            op = dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM
            finish(dist.reduce_scatter(out, ins, op=op, group=group, async_op=async_op), async_op)
            return [out]

        def reduce_scatter_tensor(place, group, async_op, dtype=dtype):  # noqa: ANN001
            x = place(make(rank + 50, (world * 5,), dtype))
            out = place(torch.zeros(5, dtype=dtype))
            op = dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM
            work = dist.reduce_scatter_tensor(out, x, op=op, group=group, async_op=async_op)
            finish(work, async_op)
            return [out]

        def all_to_all(place, group, async_op, dtype=dtype):  # noqa: ANN001
            ins = [place(make(rank * 3 + i, (2, 3), dtype)) for i in range(world)]
            outs = [place(torch.zeros(2, 3, dtype=dtype)) for _ in range(world)]
            finish(dist.all_to_all(outs, ins, group=group, async_op=async_op), async_op)
            return outs

        def all_to_all_single(place, group, async_op, dtype=dtype):  # noqa: ANN001
            x = place(make(rank + 60, (world * 2, 3), dtype))
            out = place(torch.zeros(world * 2, 3, dtype=dtype))
            work = dist.all_to_all_single(out, x, group=group, async_op=async_op)
            finish(work, async_op)
            return [out]

        def all_to_all_single_uneven(place, group, async_op, dtype=dtype):  # noqa: ANN001
            # rank r sends (r + 1 + j) rows to rank j
            in_splits = [rank + 1 + j for j in range(world)]
            out_splits = [j + 1 + rank for j in range(world)]
            x = place(make(rank + 70, (sum(in_splits), 2), dtype))
            out = place(torch.zeros(sum(out_splits), 2, dtype=dtype))
            work = dist.all_to_all_single(
                out, x, out_splits, in_splits, group=group, async_op=async_op
            )
            finish(work, async_op)
            return [out]

        def scatter(place, group, async_op, dtype=dtype):  # noqa: ANN001
            src = [place(make(80 + i, (2, 2), dtype)) for i in range(world)] if rank == 0 else None
            out = place(torch.zeros(2, 2, dtype=dtype))
            finish(dist.scatter(out, src, src=0, group=group, async_op=async_op), async_op)
            return [out]

        def gather(place, group, async_op, dtype=dtype):  # noqa: ANN001
            # Gloo gathers no complex tensors: its reference moves their real view.
            real = dtype.is_complex and group is not None
            outs = [torch.zeros(3, dtype=dtype) for _ in range(world)] if rank == 1 else None
            x = make(rank + 90, (3,), dtype)
            if real:
                outs = [torch.view_as_real(o) for o in outs] if outs else None
                x = torch.view_as_real(x)
            outs = [place(o) for o in outs] if outs else None
            finish(dist.gather(place(x), outs, dst=1, group=group, async_op=async_op), async_op)
            if real and outs:
                outs = [torch.view_as_complex(o) for o in outs]
            return outs or []

        def send_recv(place, group, async_op, dtype=dtype):  # noqa: ANN001
            peer = (rank + 1) % world
            x = place(make(rank + 100, (5,), dtype))
            y = place(torch.zeros(5, dtype=dtype))
            if async_op:
                ops = [
                    dist.P2POp(dist.isend, x, peer, group),
                    dist.P2POp(dist.irecv, y, peer, group),
                ]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
            elif rank == 0:
                dist.send(x, peer, group=group)
                dist.recv(y, peer, group=group)
            else:
                dist.recv(y, peer, group=group)
                dist.send(x, peer, group=group)
            return [y]

        for fn in (
            broadcast,
            reduce,
            all_gather,
            all_gather_into_tensor,
            all_gather_into_own_view,
            reduce_scatter,
            reduce_scatter_tensor,
            all_to_all,
            all_to_all_single,
            all_to_all_single_uneven,
            scatter,
            gather,
            send_recv,
        ):
            out[f"{fn.__name__}-{name}"] = fn
    return out


def special_cases(rank: int, world: int) -> dict[str, Callable[[], None]]:
    """all_to_all of tensors of different shapes, which Gloo's list form does not take:
    checked against the values it must produce."""

    def all_to_all_uneven(dtype: torch.dtype) -> None:
        # rank r sends make(r * 3 + i) of shape (i + 1, 2) to rank i
        ins = [make(rank * 3 + i, (i + 1, 2), dtype).to(TPU) for i in range(world)]
        outs = [torch.zeros(rank + 1, 2, dtype=dtype, device=TPU) for _ in range(world)]
        dist.all_to_all(outs, ins)
        for j, out in enumerate(outs):
            torch.testing.assert_close(out.cpu(), make(j * 3 + rank, (rank + 1, 2), dtype))

    def float8_moves(dtype: torch.dtype) -> None:
        # Gloo takes no float8 tensors, so the expected values are built here, bit for bit.
        def mine(r: int, n: int = 6) -> torch.Tensor:
            return make(100 + r, (n,), torch.float32).to(dtype)

        def bits(t: torch.Tensor) -> torch.Tensor:
            return t.cpu().view(torch.uint8)

        gathered = [torch.empty(6, dtype=dtype, device=TPU) for _ in range(world)]
        dist.all_gather(gathered, mine(rank).to(TPU))
        for r, got in enumerate(gathered):
            assert torch.equal(bits(got), bits(mine(r)))
        flat = torch.empty(6 * world, dtype=dtype, device=TPU)
        work = dist.all_gather_into_tensor(flat, mine(rank).to(TPU), async_op=True)
        work.wait()
        assert torch.equal(bits(flat), bits(torch.cat([mine(r) for r in range(world)])))
        box = mine(rank).to(TPU)
        dist.broadcast(box, src=0)
        assert torch.equal(bits(box), bits(mine(0)))
        out = torch.empty(2 * world, dtype=dtype, device=TPU)
        dist.all_to_all_single(out, mine(rank, 2 * world).to(TPU))
        want = torch.cat([mine(r, 2 * world)[2 * rank : 2 * rank + 2] for r in range(world)])
        assert torch.equal(bits(out), bits(want))
        if rank == 0:
            dist.send(mine(0).to(TPU), dst=1)
        elif rank == 1:
            got = torch.empty(6, dtype=dtype, device=TPU)
            dist.recv(got, src=0)
            assert torch.equal(bits(got), bits(mine(0)))
        x = mine(rank).to(TPU)
        try:
            dist.all_reduce(x)
        except RuntimeError as error:
            assert "all_reduce cannot reduce float8" in str(error), error
        else:
            raise AssertionError("all_reduce of float8 tensors did not refuse")
        assert torch.equal(bits(x), bits(mine(rank)))  # left as it was

    float8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    return {
        **{
            f"all_to_all_uneven-{name}": (lambda d=dtype: all_to_all_uneven(d))
            for name, dtype in DTYPES.items()
        },
        **{
            f"float8_moves-{name}": (lambda d=dtype: float8_moves(d))
            for name, dtype in float8.items()
        },
    }


def main() -> None:
    # A short group timeout: a case that fails on one rank only must not hang the other.
    timeout = datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT", "60")))
    dist.init_process_group("tpu_dist", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.tpu.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.tpu.device_count())
    gloo = dist.new_group(backend="gloo")
    results = []

    def record(case: str, fn: Callable[[], None]) -> None:
        if os.environ.get("DIST_VERBOSE"):
            print(f"[rank {rank}] {case}", flush=True)
        try:
            fn()
            results.append({"case": case, "error": None})
        except Exception:  # noqa: BLE001 - each case reports its own failure
            results.append({"case": case, "error": traceback.format_exc(limit=4)})

    for case, fn in cases(rank, world).items():
        for async_op in (False, True):
            record(
                f"{case}-{'async' if async_op else 'sync'}",
                lambda f=fn, a=async_op: run_both(f, None, gloo, a),
            )
    for case, fn in special_cases(rank, world).items():
        record(case, fn)

    def coalesced() -> None:
        xs = [make(rank + i, (3,), torch.float32).to(TPU) for i in range(3)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for x in xs:
                dist.all_reduce(x)
        cm.wait()
        for i, x in enumerate(xs):
            want = sum(make(r + i, (3,), torch.float32) for r in range(world))
            torch.testing.assert_close(x.cpu(), want)

    def subgroups() -> None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("tpu", (1, world), mesh_dim_names=("dp", "tp"))
        for dim in ("dp", "tp"):
            group = mesh.get_group(dim)
            x = make(rank, (4,), torch.float32).to(TPU)
            dist.all_reduce(x, group=group)
            ranks = dist.get_process_group_ranks(group)
            want = sum(make(r, (4,), torch.float32) for r in ranks)
            torch.testing.assert_close(x.cpu(), want)
        solo = dist.new_group([rank % world])  # every rank builds every group, in order
        other = dist.new_group([(rank + 1) % world])
        del other
        y = torch.ones(2, device=TPU)
        dist.all_reduce(y, group=solo)
        torch.testing.assert_close(y.cpu(), torch.ones(2))

    def objects() -> None:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, {"rank": rank, "v": [rank] * 3})
        assert gathered == [{"rank": r, "v": [r] * 3} for r in range(world)]
        box = [{"from": rank}] if rank == 0 else [None]
        dist.broadcast_object_list(box, src=0)
        assert box == [{"from": 0}]

    def cpu_tensors_on_the_same_group() -> None:
        x = make(rank, (5,), torch.float32)
        dist.all_reduce(x)
        torch.testing.assert_close(x, sum(make(r, (5,), torch.float32) for r in range(world)))

    def barrier_and_pending_work() -> None:
        # Work queued (or deferred) on the device is materialized before the collective reads.
        x = torch.zeros(8, device=TPU)
        for _ in range(5):
            x = x + (rank + 1)
        dist.barrier()
        dist.all_reduce(x)
        torch.testing.assert_close(x.cpu(), torch.full((8,), 5.0 * sum(range(1, world + 1))))

    def topology_aware_mesh() -> None:
        mesh = torch.tpu.distributed.topology_aware_mesh((world,), ("dp",))
        assert mesh.mesh.tolist() == list(range(world)), mesh.mesh  # CPU plugin: rank order
        assert mesh.device_type == "tpu"
        x = torch.ones(2, device=TPU)
        dist.all_reduce(x, group=mesh.get_group("dp"))
        torch.testing.assert_close(x.cpu(), torch.full((2,), float(world)))
        # Injected coordinates: rank r sits at x = world - 1 - r, so the mesh runs backwards.
        fake = [{"coords": [world - 1 - r, 0, 0], "core_on_chip": [0]} for r in range(world)]
        flipped = torch.tpu.distributed.topology_aware_mesh((world,), ("dp",), attributes=fake)
        assert flipped.mesh.tolist() == list(reversed(range(world))), flipped.mesh

    def staged_results_survive_buffer_reuse() -> None:
        # Results take over their host staging buffers (zero-copy on the CPU plugin); a buffer
        # goes back to the cache only when its device buffer dies, so later collectives of
        # the same size that reuse cached blocks never change earlier results.
        n = 1 << 16
        kept = []
        for i in range(3):
            x = torch.full((n,), float(rank + i), device=TPU)
            dist.all_reduce(x)
            kept.append(x)
            for j in range(3):  # results freed at once: their blocks cycle through the cache
                y = torch.full((n,), -100.0 - j, device=TPU)
                dist.all_reduce(y)
                torch.testing.assert_close(y.cpu(), torch.full((n,), (-100.0 - j) * world))
                del y
        base = sum(range(world))
        for i, x in enumerate(kept):
            torch.testing.assert_close(x.cpu(), torch.full((n,), float(base + i * world)))
            x.add_(1)  # the device tensor stays writable: its next value is a new buffer
            torch.testing.assert_close(x.cpu(), torch.full((n,), float(base + i * world + 1)))

    def pending_work_under_defer_and_fuse() -> None:
        with torch_tpu.eager_mode("defer_and_fuse"):
            barrier_and_pending_work()

    for case, fn in (
        ("topology_aware_mesh", topology_aware_mesh),
        ("staged_results_survive_buffer_reuse", staged_results_survive_buffer_reuse),
        ("pending_work_under_defer_and_fuse", pending_work_under_defer_and_fuse),
        ("coalesced", coalesced),
        ("subgroups", subgroups),
        ("objects", objects),
        ("cpu_tensors_on_the_same_group", cpu_tensors_on_the_same_group),
        ("barrier_and_pending_work", barrier_and_pending_work),
    ):
        record(case, fn)

    path = f"{os.environ['DIST_RESULTS']}.{rank}"
    with open(path, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
