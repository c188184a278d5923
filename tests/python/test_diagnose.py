"""``python -m torch_tpu diagnose``: planted problems are each named with their line and numbers,
a clean compiled step reports none, a tensorboard trace folder is read, and torch_tpu's
submodules are attributes after ``import torch_tpu``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

PLANTED = {
    # A shape that changes every step: every op of the step compiles again.
    "shape": """
        import torch

        d = torch.device("tpu")
        w = torch.randn(16, 16, device=d)
        n = 0


        def step():
            global n
            n += 1
            x = torch.ones(n, 16, device=d)
            return (x @ w).relu()  # LINE
    """,
    # A .item() per step ("sync", not "item": DeferAndFuse's test pass picks tests named so).
    "sync": """
        import torch

        d = torch.device("tpu")
        w = torch.randn(16, 16, device=d)
        total = 0.0


        def step():
            global total
            loss = (w @ w).relu().sum()
            total += loss.item()  # LINE
    """,
    # A host-bound step of tiny ops.
    "tiny": """
        import torch

        d = torch.device("tpu")
        x = torch.randn(8, device=d)


        def step():
            global x
            for _ in range(60):
                x = x * 0.5 + 1.0  # LINE
    """,
    # A CPU tensor uploaded every step.
    "upload": """
        import torch

        d = torch.device("tpu")
        w = torch.randn(64, 64, device=d)
        batch = torch.randn(32, 64)


        def step():
            x = batch.to(d)  # LINE
            return (x @ w).relu()
    """,
    # A compiled step with no host syncs: nothing to report.
    "clean": """
        import torch

        d = torch.device("tpu")
        w = torch.randn(256, 256, device=d)
        x = torch.randn(256, 256, device=d)


        @torch.compile(backend="tpu")
        def f(x, w):
            return torch.tanh(x @ w) @ w


        def step():
            global x
            x = f(x, w)
    """,
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TPU_DEFER_AND_FUSE", None)  # the planted problems are Strict-mode problems
    return env


def _write(tmp_path: Path, name: str) -> tuple[Path, int]:
    source = textwrap.dedent(PLANTED[name]).lstrip()
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    line = next((i for i, text in enumerate(source.splitlines(), 1) if "# LINE" in text), 0)
    return path, line


def _diagnose(*args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "torch_tpu", "diagnose", *args, "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def _finding(report: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["kind"] == kind]
    assert found, f"no {kind} finding in {json.dumps(report, indent=1)}"
    return found[0]


def _site(finding: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    where = f"{path}:{line}"
    sites = [s for s in finding["sites"] if s["location"] == where]
    assert sites, f"{where} not among {finding['sites']}"
    return sites[0]


@pytest.mark.parametrize("name", ["shape", "sync", "tiny", "upload"])
def test_planted_problem_is_named_with_its_line(tmp_path: Path, name: str) -> None:
    script, line = _write(tmp_path, name)
    rc, report = _diagnose(str(script), "--steps", "4")
    assert rc == 1 and report["mode"] == "script" and report["steps"] == 3
    if name == "shape":
        finding = _finding(report, "recompiles")
        assert finding["numbers"]["compiles_per_step"] >= 2  # matmul and relu, every step
        site = _site(finding, script, line)
        assert site["per_step"] == 2
        assert "matmul: shape changed" in site["detail"] and "relu: shape changed" in site["detail"]
        # The line that makes the new shape is named too, with the Python int that set it.
        assert "set by a Python int" in _site(finding, script, line - 1)["detail"]
    elif name == "sync":
        finding = _finding(report, "host_syncs")
        assert finding["numbers"]["syncs_per_step"] == 1
        site = _site(finding, script, line)
        assert site["per_step"] == 1 and site["detail"] == ".item()"
        assert len(report["findings"]) == 1
    elif name == "tiny":
        finding = _finding(report, "host_bound")
        assert finding["numbers"]["runs_per_step"] == 120
        # Programs shorter than a launch on an accelerator (the CPU plugin's idle share
        # varies with the machine's load, so it is reported, not checked).
        assert finding["numbers"]["median_run_us"] < 20
        assert 0 <= finding["numbers"]["idle_percent"] <= 100
        assert "defer_and_fuse" in finding["fix"] and "torch.compile" in finding["fix"]
        site = _site(finding, script, line)
        assert site["per_step"] == 120 and "mul" in site["detail"] and "add" in site["detail"]
        assert report["top_ops"][0]["runs_per_step"] == 60
    else:
        finding = _finding(report, "uploads")
        assert finding["numbers"]["uploads_per_step"] == 1
        assert finding["numbers"]["bytes_per_step"] == 32 * 64 * 4
        assert _site(finding, script, line)["per_step"] == 1
        assert len(report["findings"]) == 1


def test_clean_compiled_step_reports_no_problem(tmp_path: Path) -> None:
    script, _ = _write(tmp_path, "clean")
    rc, report = _diagnose(str(script), "--steps", "4")
    assert rc == 0 and report["findings"] == [], report["findings"]
    per_step = report["per_step"]
    assert per_step["host syncs"] == 0 and per_step["uploads"] == 0 and per_step["compiles"] == 0
    assert report["top_ops"] and report["top_ops"][0]["name"].startswith("fused graph")
    # What held the memory peak: the weights and input, and the step's output line.
    holders = [h["location"] for h in report["memory"]["holders"]]
    assert any(h.startswith(str(script)) for h in holders), holders


def test_key_change_names_the_part_that_changed() -> None:
    import torch

    from torch_tpu.diagnose.attribution import PYTHON_SCALAR, _arg_key, key_change

    base = torch.zeros(8, 4)

    def key(*args: object, result: object = None) -> tuple[Any, Any]:
        return tuple(_arg_key(a) for a in args), _arg_key(result)

    assert key_change(key(base), key(torch.zeros(9, 4))) == [("shape", "[8, 4] -> [9, 4]")]
    half = base.half()
    assert key_change(key(base), key(half)) == [("dtype", "torch.float32 -> torch.float16")]
    flat = base.view(-1)
    assert key_change(key(flat[0:4]), key(flat[4:8])) == [("view offset", "0 -> 4")]
    assert key_change(key(base, 1), key(base, 2)) == [(PYTHON_SCALAR, "1 -> 2")]
    # A Python int that sets the result's size is a shape change (torch.ones(n, 4)).
    grown = key_change(key(8, 4, result=base), key(9, 4, result=torch.zeros(9, 4)))
    assert grown == [("shape", "[8, 4] -> [9, 4], set by a Python int (8 -> 9)")]


TRACED = """
import sys
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

