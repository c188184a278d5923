"""torch.tpu.memory._record_memory_history / _snapshot: every storage allocated and freed while
recording, with the Python stack that allocated it, in the layout torch.cuda.memory uses, which
PyTorch's own memory visualizer code reads."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from conftest import TPU
from torch.cuda import _memory_viz


def allocate_here() -> tuple[torch.Tensor, torch.Tensor]:
    big = torch.ones(1000, device=TPU)  # 4000 bytes
    small = torch.zeros(10, device=TPU)  # 40 bytes
    return big, small


def test_history_records_allocations_frees_and_stacks(tmp_path: Path) -> None:
    torch.tpu.memory._record_memory_history(stacks="python", max_entries=10000)
    try:
        big, small = allocate_here()
        big_address = big.untyped_storage().data_ptr()
        del big
        snapshot = torch.tpu.memory._snapshot()
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    trace = snapshot["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert [e["size"] for e in allocs][:2] == [4000, 40]
    assert allocs[0]["addr"] == big_address
    frees = [e for e in trace if e["action"] == "free_completed"]
    assert [e["addr"] for e in frees] == [big_address]
    names = [f["name"] for f in allocs[0]["frames"]]
    assert "allocate_here" in names
    assert any(f["filename"].endswith("test_memory_history.py") for f in allocs[0]["frames"])
    # The live storage allocated while recording is a segment; the freed one is not.
    live = {s["address"]: s for s in snapshot["segments"]}
    assert small.untyped_storage().data_ptr() in live and big_address not in live
    assert live[small.untyped_storage().data_ptr()]["blocks"][0]["size"] == 40
    # PyTorch's visualizer code reads it.
    assert "Active Memory Timeline" in _memory_viz.trace_plot(snapshot)
    assert "segments: " in _memory_viz.segsum(snapshot)
    torch.tpu.memory._dump_snapshot(str(tmp_path / "snapshot.pickle"))
    dumped = pickle.loads((tmp_path / "snapshot.pickle").read_bytes())
    assert len(dumped["device_traces"][0]) == len(trace)


def test_nothing_is_recorded_when_off() -> None:
    torch.tpu.memory._record_memory_history(max_entries=10)
    torch.tpu.memory._record_memory_history(enabled=None)
    before = len(torch.tpu.memory._snapshot()["device_traces"][0])
    torch.ones(100, device=TPU)
    assert len(torch.tpu.memory._snapshot()["device_traces"][0]) == before


def test_max_entries_keeps_the_newest() -> None:
    torch.tpu.memory._record_memory_history(stacks="python", max_entries=4)
    try:
        kept = [torch.ones(n + 1, device=TPU) for n in range(10)]
        trace = torch.tpu.memory._snapshot()["device_traces"][0]
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    assert len(trace) == 4
    assert trace[-1]["size"] == 4 * len(kept)
