"""Time to the first finished training step of a tiny LM in a fresh process, with a cold and
with a warm persistent compile cache, side by side from one run.

    .venv/bin/python bench/compile_cache.py

Each measurement is a new Python process (as after a restart) that builds the model and runs
one training step, timed from the model being built to the first loss being on the host: once
with the whole step under torch.compile(backend="tpu") (Dynamo and AOTAutograd trace it in
every process; only the XLA compiles are cached), once in eager DeferAndFuse mode (the
step becomes one fused executable, loaded from the cache when warm) and once in eager Strict
mode (each op its own executable, each loaded from the cache when warm). The compiled first step
is split into Dynamo's frame compiles (tracing and AOTAutograd, from torch's own
compilation_time_metrics) and the rest, torch_tpu's (recording, XLA compiles or cache loads,
the run itself), with that share of the step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

STEP = """
import json, os, time, torch, torch_tpu
from torch_tpu.testing.tiny_gpt import tiny_lm_training_step
backend = os.environ["BENCH_BACKEND"] or None
step = tiny_lm_training_step("tpu", compile_backend=backend)
start = time.perf_counter()
loss = step()
seconds = time.perf_counter() - start
dynamo = 0.0
if backend:
    from torch._dynamo.utils import compilation_time_metrics
    dynamo = sum(compilation_time_metrics.get("_compile.compile_inner", []))
print(json.dumps({"seconds": seconds, "dynamo": dynamo, "loss": loss,
                  "metrics": torch_tpu.metrics()}))
"""


def fresh_process(cache_dir: str, backend: str, mode: str) -> dict:  # type: ignore[type-arg]
    env = dict(
        os.environ,
        TORCH_TPU_CACHE_DIR=cache_dir,
        BENCH_BACKEND=backend,
        TPU_DEFER_AND_FUSE="1" if mode == "defer_and_fuse" else "0",
    )
    proc = subprocess.run(
        [sys.executable, "-c", STEP], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    print(
        f"{'workload':<34} {'cache':<6} {'first step':>11} {'Dynamo+AOT':>11} {'torch_tpu':>10}"
        f" {'share':>6} {'compiles':>9} {'disk hits':>10}"
    )
    for label, backend, mode in (
        ("torch.compile(backend='tpu')", "tpu", "strict"),
        ("eager DeferAndFuse (no Dynamo)", "", "defer_and_fuse"),
        ("eager Strict (no Dynamo)", "", "strict"),
    ):
        with tempfile.TemporaryDirectory(prefix="torch_tpu_cache_") as cache_dir:
            cold = fresh_process(cache_dir, backend, mode)
            warm = fresh_process(cache_dir, backend, mode)
        assert cold["loss"] == warm["loss"], "a warm cache changed the result"
        for name, run in (("cold", cold), ("warm", warm)):
            m = run["metrics"]
            # Dynamo's frame compiles (tracing, AOTAutograd, the backend's graph set-up); the
            # rest of the first step is torch_tpu's: recording, XLA compiles or cache loads,
            # and running the step.
            own = run["seconds"] - run["dynamo"]
            print(
                f"{label:<34} {name:<6} {run['seconds'] * 1e3:>9.0f}ms "
                f"{run['dynamo'] * 1e3:>9.0f}ms {own * 1e3:>8.0f}ms "
                f"{own / run['seconds']:>6.0%} {m['compiles']:>9} {m['disk_cache_hits']:>10}"
            )
        print(f"{'':<34} warm is {cold['seconds'] / warm['seconds']:.1f}x faster\n")


if __name__ == "__main__":
    main()
