"""Running a sweep's entries in worker processes, so that an entry that crashes the process is
recorded as a crash and the sweep goes on (tools/op_coverage.py, tools/bad_input.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Records = list[dict[str, Any]]


def run_isolating_crashes(
    run_worker: Callable[[int, int], Records | str],
    start: int,
    stop: int,
    crash_record: Callable[[int, str], dict[str, Any]],
) -> Records:
    """Entries start..stop-1 in one worker; if it dies (`run_worker` returns how), each entry in
    a worker of its own, and `crash_record(index, how)` for each whose worker dies again."""
    records = run_worker(start, stop)
    if not isinstance(records, str):
        return records
    out: Records = []
    for i in range(start, stop):
        single = run_worker(i, i + 1)
        out.extend([crash_record(i, single)] if isinstance(single, str) else single)
    return out
