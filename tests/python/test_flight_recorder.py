"""The flight recorder: torch_tpu keeps the last N ops and executions it dispatched (name,
shapes, dtypes, eager mode, executable key, and the Python line where asked), and a failed
compile, a failed index check, an asynchronous device error and a fatal signal write them to a
file that the error names, the failing op last. (A collective's timeout:
dist_workers/errors_worker.py, rank_never_arrives.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import TPU

import torch_tpu
from torch_tpu.debug import FlightEntry, flight_record

DUMP = re.compile(r"the last ops dispatched are in (\S+\.txt)\)")


@pytest.fixture(autouse=True)
def exact_sizes() -> Iterator[None]:
    # Once other tests in this process have met two lengths of a size bucket, ops run (and are
    # recorded) at the bucket's length: these tests name the exact shapes they dispatch.
    was_on = torch_tpu._C._size_buckets()
    torch_tpu._C._set_size_buckets(False)
    try:
        yield
    finally:
        torch_tpu._C._set_size_buckets(was_on)


@pytest.fixture(params=["strict", "defer_and_fuse"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.eager_mode(request.param):  # type: ignore[arg-type]
        yield request.param


def ops(entries: list[FlightEntry]) -> list[FlightEntry]:
    return [e for e in entries if e["kind"] == "op"]


def dumped_lines(message: str) -> list[str]:
    """The entry lines of the dump file an error message names (which must exist)."""
    found = DUMP.search(message)
    assert found, message
    path = Path(found.group(1))
    assert path.is_file() and path.parent.name == "flight_records"
    return [
        line
        for line in path.read_text().splitlines()
        if line.startswith("#") and line[1:2].isdigit()
    ]


def test_entries_are_the_ops_run_in_order_with_shapes_and_dtypes(mode: str) -> None:
    x = torch.ones(2, 3, device=TPU)
    w = torch.ones(3, 4, device=TPU, dtype=torch.float64)
    torch.tpu.synchronize()
    torch_tpu._C._clear_flight_record()
    y = (x.double() @ w).relu()
    counts = y.sum(1).to(torch.int64)
    counts.cpu()
    entries = flight_record()
    got = [(e["name"], e["shapes"], e["dtypes"], e["mode"]) for e in ops(entries)]
    assert got == [  # .double() and .to() are copy_ into a new tensor of the dtype
        ("aten::copy_", [[2, 3], [2, 3]], [torch.float64, torch.float32], mode),
        ("aten::mm", [[2, 3], [3, 4]], [torch.float64, torch.float64], mode),
        ("aten::relu", [[2, 4]], [torch.float64], mode),
        ("aten::sum.dim_IntList", [[2, 4]], [torch.float64], mode),
        ("aten::copy_", [[2], [2]], [torch.int64, torch.float64], mode),
    ]
    assert [e["sequence"] for e in entries] == sorted(e["sequence"] for e in entries)
    assert all(re.fullmatch(r"[0-9a-f]{1,16}", e["key"] or "") for e in entries)
    executions = [e for e in entries if e["kind"] == "execution"]
    if mode == "defer_and_fuse":
        # The graph the ops were fused into runs after them, at the host read.
        assert entries[-1]["kind"] == "execution"
        assert "aten::mm" in executions[-1]["name"] and "aten::relu" in executions[-1]["name"]
    else:
        assert executions == []


def test_same_call_same_key_other_shape_other_key() -> None:
    a, b = torch.ones(3, device=TPU), torch.ones(5, device=TPU)
    torch_tpu._C._clear_flight_record()
    with torch_tpu.eager_mode("strict"):
        a.exp(), a.exp(), b.exp()
    first, again, other = ops(flight_record())
    assert first["key"] == again["key"] != other["key"]


def test_a_compile_failure_names_a_dump_listing_the_op_last(mode: str) -> None:
    rows = {"strict": 7, "defer_and_fuse": 9}[mode]  # shapes no other test compiles
    x = torch.ones(rows, 13, device=TPU)
    torch.tpu.synchronize()
    torch_tpu._C._inject_compile_failure()
    with pytest.raises(RuntimeError, match="injected compile failure") as failure:
        torch.exp(x).cpu()
    lines = dumped_lines(str(failure.value))
    assert "aten::exp" in lines[-1]
    if mode == "strict":
        assert re.search(rf" op strict .*aten::exp\(float32\[{rows}, 13\]\)$", lines[-1])
    else:  # the fused graph that failed to compile, after the op recorded into it
        assert " execution defer_and_fuse " in lines[-1]
        assert re.search(rf" op defer_and_fuse .*aten::exp\(float32\[{rows}, 13\]\)", lines[-2])
    torch.testing.assert_close(torch.exp(x).cpu(), torch.full((rows, 13), 2.718281828))


def test_an_index_check_failure_names_a_dump_listing_the_op_last(mode: str) -> None:
    table = torch.arange(10.0, device=TPU)
    index = torch.tensor([0, 15], device=TPU)
    torch.tpu.synchronize()
    torch.index_select(table, 0, index)
    with pytest.raises(IndexError, match="index_select") as failure:
        torch.tpu.synchronize()
    lines = dumped_lines(str(failure.value))
    assert "aten::index_select(float32[10], int64[2])" in lines[-1 if mode == "strict" else -2]


def test_an_asynchronous_device_error_names_a_dump() -> None:
    with torch_tpu.eager_mode("strict"):
        x = torch.ones(8, device=TPU)
        torch.tpu.synchronize()
        torch_tpu._C._inject_async_fault()
        torch.sin(x)
        with pytest.raises(RuntimeError, match="injected fault") as failure:
            torch.tpu.synchronize()
    assert "aten::sin(float32[8])" in dumped_lines(str(failure.value))[-1]


def test_the_dump_folder_keeps_the_newest_64() -> None:
    # A loop that catches its errors writes a dump for each: the folder does not grow past 64.
    paths = [torch_tpu.debug.dump_flight_record(f"dump {i}") for i in range(70)]
    assert all(paths)
    folder = Path(paths[-1]).parent  # type: ignore[arg-type]
    kept = sorted(folder.glob("flight-record-*"))
    assert len(kept) == 64
    assert all(Path(p).exists() for p in paths[-64:])  # type: ignore[arg-type]
    assert not Path(paths[0]).exists()  # type: ignore[arg-type]
    assert Path(paths[-1]).read_text().startswith("torch_tpu flight record: dump 69\n")  # type: ignore[arg-type]


def run_script(tmp_path: Path, body: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text("import os, signal, torch, torch_tpu\n" + body)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TPU_", "TPU_"))}
    return subprocess.run(
        [sys.executable, str(script)],
        env={**base, "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache"), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_ring_keeps_the_last_n_with_the_python_lines(tmp_path: Path) -> None:
    body = (
        "x = torch.ones(4, device='tpu')\n"
        "for n in range(1, 21):\n"
        "    x = x + n\n"  # line 4
        "print([e['sequence'] for e in torch_tpu.debug.flight_record()])\n"
        "print({e['location'] for e in torch_tpu.debug.flight_record()})\n"
    )
    env = {"TORCH_TPU_FLIGHT_RECORDER": "8", "TORCH_TPU_FLIGHT_RECORDER_LINES": "1"}
    proc = run_script(tmp_path, body, env)
    assert proc.returncode == 0, proc.stderr
    sequences, locations = proc.stdout.splitlines()[-2:]
    assert sequences == str(list(range(14, 22)))  # a fill and 20 adds: the last 8
    assert locations == str({f"{tmp_path / 'script.py'}:4"})


def test_the_recorder_can_be_turned_off(tmp_path: Path) -> None:
    body = "torch.ones(4, device='tpu').cpu()\nprint(torch_tpu.debug.flight_record())\n"
    proc = run_script(tmp_path, body, {"TORCH_TPU_FLIGHT_RECORDER": "0"})
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "[]", proc.stderr
    bad = run_script(tmp_path, body, {"TORCH_TPU_FLIGHT_RECORDER": "many"})
    assert bad.returncode != 0 and "TORCH_TPU_FLIGHT_RECORDER must be" in bad.stderr


@pytest.mark.parametrize("fatal", ["os.kill(os.getpid(), signal.SIGSEGV)", "os.abort()"])
def test_a_fatal_signal_leaves_a_dump(tmp_path: Path, fatal: str) -> None:
    body = f"x = torch.ones(2, 5, device='tpu')\ny = (x * 3).sum()\ny.cpu()\n{fatal}\n"
    proc = run_script(tmp_path, body, {})
    signal_number = signal.SIGSEGV if "SIGSEGV" in fatal else signal.SIGABRT
    assert proc.returncode == -signal_number  # the process still dies of its signal
    found = re.search(r"the last ops dispatched are in (\S+)", proc.stderr)
    assert found, proc.stderr
    path = Path(found.group(1))
    assert path.parent == tmp_path / "cache" / "flight_records"
    assert path.name == f"flight-record-{path.name.split('-')[2]}-{signal_number.name}.txt"
    text = path.read_text()
    assert f"fatal signal {signal_number.name}" in text.splitlines()[0]
    names = re.findall(r" (aten::[\w.]+)\(", text)
    assert names == ["aten::fill_.Scalar", "aten::mul.Tensor", "aten::sum"]
