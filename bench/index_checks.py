"""What the out-of-range index checks cost on an embedding-heavy training step, from one run.

    .venv/bin/python bench/index_checks.py [--steps 30] [--repeats 3]

Every indexing op on tpu computes, inside its own executable, whether each index was in range,
and the flag is read at the next sync point (see csrc/dispatch/runtime_checks.h).
TORCH_TPU_INDEX_CHECKS=0 leaves the checks out. The step is an embedding bag model of the kind
recommenders train: a 64k x 128 embedding table looked up by 8192 token ids per step, two
token-level lookups (embedding and gather), a linear head, cross entropy (whose target check is
one more), backward and SGD, with the loss read each step. Each configuration runs in its own
process, alternating on every repeat so that drift on shared cores affects both alike; the
table prints the median ms/step and the ratio with checks to without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def step_times(steps: int) -> list[float]:
    import torch

    device = torch.device("tpu")
    torch.manual_seed(0)
    vocab, dim, classes, batch, tokens = 65536, 128, 512, 64, 128
    table = torch.nn.Embedding(vocab, dim).to(device)
    head = torch.nn.Linear(dim, classes).to(device)
    params = [*table.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    ids = torch.randint(0, vocab, (batch, tokens), device=device)
    picks = torch.randint(0, tokens, (batch, 1, dim), device=device)
    target = torch.randint(0, classes, (batch,), device=device)
    times = []
    for _ in range(steps + 3):
        start = time.perf_counter()
        opt.zero_grad()
        rows = table(ids)  # [batch, tokens, dim]
        picked = torch.gather(rows, 1, picks).squeeze(1)  # one token per sample
        pooled = rows.mean(1) + picked
        loss = torch.nn.functional.cross_entropy(head(pooled), target)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    return times[3:]  # the first steps compile


def child(steps: int) -> None:
    print(json.dumps(step_times(steps)))


def run(mode: str, checks: bool, steps: int) -> list[float]:
    env = dict(os.environ, TORCH_TPU_INDEX_CHECKS="1" if checks else "0")
    env.pop("TPU_DEFER_AND_FUSE", None)
    if mode == "DeferAndFuse":
        env["TPU_DEFER_AND_FUSE"] = "1"
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--steps", str(steps)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.steps)
        return
    print(f"{'mode':<14}{'checks ms/step':>16}{'no checks ms/step':>19}{'ratio':>8}")
    for mode in ("Strict", "DeferAndFuse"):
        samples: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for checks in (False, True):
                samples[checks] += run(mode, checks, args.steps)
        on = statistics.median(samples[True]) * 1e3
        off = statistics.median(samples[False]) * 1e3
        print(f"{mode:<14}{on:>16.2f}{off:>19.2f}{on / off:>7.3f}x")


if __name__ == "__main__":
    main()
