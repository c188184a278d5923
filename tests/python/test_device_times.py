"""Device times from a plugin's own trace (XSpace) in the shapes the plugins really write: the
XLA CUDA plugin's kernels and copies on stream lines, annotated with their module (matched by
program, consecutive runs of one program splitting its kernels evenly), libtpu's module events,
and events that name no module (matched by launch-to-completion windows). Runs that the trace
does not hold say so. The XSpaces are synthesized (tests/python/xspace_writer.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xspace_writer import Event, gpu_xspace, kernel, shim_trace_env, tpu_xspace

import torch_tpu

BASE = 1_700_000_000_000_000_000  # ns since the epoch
US = 1000  # ns
PLUGIN = "plugin"
NOT_FOUND = "host estimate (not found in the plugin's device trace)"

ROOT = Path(__file__).resolve().parents[2]


def match(runs: list[tuple[str, float, float]], xspace: bytes) -> list[tuple[float, float, str]]:
    """Runs (name, launch µs, completion µs) after BASE, on device 0 -> (start, end, timing)."""
    spans = [(name, 0, BASE + int(launch * US), BASE + int(end * US)) for name, launch, end in runs]
    return [
        ((start - BASE) / US, (end - BASE) / US, timing)
        for start, end, timing in torch_tpu._C._match_device_times(spans, xspace)
    ]


def test_cuda_plugin_kernels_are_matched_by_their_module() -> None:
    kernels = [
        kernel("other_program_kernel", 2, 1, "jit_something_else", 1),  # not ours: skipped
        kernel("sm90_gemm", 10, 20, "aten_mm.default", 2),
        kernel("loop_convert_fusion", 31, 2, "aten_mm.default", 3),
        kernel("loop_relu_fusion", 40, 3, "aten_relu.default", 4),
        # Two runs of one program back to back: its four kernels split two and two.
        kernel("sm90_gemm", 50, 20, "aten_mm.default", 5),
        kernel("loop_convert_fusion", 71, 2, "aten_mm.default", 6),
        kernel("sm90_gemm", 80, 20, "aten_mm.default", 7),
        kernel("loop_convert_fusion", 101, 2, "aten_mm.default", 8),
    ]
    copies = [Event("MemcpyD2H", 110 * 10**6, 5 * 10**6, {"correlation_id": 9})]
    runs = [
        ("aten::mm.default", 1, 500),
        ("aten::relu.default", 2, 600),
        ("aten::mm.default", 3, 700),
        ("aten::mm.default", 4, 800),
    ]
    got = match(runs, gpu_xspace(BASE, kernels, copies))
    assert got == [(10, 33, PLUGIN), (40, 43, PLUGIN), (50, 73, PLUGIN), (80, 103, PLUGIN)]


def test_libtpu_module_events_are_one_per_run() -> None:
    xspace = tpu_xspace(
        BASE, [("aten_mm.default", 10, 5), ("aten_add.Tensor", 20, 1), ("aten_mm.default", 30, 6)]
    )
    runs = [("aten::mm.default", 1, 90), ("aten::add.Tensor", 2, 90), ("aten::mm.default", 3, 90)]
    assert match(runs, xspace) == [(10, 15, PLUGIN), (20, 21, PLUGIN), (30, 36, PLUGIN)]


def test_one_chip_per_process_pairs_its_plane_whatever_its_number() -> None:
    # The process's tpu:0 is the host's fourth chip: libtpu names its plane /device:TPU:3.
    xspace = tpu_xspace(BASE, [("aten_mm.default", 10, 5)], device=3)
    assert match([("aten::mm.default", 1, 90)], xspace) == [(10, 15, PLUGIN)]


def test_events_naming_no_module_are_matched_by_launch_windows() -> None:
    kernels = [
        kernel("before_any_launch", 1, 2, None, 1),
        kernel("gemm", 11, 3, None, 2),
        kernel("fusion", 15, 2, None, 3),
        kernel("fusion", 32, 4, None, 4),
    ]
    runs = [
        ("aten::mm.default", 10, 20),
        ("aten::relu.default", 21, 40),
        ("aten::sum.default", 41, 50),
    ]
    got = match(runs, gpu_xspace(BASE, kernels, []))
    window = "plugin (its events between launch and completion)"
    assert got == [(11, 17, window), (32, 36, window), (41, 50, NOT_FOUND)]


def test_runs_the_trace_does_not_hold_say_so() -> None:
    kernels = [
        kernel("gemm", 10, 5, "aten_mm.default", 1),
        kernel("gemm", 20, 5, "aten_mm.default", 2),
    ]
    kernels.append(kernel("gemm", 30, 5, "aten_mm.default", 3))
    # Three kernels of mm for two runs cannot be split; relu is not in the trace.
    runs = [("aten::relu.default", 1, 5), ("aten::mm.default", 2, 60), ("aten::mm.default", 3, 70)]
    assert match(runs, gpu_xspace(BASE, kernels, [])) == [
        (1, 5, NOT_FOUND),
        (2, 60, NOT_FOUND),
        (3, 70, NOT_FOUND),
    ]


def test_without_a_plugin_trace_the_host_estimate_stays() -> None:
    assert match([("aten::mm.default", 1, 5)], b"") == [
        (1, 5, "host estimate (the plugin has no device trace)")
    ]


def test_the_profilers_kernels_take_the_cuda_plugins_times(tmp_path: Path) -> None:
    # Through torch.profiler, with the test plugin handing back a GPU-shaped XSpace written
    # during the profile: the kernels' durations are the plugin's and say so.
    code = (
        "import sys, time, torch, torch_tpu\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from xspace_writer import gpu_xspace, kernel\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "x = torch.randn(16, 16, device='tpu')\n"
        "(x @ x).relu().cpu()\n"
        "acts = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]\n"
        "with profile(activities=acts) as prof:\n"
        "    base = time.time_ns()\n"
        "    (x @ x).relu().cpu()\n"
        "    kernels = [kernel('gemm', 100, 30, 'aten_mm.default', 1),\n"
        "               kernel('relu_fusion', 140, 4, 'aten_relu.default', 2)]\n"
        f"    open({str(tmp_path / 'trace.pb')!r}, 'wb').write(gpu_xspace(base, kernels, []))\n"
        f"prof.export_chrome_trace({str(tmp_path / 'trace.json')!r})\n"
    )
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TPU_", "TPU_"))}
    env = {
        **base_env,
        **shim_trace_env(tmp_path / "trace.pb"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    kernels = {e["name"]: e for e in events if e.get("cat") == "kernel"}
    assert kernels["aten::mm.default"]["dur"] == pytest.approx(30.0, abs=0.01)
    assert kernels["aten::relu.default"]["dur"] == pytest.approx(4.0, abs=0.01)
    assert kernels["aten::relu.default"]["args"]["device time"] == PLUGIN