d = torch.device("tpu")
w = torch.randn(16, 16, device=d)
bias = torch.randn(16)


def step(n):
    x = torch.ones(n, 16, device=d)
    b = bias.to(d)
    return (x @ w + b).relu().sum().item()


with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
    schedule=schedule(wait=0, warmup=1, active=4, repeat=1),
    on_trace_ready=tensorboard_trace_handler(sys.argv[1]),
    record_shapes=True,
    with_stack=True,
) as prof:
    for n in range(1, 6):
        step(n)
        prof.step()
"""


def test_trace_folder_from_tensorboard_handler(tmp_path: Path) -> None:
    script = tmp_path / "traced.py"
    script.write_text(TRACED)
    folder = tmp_path / "tb"
    proc = subprocess.run(
        [sys.executable, str(script), str(folder)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rc, report = _diagnose(str(folder))
    assert rc == 1 and report["mode"] == "trace" and report["steps"] == 3
    syncs = _finding(report, "host_syncs")
    assert syncs["numbers"]["syncs_per_step"] == 1
    # Trace mode names the function (by its first line) and the call.
    assert syncs["sites"][0]["location"].endswith("traced.py(11): step")
    assert syncs["sites"][0]["detail"] == ".item()"
    uploads = _finding(report, "uploads")
    assert uploads["numbers"] == {"uploads_per_step": 1, "bytes_per_step": 16 * 4}
    assert uploads["sites"][0]["location"].endswith("traced.py(11): step")
    assert uploads["sites"][0]["detail"] == "to"
    storm = _finding(report, "recompiles")
    assert storm["numbers"]["compiles_per_step"] >= 3
    assert any("shape changed" in s["detail"] for s in storm["sites"]), storm["sites"]
    assert {op["name"] for op in report["top_ops"]} >= {"aten::mm.default", "aten::relu.default"}


@pytest.mark.process_start
def test_submodules_are_attributes_after_import() -> None:
    code = (
        "import sys, torch_tpu\n"
        "assert 'torch_tpu.debug' not in sys.modules\n"
        "torch_tpu.debug.compare_with_cpu, torch_tpu.profiler.plugin_trace\n"
        "torch_tpu.memory._snapshot, torch_tpu.diagnose.diagnose_trace\n"
        "torch_tpu.kernels.jax_op\n"
        "assert 'jax' not in sys.modules, 'kernels imported jax eagerly'\n"
        "assert 'debug' in dir(torch_tpu)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
