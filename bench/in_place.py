"""In-place updates on tpu, with and without donation, side by side from one run: a few rows
written into a large tensor (a KV cache write) and an optimizer step alone, in each eager mode
and compiled.

    .venv/bin/python bench/in_place.py

An in-place result may be written into the buffer it replaces (the executable's parameter is
aliased to the result and the buffer donated) where nothing but its storage and executions
still reading it hold that buffer. Each row is timed as is and with TORCH_TPU_DONATE=0 (every
such update copies the whole buffer first), and counts the buffers updated in place per call
(torch_tpu.metrics()["donated_buffers"]). Times are medians of synchronized calls, in ms.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch

import torch_tpu

ROW_WRITE_ELEMENTS = 16 * 1024 * 1024  # 64 MB of float32


def median_ms(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        torch.tpu.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def row_write() -> Callable[[], object]:
    big = torch.zeros(ROW_WRITE_ELEMENTS, device="tpu")
    rows = torch.tensor([3, 9], device="tpu")
    values = torch.ones(2, device="tpu")
    return lambda: big.index_put_((rows,), values)


def optimizer_step(kind: str, compiled: bool) -> Callable[[], object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).to("tpu")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer = (
        torch.optim.SGD(model.parameters(), lr=0.01)
        if kind == "SGD"
        else torch.optim.AdamW(model.parameters(), lr=1e-3)
    )

    def step() -> None:
        optimizer.step()

    torch._dynamo.reset()
    return torch.compile(step, backend="tpu") if compiled else step


def measure(label: str, mode: str, make: Callable[[], Callable[[], object]]) -> None:
    torch_tpu.set_eager_mode(mode)  # type: ignore[arg-type]
    call = make()
    median_ms(call, 3)
    before = torch_tpu.metrics()["donated_buffers"]
    repeats = 30
    donating = median_ms(call, repeats)
    in_place = (torch_tpu.metrics()["donated_buffers"] - before) / repeats
    os.environ["TORCH_TPU_DONATE"] = "0"
    try:
        median_ms(call, 3)
        copying = median_ms(call, repeats)
    finally:
        del os.environ["TORCH_TPU_DONATE"]
    torch_tpu.set_eager_mode("strict")
    print(
        f"{label:<48} {donating:>8.3f} {copying:>9.3f} {copying / donating:>6.1f}x {in_place:>9.0f}"
    )


def main() -> None:
    print(f"{'in-place update (ms per synchronized call)':<48} {'ms':>8} {'DONATE=0':>9} "
          f"{'ratio':>7} {'in place':>9}")  # fmt: skip
    for mode in ("strict", "defer_and_fuse"):
        measure(f"2 rows into a 64 MB tensor, eager {mode}", mode, row_write)
    for kind in ("SGD", "AdamW"):
        for mode in ("strict", "defer_and_fuse"):
            measure(
                f"{kind} step, 1M parameters, eager {mode}",
                mode,
                lambda kind=kind: optimizer_step(kind, False),
            )
        measure(
            f"{kind} step, 1M parameters, torch.compile",
            "strict",
            lambda kind=kind: optimizer_step(kind, True),
        )


if __name__ == "__main__":
    main()
