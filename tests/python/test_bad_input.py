"""Regression gate for bad input: every perturbed call (torch_tpu/testing/bad_input.py) that
docs/bad_input.json records as agreeing with CPU (the same exception class, or the same
answer) must still agree. Regenerate the report with `.venv/bin/python tools/bad_input.py`.

`--bad-input-every N` checks only the entries whose op_db index is a multiple of N (CI checks
every 4th, see scripts/test.sh)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from torch_tpu.testing import bad_input

REPORT = Path(__file__).resolve().parents[2] / "docs" / "bad_input.json"


def agreeing() -> list[tuple[int, str, tuple[str, ...]]]:
    """(op_db index, entry name, perturbations that agree) per entry."""
    if not REPORT.exists():
        return []
    by_entry: dict[tuple[int, str], list[str]] = defaultdict(list)
    for r in json.loads(REPORT.read_text())["records"]:
        if r["outcome"] == "agree":
            by_entry[(r["index"], r["entry"])].append(r["perturbation"])
    return [(i, name, tuple(p)) for (i, name), p in sorted(by_entry.items())]


@pytest.mark.parametrize(
    ("index", "name", "perturbations"),
    [pytest.param(i, n, p, id=n) for i, n, p in agreeing()],
)
def test_bad_input_agrees_with_cpu(index: int, name: str, perturbations: tuple[str, ...]) -> None:
    op = bad_input.entries()[index]
    calls = dict(bad_input.cases(op))
    for perturbation in perturbations:
        outcome, detail = bad_input.outcome(op, calls[perturbation])
        assert outcome == "agree", f"{perturbation}: {outcome}: {detail}"
