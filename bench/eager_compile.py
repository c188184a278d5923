"""Eager compile time at a new shape on the CPU plugin with full optimization (the default) and
with quick compiles (TORCH_TPU_QUICK_COMPILE_ELEMENTS=4096: small executables built with LLVM's
optimizations off), side by side from one run; and what a quick-compiled executable costs at
every later run: a 4x4 add per call, and small ops at the size limit. The "warm cache" column
is a warm process: the same shapes again with the persistent cache that a first process
filled, so each executable is loaded instead of compiled. The last column is the default:
eager size buckets on (docs/design/buckets.md), where the new lengths fall in one bucket and
share its executables; the last row is one length of PyTorch's
test_index_put_accumulate_duplicate_indices.

    .venv/bin/python bench/eager_compile.py

Each setting runs in its own process with the disk cache off, so every shape compiles; all but
the last with TORCH_TPU_SIZE_BUCKETS=0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SHAPES = range(100, 120)  # 20 new shapes per op

WORKER = """
import json, statistics, time, torch, torch_tpu
ops = {
    "mul": lambda n: torch.ones(n, device="tpu") * 2,
    "uniform_": lambda n: torch.empty(n, device="tpu").uniform_(-1, 1),
    "randn": lambda n: torch.randn(n, device="tpu"),
    "cumsum": lambda n: torch.ones(n, device="tpu").cumsum(0),
    "index_put accumulate": lambda n: torch.zeros(n, device="tpu").index_put_(
        (torch.arange(n, device="tpu") % 7,), torch.ones(n, device="tpu"), accumulate=True),
    "PyTorch's duplicate-indices test, one length": lambda n: duplicate_indices(n),
}

def duplicate_indices(n):
    indices = torch.empty(n, dtype=torch.double, device="tpu").uniform_(-1, 1).cumsum(0).long()
    base = torch.randn(indices.abs().max() + 1, device="tpu")
    values = torch.randn(indices.size(0), device="tpu")
    output = base.index_put((indices,), values, accumulate=True)
    base.tolist(), indices.tolist(), values.tolist()
    return output

torch.ones(1, device="tpu").cpu()
result = {}
for name, op in ops.items():
    op(3).cpu()  # the op's fills and helpers at another shape
    start = time.perf_counter()
    for n in SHAPES:
        op(n).cpu()
    result[name] = (time.perf_counter() - start) / len(SHAPES) * 1e3
x = torch.randn(4096, device="tpu")
(x.sin() * 2 + 1).cpu()
samples = []
for _ in range(7):
    torch.tpu.synchronize()
    start = time.perf_counter()
    for _ in range(200):
        y = (x.sin() * 2 + 1)
    torch.tpu.synchronize()
    samples.append((time.perf_counter() - start) / 200 * 1e6)
result["run sin(x) * 2 + 1, 4096 elements (us)"] = statistics.median(samples)
a = torch.ones(4, 4, device="tpu")
samples = []
for _ in range(7):
    torch.tpu.synchronize()
    start = time.perf_counter()
    for _ in range(2000):
        y = a + a
    torch.tpu.synchronize()
    samples.append((time.perf_counter() - start) / 2000 * 1e6)
result["run a + a, 4x4, per call (us)"] = statistics.median(samples)
print(json.dumps(result))
"""


def measure(quick: bool, cache_dir: str = "", buckets: bool = False) -> dict[str, float]:
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": cache_dir}
    env.pop("TORCH_TPU_QUICK_COMPILE_ELEMENTS", None)
    env.pop("TORCH_TPU_CACHE_EAGER", None)
    env["TORCH_TPU_SIZE_BUCKETS"] = "1" if buckets else "0"
    if quick:
        env["TORCH_TPU_QUICK_COMPILE_ELEMENTS"] = "4096"
    code = f"SHAPES = {SHAPES!r}\n{WORKER}"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    full, quick = measure(quick=False), measure(quick=True)
    with tempfile.TemporaryDirectory(prefix="torch_tpu_cache_") as cache_dir:
        measure(quick=False, cache_dir=cache_dir)  # fills the cache
        warm = measure(quick=False, cache_dir=cache_dir)
    bucketed = measure(quick=False, buckets=True)
    print("eager Strict, CPU plugin: ms per call at a new shape (compile + run), then run times")
    print(
        f"{'op':<46} {'full compile':>13} {'quick compile':>14} {'quick / full':>13} "
        f"{'warm cache':>11} {'warm / full':>12} {'size buckets':>13} {'buckets / full':>15}"
    )
    for name in full:
        print(
            f"{name:<46} {full[name]:>13.2f} {quick[name]:>14.2f} "
            f"{quick[name] / full[name]:>12.2f}x {warm[name]:>11.2f} "
            f"{warm[name] / full[name]:>11.2f}x {bucketed[name]:>13.2f} "
            f"{bucketed[name] / full[name]:>14.2f}x"
        )


if __name__ == "__main__":
    main()
