"""A training soak per eager mode: how the process's memory grows per step once warm.

    .venv/bin/python tools/soak.py [--steps 3000] [--modes strict defer_and_fuse debug compiled]

Each mode runs in a process of its own: TinyGPT's AdamW step (the benchmarks' workload, a new
host scalar every step through the optimizer's bias correction), the loss read every step.
After a warm-up of a tenth of the steps, the resident set (/proc/self/statm) and the heap in
use (mallinfo2: allocated chunks plus mmapped blocks, so freed memory that the allocator keeps
does not hide growth) are sampled every 50 steps; the table gives the least-squares slope of
each, in bytes per step, over all measured steps and over their second half (a slope that falls
there is levelling off), and the growth over the measured steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares bytes per step."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points)
    return covariance / variance


def soak(mode: str, steps: int) -> dict[str, float]:
    import torch

    import torch_tpu
    from torch_tpu.testing.process_memory import heap_bytes, rss_bytes
    from torch_tpu.testing.tiny_gpt import tiny_lm_training_step

    torch_tpu.set_eager_mode("strict" if mode == "compiled" else mode)  # type: ignore[arg-type]
    step = tiny_lm_training_step("tpu", compile_backend="tpu" if mode == "compiled" else None)
    warm = max(steps // 10, 50)
    for _ in range(warm):
        step()
    rss: list[tuple[int, int]] = []
    heap: list[tuple[int, int]] = []
    for i in range(steps):
        step()
        if i % 50 == 0:
            torch.tpu.synchronize()
            rss.append((i, rss_bytes()))
            heap.append((i, heap_bytes()))
    half = len(rss) // 2
    return {
        "rss_slope": slope(rss),
        "rss_slope_late": slope(rss[half:]),
        "heap_slope": slope(heap),
        "heap_slope_late": slope(heap[half:]),
        "rss_growth": rss[-1][1] - rss[0][1],
        "heap_growth": heap[-1][1] - heap[0][1],
        "rss_end": rss[-1][1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument(
        "--modes", nargs="+", default=["strict", "defer_and_fuse", "debug", "compiled"]
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(soak(args.worker, args.steps)))
        return
    print(f"TinyGPT AdamW step, {args.steps} measured steps after a warm-up, sampled every 50\n")
    print(
        "| mode | RSS slope (B/step) | late half | heap slope (B/step) | late half "
        "| RSS growth | heap growth | RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mode in args.modes:
        command = [sys.executable, __file__, "--worker", mode, "--steps", str(args.steps)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=3600)
        if done.returncode != 0:
            print(f"| {mode} | failed: {done.stderr.strip().splitlines()[-1:]} |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"| {mode} | {r['rss_slope']:.0f} | {r['rss_slope_late']:.0f} "
            f"| {r['heap_slope']:.0f} | {r['heap_slope_late']:.0f} | "
            f"{r['rss_growth'] / 1024:.0f} KiB | {r['heap_growth'] / 1024:.0f} KiB | "
            f"{r['rss_end'] / 2**20:.0f} MiB |"
        )


if __name__ == "__main__":
    main()
