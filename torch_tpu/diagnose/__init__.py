"""Diagnosis from profiles: ``python -m torch_tpu diagnose TRACE_DIR_OR_SCRIPT``.

Given a torch.profiler trace (a ``tensorboard_trace_handler`` folder or a Chrome trace file), or
a script that defines ``step()`` (run for ``--steps`` steps under the profiler), it reports the
top device ops, how much of each step the device sat idle waiting for the host, recompile
storms and what changed in their keys, host syncs, uploads per step, and (script mode) the
memory peak and what held it, each problem with its numbers, where it comes from and a fix.

    trace.py        reading the trace
    attribution.py  script mode: which Python line caused each sync, upload and compile
    runner.py       script mode: running the steps
    checks.py       the checks, from trace and attribution to findings
    report.py       the report, as text or JSON
    cli.py          the command line
"""

from __future__ import annotations

from pathlib import Path

from .report import Finding, Report, Site


def diagnose_trace(path: str | Path) -> Report:
    """Diagnoses a profile already written (a trace folder or file)."""
    from . import checks, trace

    return checks.analyze(trace.load(Path(path)), source=str(path), mode="trace")


def diagnose_script(path: str | Path, steps: int = 5, args: list[str] | None = None) -> Report:
    """Runs ``step()`` of the script at `path` for `steps` steps and diagnoses it."""
    from . import runner

    return runner.diagnose_script(path, steps, args or [])


__all__ = ["Finding", "Report", "Site", "diagnose_script", "diagnose_trace"]
