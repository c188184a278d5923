"""XProf opens what tensorboard_trace_handler writes: the plugin's trace (here a GPU-shaped
XSpace handed back by the test plugin's profiler) converts with XProf's own API, and its trace
viewer and overview page produce data for it. Needs the xprof extra (`bash scripts/setup.sh
xprof`); the conversion runs in a process of its own, away from torch's libraries."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xspace_writer import shim_trace_env

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xprof") is None,
    reason="xprof is not installed (the xprof extra: bash scripts/setup.sh xprof)",
)

PROFILE = """
import sys, time, torch, torch_tpu
sys.path.insert(0, {tests!r})
from xspace_writer import gpu_xspace, kernel
from torch.profiler import profile, ProfilerActivity, tensorboard_trace_handler
x = torch.randn(16, 16, device='tpu')
acts = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
with profile(activities=acts, on_trace_ready=tensorboard_trace_handler({tb!r}, 'w0')):
    base = time.time_ns()
    (x @ x).relu().cpu()
    kernels = [kernel('sm90_gemm', 100, 30, 'aten_mm.default', 1),
               kernel('loop_relu_fusion', 140, 4, 'aten_relu.default', 2)]
    open({trace!r}, 'wb').write(gpu_xspace(base, kernels, []))
"""

CONVERT = """
import json, sys
from xprof.convert import raw_to_tool_data
paths = [sys.argv[1]]
viewer, _ = raw_to_tool_data.xspace_to_tool_data(paths, 'trace_viewer', {})
overview, _ = raw_to_tool_data.xspace_to_tool_data(paths, 'overview_page', {})
print(json.dumps({
    'tools': raw_to_tool_data.xspace_to_tool_names(paths),
    'trace_viewer': json.loads(viewer),
    'overview_page': json.loads(overview),
}))
"""


def test_xprof_converts_the_xplane_that_tensorboard_trace_handler_writes(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TPU_", "TPU_"))}
    env = {
        **base,
        **shim_trace_env(tmp_path / "trace.pb"),
    }
    code = PROFILE.format(
        tests=str(Path(__file__).parent), tb=str(tmp_path / "tb"), trace=str(tmp_path / "trace.pb")
    )
    profiled = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180
    )
    assert profiled.returncode == 0, profiled.stderr
    (xplane,) = (tmp_path / "tb" / "plugins" / "profile").glob("*/w0.xplane.pb")
    converted = subprocess.run(
        [sys.executable, "-c", CONVERT, str(xplane)], capture_output=True, text=True, timeout=180
    )
    assert converted.returncode == 0, converted.stderr
    data = json.loads(converted.stdout.splitlines()[-1])
    assert {"trace_viewer@", "overview_page", "kernel_stats"} <= set(data["tools"])
    events = data["trace_viewer"]["traceEvents"]
    processes = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "/device:GPU:0" in processes
    kernels = {e["name"]: e for e in events if e.get("ph") == "X"}
    assert kernels["sm90_gemm"]["dur"] == pytest.approx(30.0)  # µs
    assert kernels["loop_relu_fusion"]["dur"] == pytest.approx(4.0)
    assert data["overview_page"]  # the overview's tables, for this trace
