"""What a diagnosis reports: plain words with numbers and a fix-it line per problem, or JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


@dataclasses.dataclass
class Site:
    """Where a problem comes from: ``file:line`` (script mode), or the enclosing function
    ``file(first line): name`` (trace mode, under ``with_stack=True``)."""

    location: str
    function: str
    per_step: float  # how many times per step this site did it
    detail: str = ""  # the call ("item", "to"), what changed between compiles, ...


@dataclasses.dataclass
class Finding:
    kind: str  # "host_bound", "recompiles", "host_syncs", "uploads"
    summary: str
    fix: str
    numbers: dict[str, float]
    sites: list[Site]


@dataclasses.dataclass
class TopOp:
    name: str
    runs_per_step: float
    device_ms_per_step: float
    share: float  # of the device's busy time


@dataclasses.dataclass
class Holder:
    location: str  # the user's line that allocated it ("before the steps" for older storages)
    bytes: int


@dataclasses.dataclass
class Memory:
    peak_bytes: int  # torch.tpu.max_memory_allocated() over the profiled steps
    holders: list[Holder]  # what was live at the peak, largest first (script mode)


@dataclasses.dataclass
class Report:
    source: str
    mode: str  # "trace" or "script"
    steps: int  # steps measured (the first profiled step, a warm-up, left out when there are more)
    step_ms: float
    device_busy_ms: float
    device_idle_percent: float
    per_step: dict[str, float]  # device runs, compiles, host syncs, uploads, upload bytes, ...
    top_ops: list[TopOp]
    findings: list[Finding]
    memory: Memory | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def finding(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)

    def __str__(self) -> str:
        lines = [
            f"diagnose: {self.source} ({self.mode} mode, {self.steps} step"
            f"{'' if self.steps == 1 else 's'} measured)",
            f"step          {self.step_ms:.2f} ms; device busy {self.device_busy_ms:.2f} ms, "
            f"idle {self.device_idle_percent:.0f}%",
            "per step      " + ", ".join(f"{k} {_number(v)}" for k, v in self.per_step.items()),
        ]
        if self.top_ops:
            lines.append("top device ops (per step):")
            for op in self.top_ops:
                lines.append(
                    f"  {op.device_ms_per_step:8.3f} ms  {op.share * 100:5.1f}%  "
                    f"{_number(op.runs_per_step)} runs  {op.name}"
                )
        if self.memory is not None:
            lines.append(f"memory peak   {_bytes(self.memory.peak_bytes)}")
            for holder in self.memory.holders:
                lines.append(f"  {_bytes(holder.bytes):>10}  held by {holder.location}")
        if not self.findings:
            lines.append("no problems found")
        for finding in self.findings:
            lines.append(f"problem: {finding.summary}")
            for site in finding.sites:
                detail = f" ({site.detail})" if site.detail else ""
                within = f" in {site.function}" if site.function else ""
                lines.append(
                    f"  at {site.location}{within}: {_number(site.per_step)} per step{detail}"
                )
            lines.append(f"  fix: {finding.fix}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def from_json(text: str) -> dict[str, Any]:
    """A report as tools read it back (a plain dict)."""
    return json.loads(text)  # type: ignore[no-any-return]
