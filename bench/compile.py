"""Training-step time of a small transformer, side by side from one run: torch.compile on tpu,
eager Strict and DeferAndFuse on tpu, torch CPU eager and torch.compile (inductor) on CPU.

    .venv/bin/python bench/compile.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

import torch_tpu
from torch_tpu.testing.tiny_gpt import tiny_lm_training_step


def ms_per_step(step: Callable[[], float], warmup: int = 3, repeats: int = 20) -> float:
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> None:
    rows: dict[str, float] = {}
    torch._dynamo.reset()
    rows["tpu, torch.compile(backend='tpu')"] = ms_per_step(tiny_lm_training_step("tpu", "tpu"))
    torch_tpu.set_eager_mode("strict")
    rows["tpu, eager Strict"] = ms_per_step(tiny_lm_training_step("tpu", None))
    torch_tpu.set_eager_mode("defer_and_fuse")
    rows["tpu, eager DeferAndFuse"] = ms_per_step(tiny_lm_training_step("tpu", None))
    torch_tpu.set_eager_mode("strict")
    rows["cpu, torch eager"] = ms_per_step(tiny_lm_training_step("cpu", None))
    torch._dynamo.reset()
    rows["cpu, torch.compile (inductor)"] = ms_per_step(tiny_lm_training_step("cpu", "inductor"))
    base = rows["tpu, eager Strict"]
    print(
        f"{'TinyGPT training step (dim 64, 2 layers, batch 8x32)':<40} {'ms/step':>9} "
        f"{'vs tpu Strict':>14}"
    )
    for name, ms in rows.items():
        print(f"{name:<52} {ms:>9.2f} {base / ms:>13.2f}x")


if __name__ == "__main__":
    main()
