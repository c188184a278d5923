"""Script mode: run a script's steps under the profiler, then again under the per-line watch.

The script defines ``step()`` at module level (its setup runs first, as module code; a
``if __name__ == "__main__":`` block does not run). Pass 1 profiles ``steps`` calls of
``step()`` and gives the timings, device idle time and per-step counts, untouched by any Python
hook but the one that records Dynamo's recompiles. Pass 2 runs one more call, then ``steps``
recorded ones under :mod:`.attribution` and the memory history, which name the lines. A script
without ``step()`` runs once, whole, as ``__main__``, under both at once (its rates are then
per run, and its timings include the watch's cost).
"""

from __future__ import annotations

import ast
import contextlib
import os
import runpy
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from . import trace as trace_io
from .attribution import _LIBRARY_DIRS, Attribution, dynamo_recompiles, watching
from .checks import analyze
from .report import Holder, Memory, Report

MAX_HOLDERS = 5


def defines_step(script: Path) -> bool:
    tree = ast.parse(script.read_text(), str(script))
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "step"
        for node in tree.body
    )


@contextlib.contextmanager
def _script_context(script: Path, args: list[str]) -> Iterator[None]:
    """sys.argv and sys.path as ``python script.py args`` would have them; the script's own
    prints go to stderr so that stdout stays the report's (``--json``)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent.resolve()))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _synchronize() -> None:
    torch.tpu.synchronize()  # type: ignore[attr-defined]


def _profiled(run_steps: Callable[[], None], folder: str) -> trace_io.Trace:
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    with profile(activities=activities, record_shapes=True) as prof:
        run_steps()
        _synchronize()
    path = Path(folder) / "diagnose.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return trace_io.load(path)


def _holders(snapshot: dict[str, Any], before_bytes: int) -> tuple[int, list[Holder]]:
    """Replays the recorded allocations: the highest live total, and who held it then."""
    events = snapshot["device_traces"][0] if snapshot["device_traces"] else []
    live: dict[int, dict[str, Any]] = {}
    total = peak = 0
    at_peak: dict[int, dict[str, Any]] = {}
    for event in events:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += event["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif event["action"] == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
    by_line: Counter[str] = Counter()
    for event in at_peak.values():
        by_line[_allocating_line(event["frames"])] += event["size"]
    holders = [Holder(where, size) for where, size in by_line.most_common(MAX_HOLDERS)]
    if before_bytes:
        holders.append(
            Holder("storages allocated before the steps (weights, inputs)", before_bytes)
        )
    holders.sort(key=lambda h: -h.bytes)
    return before_bytes + peak, holders


def _allocating_line(frames: list[dict[str, Any]]) -> str:
    for frame in frames:
        name = str(frame.get("filename", ""))
        if name and not name.startswith("<") and not name.startswith(_LIBRARY_DIRS):
            return f"{name}:{frame.get('line')}"
    return "(no Python line: autograd's backward thread, or torch's own code)"


def _watched(run_steps: Callable[[], None], record: Attribution) -> Memory:
    from torch_tpu import memory

    _synchronize()
    before = torch.tpu.memory_allocated()  # type: ignore[attr-defined]
    memory._record_memory_history(max_entries=200_000, stacks="python")
    try:
        with watching(record):
            run_steps()
        _synchronize()
        snapshot = memory._snapshot()
    finally:
        memory._record_memory_history(enabled=None)
    peak, holders = _holders(snapshot, before)
    return Memory(peak_bytes=peak, holders=holders)


def diagnose_script(script: str | os.PathLike[str], steps: int, args: list[str]) -> Report:
    path = Path(script)
    record = Attribution()
    with tempfile.TemporaryDirectory(prefix="torch_tpu_diagnose_") as folder:
        if defines_step(path):
            with _script_context(path, args):
                namespace = runpy.run_path(str(path), run_name="__diagnose__")
                step: Callable[[], Any] = namespace["step"]

                def profiled_steps() -> None:
                    for index in range(steps):
                        with record_function(f"ProfilerStep#{index}"):
                            step()
                            if index == steps - 1:
                                # The work the steps left pending or in flight (DeferAndFuse's
                                # graph, run-ahead) belongs to them.
                                _synchronize()

                def watched_steps() -> None:
                    # One step first, unrecorded: functions compiled by torch.compile recompile
                    # once under the watch (Dynamo guards on the torch function modes).
                    step()
                    record.sites.clear()
                    for _ in range(steps):
                        step()
                        record.steps += 1

                _synchronize()
                torch.tpu.reset_peak_memory_stats()  # type: ignore[attr-defined]
                with dynamo_recompiles(record):
                    trace = _profiled(profiled_steps, folder)
                peak = torch.tpu.max_memory_allocated()  # type: ignore[attr-defined]
                memory = _watched(watched_steps, record)
                memory.peak_bytes = max(memory.peak_bytes, peak)
        else:
            with _script_context(path, args):
                record.steps = 1
                holder: dict[str, Memory] = {}

                def run_whole() -> None:
                    runpy.run_path(str(path), run_name="__main__")

                def whole() -> None:
                    holder["memory"] = _watched(run_whole, record)

                trace = _profiled(whole, folder)
                memory = holder["memory"]
    report = analyze(trace, record, memory, source=str(path), mode="script")
    if not defines_step(path):
        report.notes.append(
            f"{path.name} defines no step(): it ran once, whole, with the line watch on "
            "(define step() for per-step rates and timings without the watch's cost)"
        )
    return report
