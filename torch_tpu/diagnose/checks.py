"""The checks: from a trace (and, in script mode, the per-line attribution) to findings.

Rates are per step over the steps measured: every profiled step but the first, a warm-up whose
compiles are expected, when there are several.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from .attribution import PYTHON_SCALAR, Attribution, key_change
from .attribution import Site as LineSite
from .report import Finding, Memory, Report, Site, TopOp
from .trace import Event, Trace

# A step is host-bound when the device sits idle (not counting compiles) this much of it...
HOST_BOUND_IDLE_PERCENT = 50.0
# ...while running at least this many programs per step (one big compiled program that is
# merely short is not a dispatch problem).
HOST_BOUND_MIN_RUNS = 8
# A program shorter than this on the device costs less than launching it does on a TPU or GPU
# (~40-80 us a launch, measured through the XLA CUDA plugin; see DESIGN.md's cost model): a
# step of many such programs is launch-bound there, whatever the CPU plugin's timings show
# (its launches cost ~3 us, and its device times are estimated on a host that may be busy).
LAUNCH_US = 20.0
TOP_OPS = 5
MAX_SITES = 5

_FIX = {
    "host_bound": (
        "fuse the step's small ops: torch_tpu.set_eager_mode('defer_and_fuse') (or "
        "TPU_DEFER_AND_FUSE=1), or torch.compile(step, backend='tpu') to run it as one program"
    ),
    "recompiles": (
        "keep shapes fixed (pad inputs to a few sizes; TORCH_TPU_SIZE_BUCKETS pads eager ops to "
        "power-of-two buckets), keep dtypes fixed, pass changing numbers as 0-dim tensors, "
        "or torch.compile(..., dynamic=True) / torch._dynamo.mark_dynamic for varying sizes"
    ),
    "host_syncs": (
        "keep values on the device: accumulate metrics as tensors and read them (.item(), "
        "print, .cpu()) every N steps; replace data-dependent shapes (nonzero, masked_select, "
        "if tensor:) by torch.where or masks"
    ),
    "uploads": (
        "create tensors on the device (device='tpu') or upload them once before the loop; "
        "for input batches, .to('tpu', non_blocking=True) ahead of the step that uses them"
    ),
}

_SYNC_CALLS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "cpu": ".cpu()",
    "numpy": ".numpy()",
    "to": ".to(cpu)",
    "__repr__": "printing (repr)",
    "__str__": "printing (str)",
    "__format__": "printing (format)",
    "__bool__": "bool(tensor) / if tensor",
    "__int__": "int(tensor)",
    "__float__": "float(tensor)",
    "__index__": "tensor as an index",
    "nonzero": "nonzero (a data-dependent shape)",
    "masked_select": "masked_select (a data-dependent shape)",
    "unique": "unique (a data-dependent shape)",
    "__getitem__": "boolean-mask indexing (a data-dependent shape)",
}


def _union_ms(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Length (ms) of the union of `intervals` (µs) clipped to [start, end]."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if b > start and a < end)
    total, current_start, current_end = 0.0, None, None
    for a, b in clipped:
        if current_end is None or a > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = a, b
        else:
            current_end = max(current_end, b)
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total / 1000.0


def _in(events: list[Event], windows: list[tuple[float, float]]) -> list[Event]:
    return [e for e in events if any(a <= e.start_us <= b for a, b in windows)]


def _launched_in(trace: Trace, windows: list[tuple[float, float]]) -> list[Event]:
    """The device runs whose launch happened in `windows` (a run may start later, when the
    device is free). The profiler writes each run's launch and run in the same order, so the
    n-th launch is the n-th run."""
    launches = [e for e in trace.runtime if e.name.startswith("launch ")]
    if len(launches) != len(trace.kernels):  # a trace of another shape: go by the run itself
        return _in(trace.kernels, windows)
    return [
        run
        for launch, run in zip(launches, trace.kernels, strict=True)
        if any(a <= launch.start_us <= b for a, b in windows)
    ]


def _launch_sites(trace: Trace, windows: list[tuple[float, float]], steps: int) -> list[Site]:
    """Trace mode: the Python functions that launched the most programs (with_stack)."""
    if not trace.with_stack:
        return []
    launches = _in([e for e in trace.runtime if e.name.startswith("launch ")], windows)
    groups: Counter[str] = Counter(_trace_site(trace, e) for e in launches)
    return [
        Site(where, "", round(n / steps, 2), "programs launched")
        for where, n in groups.most_common(MAX_SITES)
    ]


def _trace_site(trace: Trace, event: Event) -> str:
    frame = trace.user_frame(event)
    if frame is None:
        return "(unknown: profile with with_stack=True to see the Python function)"
    return frame


def _python_api(name: str | None) -> str:
    """The API a Python call names ("item", "__repr__", "to"), from the profiler's name of the
    innermost Python call around an event."""
    if name is None:
        return ""
    match = re.match(r"<built-in method (\w+) of", name) or re.search(r": (\w+)$", name)
    return match.group(1) if match else name


def _sync_call(name: str | None) -> str:
    api = _python_api(name)
    return _SYNC_CALLS.get(api, api)


def _trace_key_change(trace: Trace, compiles: list[Event]) -> str:
    """What changed between consecutive compiles of one op, from the arguments that
    record_shapes recorded for the op that triggered each (compared only between the same op)."""
    if len(compiles) < 2:
        return "compiled once in the measured steps"
    if not trace.record_shapes:
        return "what changed is unknown (profile with record_shapes=True to see the arguments)"
    names = ("Input Dims", "Input type", "Concrete Inputs", "Input Strides")
    kinds = ("shape", "dtype", PYTHON_SCALAR, "strides")
    previous: dict[str, tuple[Any, ...]] = {}
    changes: list[tuple[str, str]] = []
    for compile_event in compiles:
        op = trace.cpu_ops.get(compile_event.external_id or -1)
        if op is None:
            continue
        key = tuple(op.args.get(n) for n in names)
        before = previous.get(op.name)
        previous[op.name] = key
        if before is None:
            continue
        for kind, old, new in zip(kinds, before, key, strict=True):
            if old != new:
                changes.append((kind, f"{old} -> {new}"))
                break
    return _describe(changes) if changes else "nothing visible in the recorded arguments"


def _line_sites(attribution: Attribution, counter: str, detail: str = "call") -> list[Site]:
    """The lines that moved `counter`, most per step first."""
    steps = max(attribution.steps, 1)
    ranked = sorted(attribution.sites.values(), key=lambda s: -s.counts[counter])
    sites: list[Site] = []
    for line in ranked[:MAX_SITES]:
        if line.counts[counter] == 0:
            break
        calls = line.calls.get(counter, Counter())
        if detail == "sync":
            text = ", ".join(_SYNC_CALLS.get(c, c) for c in calls)
        elif detail == "compile":
            text = _line_key_change(line)
        else:
            text = ", ".join(f"{c}() {n / steps:g}x" for c, n in calls.most_common(3))
        sites.append(
            Site(line.location, line.function, round(line.counts[counter] / steps, 2), text)
        )
    return sites


def _line_key_change(line: LineSite) -> str:
    parts: list[str] = []
    for call, keys in line.compile_keys.items():
        changes = [c for a, b in zip(keys, keys[1:], strict=False) for c in key_change(a, b)]
        parts.append(f"{call}: {_describe(changes) if changes else 'compiled once here'}")
    return "; ".join(parts)


def _describe(changes: list[tuple[str, str]]) -> str:
    """ "shape changed 3x (e.g. [6, 16] -> [7, 16])", one clause per kind of change."""
    kinds = Counter(kind for kind, _ in changes)
    examples = {kind: detail for kind, detail in reversed(changes)}
    return ", ".join(f"{kind} changed {n}x (e.g. {examples[kind]})" for kind, n in kinds.items())


def _recompile_sites(attribution: Attribution, steps: int) -> list[Site]:
    """torch.compile's recompiles (recorded while the steps were profiled), per function,
    with the guard that failed (the newest cache entry's, the one just compiled before)."""
    by_function: dict[tuple[str, int, str], list[str]] = defaultdict(list)
    for r in attribution.recompiles:
        by_function[(r.file, r.line, r.function)].append(r.reasons[0])
    return [
        Site(
            f"{file}:{line}",
            function,
            round(len(reasons) / steps, 2),
            "torch.compile recompiled: " + "; ".join(dict.fromkeys(reasons)),
        )
        for (file, line, function), reasons in by_function.items()
    ][:MAX_SITES]


@dataclasses.dataclass
class _Steps:
    """The measured steps of a trace, and what happened in them."""

    trace: Trace
    attribution: Attribution | None
    mode: str
    windows: list[tuple[float, float]]  # every step
    measured: list[tuple[float, float]]  # the steps measured
    kernels: list[Event]  # the device runs launched in them
    compiles: list[Event]
    syncs: list[Event]
    uploads: list[Event]
    step_ms: float
    busy_ms: float
    compile_ms: float

    @property
    def count(self) -> int:
        return max(len(self.measured), 1)

    @property
    def repeated(self) -> int:
        """How many events make a per-step problem: one a step; without steps (a whole
        run), two, so that only what repeats counts."""
        return self.count if len(self.windows) > 1 else 2

    @property
    def upload_bytes(self) -> int:
        sizes = (re.search(r"(\d+) bytes", e.name) for e in self.uploads)
        return sum(int(m.group(1)) for m in sizes if m)

    @property
    def host_idle_percent(self) -> float:
        """The share of a step the device sat idle while the host did Python and dispatch
        work (not while it compiled)."""
        host_ms = max(self.step_ms - self.busy_ms - self.compile_ms, 0.0)
        return 100.0 * host_ms / self.step_ms if self.step_ms > 0 else 0.0


def _measure(trace: Trace, attribution: Attribution | None, mode: str) -> _Steps:
    windows = trace.step_windows()
    measured = windows[1:] if len(windows) > 1 else windows
    count = max(len(measured), 1)
    kernels = _launched_in(trace, measured)
    runtime = _in(trace.runtime, measured)
    compiles = [e for e in runtime if e.name.startswith("compile ")]
    # The device may run behind the host: the measured period lasts until the last program
    # launched in it has finished.
    start = measured[0][0] if measured else 0.0
    end = max([measured[-1][1]] + [k.end_us for k in kernels]) if measured else 0.0
    return _Steps(
        trace=trace,
        attribution=attribution,
        mode=mode,
        windows=windows,
        measured=measured,
        kernels=kernels,
        compiles=compiles,
        syncs=[e for e in runtime if e.name.startswith("sync:")],
        uploads=[e for e in runtime if e.name.startswith("upload:")],
        step_ms=(end - start) / 1000.0 / count,
        busy_ms=_union_ms([(k.start_us, k.end_us) for k in kernels], start, end) / count,
        compile_ms=sum(e.duration_us for e in compiles) / 1000.0 / count,
    )


def _top_ops(steps: _Steps) -> list[TopOp]:
    by_op: dict[str, list[Event]] = defaultdict(list)
    for k in steps.kernels:
        by_op[k.name].append(k)
    total = sum(k.duration_us for k in steps.kernels) or 1.0
    ranked = sorted(by_op.items(), key=lambda item: -sum(k.duration_us for k in item[1]))
    return [
        TopOp(
            name=name,
            runs_per_step=len(runs) / steps.count,
            device_ms_per_step=round(sum(k.duration_us for k in runs) / 1000.0 / steps.count, 4),
            share=round(sum(k.duration_us for k in runs) / total, 4),
        )
        for name, runs in ranked[:TOP_OPS]
    ]


def _host_bound(steps: _Steps) -> Finding | None:
    kernels, count = steps.kernels, steps.count
    runs_per_step = len(kernels) / count
    if not kernels or runs_per_step < HOST_BOUND_MIN_RUNS:
        return None
    mean_run_us = sum(k.duration_us for k in kernels) / len(kernels)
    # The median: a few runs whose completion the host saw late do not hide many short ones.
    median_run_us = statistics.median(k.duration_us for k in kernels)
    idle_percent = steps.host_idle_percent
    short = median_run_us < LAUNCH_US
    if idle_percent < HOST_BOUND_IDLE_PERCENT and not short:
        return None
    if steps.attribution:
        sites = _line_sites(steps.attribution, "executions")
    else:
        sites = _launch_sites(steps.trace, steps.measured, count)
    return Finding(
        kind="host_bound",
        summary=(
            f"host-bound: {runs_per_step:.0f} programs per step, {median_run_us:.1f} us each "
            "on the device (median)"
            + (" (shorter than a launch takes on a TPU or GPU)" if short else "")
            + f"; the device sat idle {idle_percent:.0f}% of each {steps.step_ms:.2f} ms step "
            "waiting for the host"
        ),
        fix=_FIX["host_bound"],
        numbers={
            "idle_percent": round(idle_percent, 1),
            "runs_per_step": runs_per_step,
            "mean_run_us": round(mean_run_us, 2),
            "median_run_us": round(median_run_us, 2),
            "step_ms": round(steps.step_ms, 3),
        },
        sites=sites,
    )


def _recompiles(steps: _Steps) -> Finding | None:
    compiles, count, trace = steps.compiles, steps.count, steps.trace
    # Only after a warm-up step, and at least one compile a step.
    if not compiles or len(steps.windows) <= 1 or len(compiles) < len(steps.measured):
        return None
    attribution = steps.attribution
    sites = _line_sites(attribution, "cache_misses", "compile") if attribution else []
    if not sites:
        # Trace mode, or compiles that did not come back while the lines were watched
        # (script mode): the op, and the function where the trace has Python stacks.
        groups: dict[tuple[str, str], list[Event]] = defaultdict(list)
        for e in compiles:
            where = (
                _trace_site(trace, e)
                if trace.with_stack or steps.mode == "trace"
                else "(the line is unknown: these compiles did not repeat when watched)"
            )
            groups[(where, e.name.removeprefix("compile "))].append(e)
        ranked = sorted(groups.items(), key=lambda item: -len(item[1]))[:MAX_SITES]
        sites = [
            Site(where, op, round(len(evs) / count, 2), _trace_key_change(trace, evs))
            for (where, op), evs in ranked
        ]
    if attribution:
        sites += _recompile_sites(attribution, count)
    return Finding(
        kind="recompiles",
        summary=(
            f"recompile storm: {len(compiles) / count:.1f} compiles per step after the first "
            f"step, {steps.compile_ms:.1f} ms of compiling per step"
        ),
        fix=_FIX["recompiles"],
        numbers={"compiles_per_step": len(compiles) / count, "compile_ms": steps.compile_ms},
        sites=sites,
    )


def _trace_sites(
    steps: _Steps, events: list[Event], name_call: Callable[[str | None], str]
) -> list[Site]:
    """Trace mode: the functions (and the calls in them) where `events` happened."""
    trace = steps.trace
    groups: Counter[tuple[str, str]] = Counter(
        (_trace_site(trace, e), name_call(trace.python_call(e))) for e in events
    )
    return [
        Site(where, "", round(n / steps.count, 2), call)
        for (where, call), n in groups.most_common(MAX_SITES)
    ]


def _host_syncs(steps: _Steps) -> Finding | None:
    syncs, count = steps.syncs, steps.count
    if not syncs or len(syncs) < steps.repeated:
        return None
    wait_ms = sum(e.duration_us for e in syncs) / 1000.0 / count
    if steps.attribution:
        sites = _line_sites(steps.attribution, "host_syncs", "sync")
    else:
        sites = _trace_sites(steps, syncs, _sync_call)
    return Finding(
        kind="host_syncs",
        summary=(
            f"host syncs: {len(syncs) / count:.1f} per step, the host waiting "
            f"{wait_ms * 1000:.0f} us per step for the device's values"
        ),
        fix=_FIX["host_syncs"],
        numbers={"syncs_per_step": len(syncs) / count, "wait_ms": round(wait_ms, 3)},
        sites=sites,
    )


def _uploads(steps: _Steps) -> Finding | None:
    uploads, count = steps.uploads, steps.count
    if not uploads or len(uploads) < steps.repeated:
        return None
    if steps.attribution:
        sites = _line_sites(steps.attribution, "uploads")
    else:
        sites = _trace_sites(steps, uploads, _python_api)
    return Finding(
        kind="uploads",
        summary=(
            f"host-to-device uploads every step: {len(uploads) / count:.1f} uploads, "
            f"{steps.upload_bytes / count:.0f} bytes per step"
        ),
        fix=_FIX["uploads"],
        numbers={
            "uploads_per_step": len(uploads) / count,
            "bytes_per_step": steps.upload_bytes / count,
        },
        sites=sites,
    )


CHECKS: tuple[Callable[[_Steps], Finding | None], ...] = (
    _host_bound,
    _recompiles,
    _host_syncs,
    _uploads,
)


def _notes(steps: _Steps) -> list[str]:
    notes: list[str] = []
    if steps.mode == "trace":
        if not steps.trace.with_stack:
            notes.append("the trace has no Python stacks: profile with with_stack=True")
        notes.append(
            "trace mode names the Python function around each event by its first line "
            "(torch.profiler records functions, not lines); `diagnose script.py` names lines "
            "and what held the memory peak"
        )
    if not steps.trace.kernels:
        notes.append(
            "the trace has no tpu device runs: profile with ProfilerActivity.PrivateUse1 "
            "(and ProfilerActivity.CPU) in activities"
        )
    if len(steps.windows) <= 1:
        notes.append("one step (no ProfilerStep marks): per-step rates cover the whole trace")
    return notes


def analyze(
    trace: Trace,
    attribution: Attribution | None = None,
    memory: Memory | None = None,
    source: str = "",
    mode: str = "trace",
) -> Report:
    steps = _measure(trace, attribution, mode)
    count = steps.count
    per_step = {
        "device runs": len(steps.kernels) / count,
        "compiles": len(steps.compiles) / count,
        "compile ms": steps.compile_ms,
        "host syncs": len(steps.syncs) / count,
        "downloads": len(steps.syncs) / count,  # each host sync reads one buffer back
        "uploads": len(steps.uploads) / count,
        "upload bytes": steps.upload_bytes / count,
    }
    idle_percent = 100.0 * (1 - steps.busy_ms / steps.step_ms) if steps.step_ms > 0 else 0.0
    return Report(
        source=source or str(trace.path),
        mode=mode,
        steps=len(steps.measured),
        step_ms=round(steps.step_ms, 3),
        device_busy_ms=round(steps.busy_ms, 3),
        device_idle_percent=round(idle_percent, 1),
        per_step={k: round(v, 2) for k, v in per_step.items()},
        top_ops=_top_ops(steps),
        findings=[f for check in CHECKS if (f := check(steps)) is not None],
        memory=memory,
        notes=_notes(steps),
    )
