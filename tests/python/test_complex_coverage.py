"""Regression gate for complex numbers: every OpInfo entry that docs/complex_coverage.json lists
as passing in complex64 (forward, and backward) must still pass, through the normal complex
allow-list. Regenerate the report with `.venv/bin/python tools/complex_coverage.py`.

`--complex-gate-every N` checks only the entries whose op_db index is a multiple of N, and
`--op-gate-samples N` at most N samples of each (see scripts/test.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from test_op_coverage import op_at

from torch_tpu.testing.op_sweep import run_phase

REPORT = Path(__file__).resolve().parents[2] / "docs" / "complex_coverage.json"


def passing(phase: str) -> list[tuple[int, str]]:
    """The entries whose phase passed using only allowed ops: one that needed an op the
    allow-list still refuses passed only with the list lifted."""
    if not REPORT.exists():
        return []
    results: list[dict[str, Any]] = json.loads(REPORT.read_text())["results"]
    return [
        (r["index"], r["name"])
        for r in results
        if r.get(phase, [""])[0] == "pass" and not r.get(f"{phase}_ops")
    ]


@pytest.fixture
def gate_samples(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--op-gate-samples"))


@pytest.mark.parametrize(("index", "name"), passing("forward"), ids=lambda v: str(v))
def test_complex_forward_still_passes(index: int, name: str, gate_samples: int) -> None:
    status, reason = run_phase(op_at(index, name), torch.complex64, False, gate_samples)
    assert status == "pass", reason


@pytest.mark.parametrize(("index", "name"), passing("backward"), ids=lambda v: str(v))
def test_complex_backward_still_passes(index: int, name: str, gate_samples: int) -> None:
    status, reason = run_phase(op_at(index, name), torch.complex64, True, gate_samples)
    assert status == "pass", reason
