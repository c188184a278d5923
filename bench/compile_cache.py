"""Time to the first finished training step of a tiny LM in a fresh process, with a cold and
with a warm persistent compile cache, side by side from one run.

    .venv/bin/python bench/compile_cache.py

Each measurement is a new Python process (as after a restart) that builds the model, compiles
its whole training step with torch.compile(backend="tpu") and runs one step; the time is from
the model being built to the first loss being on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

STEP = """
import json, time, torch, torch_tpu
from torch_tpu.testing.tiny_gpt import tiny_lm_training_step
step = tiny_lm_training_step("tpu", compile_backend="tpu")
start = time.perf_counter()
loss = step()
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "loss": loss, "metrics": torch_tpu.metrics()}))
"""


def fresh_process(cache_dir: str) -> dict:  # type: ignore[type-arg]
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, TORCH_TPU_CACHE_EAGER="1")
    proc = subprocess.run(
        [sys.executable, "-c", STEP], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="torch_tpu_cache_") as cache_dir:
        cold = fresh_process(cache_dir)
        warm = fresh_process(cache_dir)
    assert cold["loss"] == warm["loss"], "warm cache changed the result"
    print(f"{'':<8} {'first step':>12} {'compiles':>9} {'disk hits':>10} {'loss':>10}")
    for name, run in (("cold", cold), ("warm", warm)):
        m = run["metrics"]
        print(
            f"{name:<8} {run['seconds'] * 1e3:>10.0f}ms {m['compiles']:>9} "
            f"{m['disk_cache_hits']:>10} {run['loss']:>10.5f}"
        )
    print(f"\nwarm cache: {cold['seconds'] / warm['seconds']:.1f}x faster to the first step")


if __name__ == "__main__":
    main()
