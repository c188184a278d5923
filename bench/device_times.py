"""The device time torch_tpu reports for a 1024x1024 float32 product next to torch CUDA's own for
the same product (CUDA events), measured in one run on a GPU, through both ways of profiling:
torch_tpu's span collection and torch.profiler (whose kernel events say where their time came
from in args["device time"]).

    python bench/device_times.py [--require]

With --require (scripts/device_check.sh) it exits non-zero unless every device run took the
plugin's own times and the product's device time is within 2x torch CUDA's. Without CUDA in
torch, or on a plugin with no profiler (the CPU plugin), it prints what it saw and says so.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu import _C

N = 1024
REPEATS = 5
PLUGIN = "plugin"


def torch_cuda_us() -> float | None:
    """The median µs of a 1024² float32 product on torch CUDA (CUDA events), None without CUDA."""
    if not torch.cuda.is_available():
        return None
    a = torch.randn(N, N, device="cuda")
    for _ in range(3):
        a @ a
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ a
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def collected_spans(x: torch.Tensor) -> list[tuple[str, float, str]]:
    """torch_tpu's own collection: (name, device µs, timing) of each device run."""
    _C._collect_device_spans()
    for _ in range(REPEATS):
        y = (x @ x).relu()
    y.sum().cpu()
    spans = _C._collected_device_spans()
    return [(n, (e - s) / 1e3, timing) for n, _, s, e, on_device, timing in spans if on_device]


def profiler_kernels(x: torch.Tensor) -> list[tuple[str, float, str]]:
    """torch.profiler's kernel events (its Chrome trace): (name, µs, where the time came from)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(REPEATS):
            y = (x @ x).relu()
        y.sum().cpu()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as trace:
            events = json.load(trace)["traceEvents"]
    return [
        (e["name"], float(e["dur"]), e.get("args", {}).get("device time", "?"))
        for e in events
        if e.get("cat") == "kernel"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--require", action="store_true", help="fail unless the checks hold")
    args = parser.parse_args()
    x = torch.randn(N, N, device="tpu")
    (x @ x).relu().sum().cpu()  # compiled outside the measured part
    cuda = torch_cuda_us()
    failures = []
    spans = collected_spans(x)
    print(f"plugin: {torch_tpu.plugin_path()}; its profiler: {_C._plugin_profiler_status()}")
    timings = collections.Counter(timing for _, _, timing in spans)
    print(f"device runs by where their time came from: {dict(timings)}")
    if set(timings) != {PLUGIN}:
        failures.append("not every device run took the plugin's times")
    products = [
        us for name, us, timing in spans if name.startswith("aten::mm") and timing == PLUGIN
    ]
    ours = statistics.median(products) if products else None
    kernels = profiler_kernels(x)
    kernel_timings = collections.Counter(timing for _, _, timing in kernels)
    print(f"torch.profiler's kernels by where their time came from: {dict(kernel_timings)}")
    if set(kernel_timings) != {PLUGIN}:
        failures.append("not every torch.profiler kernel took the plugin's times")
    through_profiler = [us for name, us, _ in kernels if name.startswith("aten::mm")]
    profiled = statistics.median(through_profiler) if through_profiler else None

    def text(us: float | None) -> str:
        return "n/a" if us is None else f"{us:.1f}"

    print(f"\n{N}x{N} float32 product, device us     torch_tpu  torch.profiler  torch CUDA  ratio")
    ratio = ours / cuda if ours is not None and cuda else None
    print(
        f"{'':35} {text(ours):>9} {text(profiled):>15} {text(cuda):>11} "
        f"{'n/a' if ratio is None else f'{ratio:.2f}':>6}"
    )
    if cuda is None:
        failures.append("torch has no CUDA here: nothing to compare with")
    elif ratio is None or ratio > 2.0:
        failures.append(f"the product's device time is not within 2x torch CUDA's ({text(ratio)})")
    for failure in failures:
        print("check:", failure)
    return 1 if failures and args.require else 0


if __name__ == "__main__":
    sys.exit(main())
