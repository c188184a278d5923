"""torch.profiler on tpu: device runs appear as kernels linked to the op that launched them
(device time per op in key_averages, flow arrows in the Chrome trace), fused graphs list their
ops, compiles appear on the host, TensorBoard traces are written under a schedule, and the
legacy profiler reports device time."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TPU
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from xspace_writer import field, shim_trace_env, varint

import torch_tpu

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def strict() -> Iterator[None]:
    previous = torch_tpu.get_eager_mode()
    torch_tpu.set_eager_mode("strict")
    yield
    torch_tpu.set_eager_mode(previous)


def trace_of(prof: Any, tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def by_category(events: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") == category]


def test_device_time_per_op_and_linked_kernels(strict: None, tmp_path: Path) -> None:
    x = torch.randn(96, 96, device=TPU)
    torch.tanh(x @ x).cpu()  # compiled before profiling
    started = time.perf_counter()
    with profile(activities=BOTH) as prof:
        for _ in range(3):
            y = torch.tanh(x @ x)
        y.cpu()
    wall_us = (time.perf_counter() - started) * 1e6
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].count == 3
    device_us = averages["aten::mm"].self_device_time_total
    assert 0 < device_us <= wall_us
    assert averages["aten::tanh"].self_device_time_total > 0

    events = trace_of(prof, tmp_path)
    kernels = by_category(events, "kernel")
    ops = {e["args"]["External id"]: e for e in by_category(events, "cpu_op")}
    mm_kernels = [k for k in kernels if k["name"] == "aten::mm.default"]
    assert len(mm_kernels) == 3
    for kernel in mm_kernels:
        op = ops[kernel["args"]["External id"]]  # the launching op
        assert op["name"] == "aten::mm"
        assert kernel["ts"] >= op["ts"]  # launched inside the op, runs after it starts
        assert kernel["dur"] > 0
    # One flow arrow (start and end) from each launch to its run.
    assert len(by_category(events, "ac2g")) == 2 * len(kernels)


def test_fused_graph_lists_its_ops(tmp_path: Path) -> None:
    x = torch.randn(32, 32, device=TPU)
    with torch_tpu.eager_mode("defer_and_fuse"):
        with profile(activities=BOTH) as prof:
            ((x * 2).sin() + 1).sum().item()
    events = trace_of(prof, tmp_path)
    fused = [k for k in by_category(events, "kernel") if k["name"].startswith("fused graph")]
    assert fused, [k["name"] for k in by_category(events, "kernel")]
    name = fused[-1]["name"]
    assert "of 4 ops" in name
    for op in ("aten::mul", "aten::sin", "aten::add", "aten::sum"):
        assert op in name


def test_compiles_appear_as_host_events(strict: None, tmp_path: Path) -> None:
    x = torch.randn(7, 13, device=TPU)
    with profile(activities=BOTH) as prof:
        torch.special.erfcx(x).cpu()  # a shape never compiled before in this process
    names = [e["name"] for e in by_category(trace_of(prof, tmp_path), "privateuse1_runtime")]
    assert any(n.startswith("compile aten::special_erfcx") for n in names), names


def test_cpu_only_profile_has_no_device_events(strict: None, tmp_path: Path) -> None:
    x = torch.randn(16, 16, device=TPU)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).cpu()
    assert not by_category(trace_of(prof, tmp_path), "kernel")


def test_tensorboard_trace_handler_with_schedule(strict: None, tmp_path: Path) -> None:
    x = torch.randn(32, 32, device=TPU)
    with profile(
        activities=BOTH,
        schedule=schedule(wait=1, warmup=1, active=2),
        on_trace_ready=tensorboard_trace_handler(str(tmp_path / "tb")),
        record_shapes=True,
    ) as prof:
        for _ in range(4):
            (x @ x).relu().cpu()
            prof.step()
    files = list((tmp_path / "tb").glob("*.pt.trace.json"))
    assert len(files) == 1
    events = json.loads(files[0].read_text())["traceEvents"]
    # Only the two active steps were recorded: two matmuls, each with its kernel.
    assert len([e for e in by_category(events, "kernel") if e["name"] == "aten::mm.default"]) == 2


def test_legacy_profiler_reports_device_time(strict: None) -> None:
    x = torch.randn(64, 64, device=TPU)
    (x @ x).cpu()
    with torch.autograd.profiler.profile(use_device="tpu") as prof:
        (x @ x).cpu()
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].device_time_total > 0


def test_profile_memory_counts_device_allocations(strict: None) -> None:
    with profile(activities=BOTH, profile_memory=True) as prof:
        kept = torch.ones(1000, device=TPU)
    usage = {e.key: e.self_device_memory_usage for e in prof.key_averages()}
    assert usage["aten::empty"] == 4000 or usage.get("aten::ones") == 4000, usage
    assert kept.numel() == 1000


def test_host_syncs_appear_where_they_happen(strict: None, tmp_path: Path) -> None:
    x = torch.randn(8, 8, device=TPU)
    with profile(activities=BOTH) as prof:
        x.sum().item()
    names = [e["name"] for e in by_category(trace_of(prof, tmp_path), "privateuse1_runtime")]
    assert "sync: reading a tpu tensor" in names


def test_without_a_plugin_profiler_no_xplane_is_written(strict: None, tmp_path: Path) -> None:
    # The CPU plugin has no profiler of its own: the Chrome trace only.
    x = torch.randn(8, 8, device=TPU)
    with profile(activities=BOTH, on_trace_ready=tensorboard_trace_handler(str(tmp_path))):
        (x + 1).cpu()
    assert torch_tpu.profiler.plugin_trace() == b""
    assert len(list(tmp_path.glob("*.pt.trace.json"))) == 1
    assert not (tmp_path / "plugins").exists()


def run_fresh(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`code` in a new process with `env` over this one's, less its torch_tpu settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_plugin_profilers_trace_is_written_where_xprof_reads_it(tmp_path: Path) -> None:
    # The test plugin wraps the CPU plugin and offers a profiler extension whose trace is this
    # XSpace (one plane named for the device, and a hostname), padded by one byte as libtpu's.
    xspace = field(1, varint(1 << 3) + varint(7) + field(2, b"/device:TPU:0")) + field(4, b"shim")
    (tmp_path / "trace.pb").write_bytes(xspace)
    env = shim_trace_env(tmp_path / "trace.pb")
    code = (
        "import torch, torch_tpu\n"
        "from torch.profiler import profile, ProfilerActivity, tensorboard_trace_handler\n"
        "x = torch.randn(8, 8, device='tpu')\n"
        "acts = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]\n"
        f"handler = tensorboard_trace_handler({str(tmp_path / 'tb')!r}, worker_name='w0')\n"
        "with profile(activities=acts, on_trace_ready=handler):\n"
        "    (x @ x).cpu()\n"
        "print(torch_tpu.profiler.plugin_trace().hex())\n"
    )
    proc = run_fresh(code, env)
    assert proc.stdout.split()[-1] == xspace.hex()  # the padding byte trimmed off
    written = list((tmp_path / "tb" / "plugins" / "profile").glob("*/w0.xplane.pb"))
    assert len(written) == 1 and written[0].read_bytes() == xspace
    assert len(list((tmp_path / "tb").glob("w0.*.pt.trace.json"))) == 1  # the Chrome trace too


def test_programs_are_named_after_what_they_hold() -> None:
    # XLA names a program after its module, and a plugin's profiler shows that name for its
    # runs: an op's program is named after the op, a fused graph's after its size.
    code = (
        "import torch, torch_tpu\n"
        "x = torch.ones(3, device='tpu')\n"
        "(x + 1).cpu()\n"
        "with torch_tpu.eager_mode('defer_and_fuse'):\n"
        "    ((x * 2).sin() + 1).sum().item()\n"
    )
    proc = run_fresh(code, {"TORCH_TPU_DUMP_HLO": "1", "TORCH_TPU_CACHE_DIR": ""})
    modules = [line for line in proc.stderr.splitlines() if line.startswith("module @")]
    assert "module @aten_add.Tensor {" in modules
    assert "module @fused_graph_of_4_ops {" in modules


def test_the_compile_log_names_each_compile_its_time_and_its_shapes() -> None:
    # TORCH_TPU_LOG_COMPILES=1 shows a recompile storm: one line per compile (a cache hit
    # prints nothing), with the op or the fused graph's ops, and the parameters' shapes.
    code = (
        "import torch, torch_tpu\n"
        "for n in (3, 3, 5):\n"
        "    (torch.ones(n, device='tpu') * 2).cpu()\n"
        "with torch_tpu.eager_mode('defer_and_fuse'):\n"
        "    (torch.ones(7, device='tpu').sin() + 1).sum().item()\n"
    )
    proc = run_fresh(code, {"TORCH_TPU_LOG_COMPILES": "1", "TORCH_TPU_CACHE_DIR": ""})
    compiled = [line for line in proc.stderr.splitlines() if line.startswith("torch_tpu: compiled")]
    products = [line for line in compiled if line.startswith("torch_tpu: compiled aten_mul.Tensor")]
    assert len(products) == 2, compiled  # n = 3 once, n = 5 once
    assert "tensor<3xf32>" in products[0] and "tensor<5xf32>" in products[1]
    assert re.search(r" in \d+ ms( \(quick\))?; parameters \(", products[0])
    fused = [line for line in compiled if "fused graph of" in line]
    assert len(fused) == 1 and "aten::sin." in fused[0] and "aten::sum." in fused[0], compiled
    quiet = run_fresh(code, {"TORCH_TPU_CACHE_DIR": ""})
    assert "torch_tpu: compiled" not in quiet.stderr


@pytest.mark.cpu_plugin
def test_quick_compiles_are_for_small_executables_and_asked_for() -> None:
    # TORCH_TPU_QUICK_COMPILE_ELEMENTS=N: executables whose tensors all have at most N elements
    # compile with LLVM's optimizations off; larger ones keep them; unset, none does. Both
    # compute the same values.
    code = (
        "import torch, torch_tpu\n"
        "for n in (1000, 1 << 20):\n"
        "    x = torch.arange(n, dtype=torch.float32, device='tpu')\n"
        "    print(((x * 0.5).sin() + 1).sum().item())\n"
    )
    logged = {"TORCH_TPU_LOG_COMPILES": "1", "TORCH_TPU_CACHE_DIR": ""}
    quick = run_fresh(code, {**logged, "TORCH_TPU_QUICK_COMPILE_ELEMENTS": "4096"})
    lines = [line for line in quick.stderr.splitlines() if "compiled aten_sin." in line]
    assert len(lines) == 2, quick.stderr
    assert "(quick)" in lines[0] and "tensor<1000xf32>" in lines[0]
    assert "(quick)" not in lines[1] and "tensor<1048576xf32>" in lines[1]
    full = run_fresh(code, logged)
    assert "(quick)" not in full.stderr
    assert quick.stdout == full.stdout


@pytest.mark.parametrize(
    "profiler",
    [
        "profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])",
        "torch.autograd.profiler.profile(use_device='tpu', use_kineto=True)",
    ],
    ids=["kineto", "legacy"],
)
def test_device_times_come_from_the_plugin_trace_where_its_runs_line_up(
    profiler: str, tmp_path: Path
) -> None:
    # The test plugin's profiler hands back an XSpace written during the profile: a device plane
    # whose "XLA Modules" line holds the two matmuls' runs at known times. The trace's kernels
    # take those times instead of the host's estimate.
    code = (
        "import time, torch, torch_tpu\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        f"{inspect.getsource(varint)}\n{inspect.getsource(field)}\n"
        "def number(n, value): return varint(n << 3) + varint(value)\n"
        "x = torch.randn(16, 16, device='tpu')\n"
        "(x @ x).cpu()\n"
        f"with {profiler} as prof:\n"
        "    base = time.time_ns()\n"
        "    (x @ x @ x).cpu()\n"
        "    runs = [(100_000_000, 50_000_000), (300_000_000, 70_000_000)]  # offset, length ps\n"
        "    line = field(2, b'XLA Modules') + number(3, base) + b''.join(\n"
        "        field(4, number(1, 7) + number(2, o) + number(3, d)) for o, d in runs)\n"
        "    name = field(2, b'aten_mm.default(3)')\n"
        "    metadata = field(4, number(1, 7) + field(2, number(1, 7) + name))\n"
        "    plane = field(2, b'/device:TPU:0') + field(3, line) + metadata\n"
        f"    open({str(tmp_path / 'trace.pb')!r}, 'wb').write(field(1, plane))\n"
        f"prof.export_chrome_trace({str(tmp_path / 'trace.json')!r})\n"
        "device_us = {e.key: e.device_time_total for e in prof.key_averages()}\n"
        "print(device_us['aten::mm'])\n"
    )
    proc = run_fresh(
        code,
        shim_trace_env(tmp_path / "trace.pb"),
    )
    assert float(proc.stdout.split()[-1]) == pytest.approx(120.0, abs=0.01)  # µs, both matmuls
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    kernels = [k for k in by_category(events, "kernel") if k["name"] == "aten::mm.default"]
    assert len(kernels) == 2
    first, second = sorted(kernels, key=lambda k: k["ts"])
    assert (first["dur"], second["dur"]) == pytest.approx((50.0, 70.0), abs=0.01)  # µs
    assert second["ts"] - first["ts"] == pytest.approx(200.0, abs=0.01)
