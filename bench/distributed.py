"""tpu_dist on two processes, side by side from one run:

1. all_reduce time and bus bandwidth for 1 KB - 64 MB float32 on tpu tensors (the host-staged
   engine; with the cross-rank agreement check, the default, and without it) next to the same
   call on CPU tensors through Gloo, and their ratios; beside them, a plain `copy_` round trip of
   the same bytes through the host (what staging would cost without the backend's pinned,
   zero-copy buffers); the four take turns per repeat;
2. a DDP and an FSDP2 training step of a small transformer on 2 processes (tpu, tpu_dist) next
   to the same step in 1 process on tpu, and next to 2 processes on CPU tensors with Gloo.

    .venv/bin/python bench/distributed.py          # launches itself under torchrun (2 ranks)
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_tpu.distributed import set_collective_checks
from torch_tpu.testing.tiny_gpt import TinyGPT

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
VOCAB, LENGTH, BATCH = 256, 64, 16


def seconds(fn: Callable[[], object], sync: Callable[[], object], repeats: int) -> float:
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def interleaved(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median seconds of each run, the runs taking turns so drift on the shared cores hits all."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(run())
    return {name: statistics.median(times) for name, times in samples.items()}


def all_reduce_table(gloo: dist.ProcessGroup) -> list[str]:
    world = dist.get_world_size()
    lines = [
        f"{'all_reduce float32':>18} {'tpu ms':>9} {'unchecked':>9} {'gloo ms':>9} "
        f"{'copies ms':>9} {'tpu GB/s':>9} {'gloo GB/s':>9} {'tpu/gloo':>9} {'unchecked/gloo':>15}"
    ]

    def timed(fn: Callable[[], object], sync: Callable[[], object], checks: bool) -> float:
        set_collective_checks(checks)
        dist.barrier()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    for nbytes in SIZES:
        n = nbytes // 4
        repeats = 30 if nbytes <= (4 << 20) else 10
        on_tpu = torch.ones(n, device="tpu")
        on_cpu = torch.ones(n)
        staged = torch.empty(n)

        def copies(on_tpu: torch.Tensor = on_tpu, staged: torch.Tensor = staged) -> None:
            # A user's own round trip through the host (copy_ down, then up), for comparison
            # with the backend's staging, which uses cached pinned buffers and zero-copy uploads.
            staged.copy_(on_tpu)
            on_tpu.copy_(staged)

        dist.all_reduce(on_tpu)
        torch.tpu.synchronize()
        tpu_sync = torch.tpu.synchronize
        med = interleaved(
            {
                "tpu": functools.partial(
                    timed, functools.partial(dist.all_reduce, on_tpu), tpu_sync, True
                ),
                "unchecked": functools.partial(
                    timed, functools.partial(dist.all_reduce, on_tpu), tpu_sync, False
                ),
                "gloo": functools.partial(
                    timed,
                    functools.partial(dist.all_reduce, on_cpu, group=gloo),
                    lambda: None,
                    True,
                ),
                "copies": functools.partial(timed, copies, tpu_sync, True),
            },
            repeats,
        )
        set_collective_checks(True)
        bus = 2 * (world - 1) / world * nbytes / 1e9  # bytes each rank sends and receives
        lines.append(
            f"{_size(nbytes):>18} {med['tpu'] * 1e3:>9.3f} {med['unchecked'] * 1e3:>9.3f} "
            f"{med['gloo'] * 1e3:>9.3f} {med['copies'] * 1e3:>9.3f} "
            f"{bus / med['tpu']:>9.3f} {bus / med['gloo']:>9.3f} "
            f"{med['tpu'] / med['gloo']:>8.2f}x {med['unchecked'] / med['gloo']:>14.2f}x"
        )
    return lines


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= (1 << 20) else f"{nbytes >> 10} KB"


def lm_step(model: torch.nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> float:
    opt.zero_grad()
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return loss


def step_ms(wrap: str, device: str, group: dist.ProcessGroup | None, local_batch: int) -> float:
    torch.manual_seed(0)
    model = TinyGPT(vocab=VOCAB, dim=128, heads=4, layers=2, max_len=LENGTH).to(device)
    if wrap == "ddp":
        model = DDP(model, process_group=group)
    elif wrap == "fsdp2":
        mesh = init_device_mesh(device, (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tokens = torch.randint(0, VOCAB, (local_batch, LENGTH + 1)).to(device)
    for _ in range(3):
        lm_step(model, opt, tokens).item()
    return seconds(lambda: lm_step(model, opt, tokens).item(), lambda: None, 10) * 1e3


def training_table(gloo: dist.ProcessGroup) -> list[str]:
    world = dist.get_world_size()
    per_rank = BATCH // world
    rows = {
        "1 process, tpu (full batch)": step_ms("none", "tpu", None, BATCH),
        f"DDP, {world} processes, tpu (tpu_dist)": step_ms("ddp", "tpu", None, per_rank),
        f"DDP, {world} processes, cpu (Gloo)": step_ms("ddp", "cpu", gloo, per_rank),
        f"FSDP2, {world} processes, tpu (tpu_dist)": step_ms("fsdp2", "tpu", None, per_rank),
    }
    base = rows["1 process, tpu (full batch)"]
    lines = [
        f"{'TinyGPT step (dim 128, 2 layers, batch 16x64)':<46} {'ms/step':>9} {'vs 1 process':>13}"
    ]
    for name, ms in rows.items():
        lines.append(f"{name:<46} {ms:>9.2f} {ms / base:>12.2f}x")
    return lines


def worker() -> None:
    dist.init_process_group("tpu_dist")
    gloo = dist.new_group(backend="gloo")
    tables = [all_reduce_table(gloo), training_table(gloo)]
    if dist.get_rank() == 0:
        for table in tables:
            print("\n".join(table))
            print()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    if "LOCAL_RANK" in os.environ:
        worker()
        return
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node=2", __file__]
    sys.exit(subprocess.call(command))


if __name__ == "__main__":
    main()
