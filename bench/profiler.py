"""What torch.profiler costs on tpu: the TinyGPT training step (tiny_lm_training_step) with the
profiler off, and on with CPU and device activities, from one run.

    .venv/bin/python bench/profiler.py [--steps 20] [--repeats 5]

Each repeat times `--steps` steps off, then the same number while one profile records, in
Strict and DeferAndFuse; the table prints the median ms per step of each, their ratio, and
the one-time cost of stopping the profile and reading key_averages() (torch's own trace
processing, which grows with the number of recorded events).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu.testing.tiny_gpt import tiny_lm_training_step


def steps_ms(step: Callable[[], float], steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def profiled(step: Callable[[], float], steps: int) -> tuple[float, float]:
    """(ms per step while the profiler records, ms to stop it and read key_averages())."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        per_step = steps_ms(step, steps)
        stopping = time.perf_counter()
    prof.key_averages()
    return per_step, (time.perf_counter() - stopping) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{'mode':<14}{'off ms/step':>13}{'profiled ms/step':>18}{'ratio':>8}"
        f"{'stop + key_averages ms':>24}"
    )
    for mode in ("strict", "defer_and_fuse"):
        with torch_tpu.eager_mode(mode):
            step = tiny_lm_training_step(torch.device("tpu"))
            for _ in range(5):
                step()  # compiles
            off, on, finish = [], [], []
            for _ in range(args.repeats):
                off.append(steps_ms(step, args.steps))
                per_step, finishing = profiled(step, args.steps)
                on.append(per_step)
                finish.append(finishing)
        a, b = statistics.median(off), statistics.median(on)
        print(f"{mode:<14}{a:>13.2f}{b:>18.2f}{b / a:>7.2f}x{statistics.median(finish):>24.0f}")


if __name__ == "__main__":
    main()
