"""Reading a torch.profiler Chrome trace (what ``tensorboard_trace_handler`` or
``export_chrome_trace`` writes) into the few event kinds the diagnosis needs.

torch_tpu's Kineto profiler puts these in the trace (csrc/profiler/kineto_profiler.cc):
``kernel`` events, one per device run, named after the op or fused graph it ran; and host
spans (category ``privateuse1_runtime``): ``launch ...``, ``compile ...``, ``sync: reading a
tpu tensor`` and ``upload: ...``, each carrying the ``External id`` of the op that caused it.
torch.profiler adds the ``cpu_op`` events (with their input shapes, dtypes and scalar values
under ``record_shapes=True``), ``ProfilerStep#N`` annotations, and, under ``with_stack=True``,
``python_function`` events: the Python functions running, named ``file(first line): name``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

# Frames of these files are torch's or Python's, never the user's.
_LIBRARY_PREFIXES = ("torch/", "torch_tpu/", "functorch/", "torchgen/", "<", "runpy.py")


@dataclasses.dataclass(frozen=True)
class Event:
    name: str
    start_us: float
    end_us: float
    thread: int
    args: dict[str, Any]

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def external_id(self) -> int | None:
        value = self.args.get("External id")
        return value if isinstance(value, int) else None


@dataclasses.dataclass
class Trace:
    path: Path
    steps: list[tuple[float, float]]  # ProfilerStep windows (start, end) in µs; [] when none
    kernels: list[Event]  # device runs
    runtime: list[Event]  # compile / sync / upload / launch host spans
    cpu_ops: dict[int, Event]  # by External id
    python: dict[int, list[Event]]  # python_function events per thread, sorted by start
    with_stack: bool
    record_shapes: bool

    def step_windows(self) -> list[tuple[float, float]]:
        """The steps, or the whole trace as one step where the trace has none."""
        if self.steps:
            return self.steps
        spans = [e for e in self.kernels + self.runtime + list(self.cpu_ops.values())]
        if not spans:
            return []
        return [(min(e.start_us for e in spans), max(e.end_us for e in spans))]

    def step_of(self, time_us: float) -> int | None:
        for index, (start, end) in enumerate(self.step_windows()):
            if start <= time_us <= end:
                return index
        return None

    def user_frame(self, event: Event) -> str | None:
        """The innermost user Python function running when `event` happened, as the profiler
        names it (``file(first line): function``); None without ``with_stack``."""
        best: Event | None = None
        for frame in self.python.get(event.thread, []):
            if frame.start_us > event.start_us:
                break
            if frame.end_us >= event.end_us and is_user_frame(frame.name):
                if best is None or frame.start_us >= best.start_us:
                    best = frame
        return best.name if best else None

    def python_call(self, event: Event) -> str | None:
        """The innermost Python-level call enclosing `event` (``<built-in method item of
        Tensor object ...>``, ``torch/_tensor.py(...): __repr__``), which names the API."""
        best: Event | None = None
        for frame in self.python.get(event.thread, []):
            if frame.start_us > event.start_us:
                break
            if frame.end_us >= event.end_us and (best is None or frame.start_us >= best.start_us):
                best = frame
        return best.name if best else None


def is_user_frame(name: str) -> bool:
    return not name.startswith(_LIBRARY_PREFIXES) and "site-packages" not in name


def find_trace_file(path: Path) -> Path:
    """`path` itself, or the trace of the newest run under the folder `path`: of the traces
    written within a minute of the newest (tensorboard_trace_handler may write a short one as
    the profiler closes), the largest."""
    if path.is_file():
        return path
    candidates = [
        p for pattern in ("*.pt.trace.json", "*.pt.trace.json.gz") for p in path.rglob(pattern)
    ] or list(path.rglob("*.json"))
    if not candidates:
        raise FileNotFoundError(f"no torch.profiler trace (*.pt.trace.json) under {path}")
    newest = max(p.stat().st_mtime for p in candidates)
    recent = [p for p in candidates if p.stat().st_mtime >= newest - 60]
    return max(recent, key=lambda p: p.stat().st_size)


def _open(path: Path) -> dict[str, Any]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            data = json.load(f)
    else:
        with open(path) as f:
            data = json.load(f)
    if isinstance(data, list):  # a bare event list is a valid Chrome trace too
        data = {"traceEvents": data}
    return data  # type: ignore[no-any-return]


def load(path: Path) -> Trace:
    file = find_trace_file(path)
    data = _open(file)
    steps: list[tuple[float, float]] = []
    kernels: list[Event] = []
    runtime: list[Event] = []
    cpu_ops: dict[int, Event] = {}
    python: dict[int, list[Event]] = {}
    for raw in data.get("traceEvents", []):
        if raw.get("ph") != "X" or "dur" not in raw:
            continue
        start = float(raw["ts"])
        tid = raw.get("tid", 0)
        event = Event(
            name=str(raw.get("name", "")),
            start_us=start,
            end_us=start + float(raw["dur"]),
            thread=tid if isinstance(tid, int) else hash(tid),
            args=raw.get("args") or {},
        )
        category = raw.get("cat")
        if category == "kernel":
            kernels.append(event)
        elif category == "privateuse1_runtime":
            runtime.append(event)
        elif category == "cpu_op":
            if event.external_id is not None:
                cpu_ops.setdefault(event.external_id, event)
        elif category == "python_function":
            python.setdefault(event.thread, []).append(event)
        elif category == "user_annotation" and event.name.startswith("ProfilerStep#"):
            steps.append((event.start_us, event.end_us))
    for frames in python.values():
        frames.sort(key=lambda e: e.start_us)
    kernels.sort(key=lambda e: e.start_us)
    runtime.sort(key=lambda e: e.start_us)
    return Trace(
        path=file,
        steps=sorted(steps),
        kernels=kernels,
        runtime=runtime,
        cpu_ops=cpu_ops,
        python=python,
        with_stack=bool(data.get("with_stack", bool(python))),
        record_shapes=bool(data.get("record_shapes", False)),
    )
