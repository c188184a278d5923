"""Regression gate for operator coverage: every OpInfo entry that docs/op_coverage.json lists
as passing (forward float32, and backward) must still pass. Regenerate the report with
`.venv/bin/python tools/op_coverage.py` after adding kernels.

The whole gate (every sample of every entry) takes about 35 minutes on two cores with two
pytest workers; `--op-gate-samples N` checks at most N samples per entry, evenly spread, and
`--op-gate-every N` only the entries whose op_db index is a multiple of N (see scripts/test.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torch_tpu.testing.op_sweep import backward_dtype, forward_dtype, run_phase

REPORT = Path(__file__).resolve().parents[2] / "docs" / "op_coverage.json"


@pytest.fixture
def gate_samples(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--op-gate-samples"))


def passing(phase: str) -> list[tuple[int, str]]:
    if not REPORT.exists():
        return []
    results: list[dict[str, Any]] = json.loads(REPORT.read_text())["results"]
    return [(r["index"], r["name"]) for r in results if r.get(phase, [""])[0] == "pass"]


def op_at(index: int, name: str) -> Any:
    from torch.testing._internal.common_methods_invocations import op_db

    op = op_db[index]
    full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    assert full == name, f"op_db changed: entry {index} is {full}, the report says {name}"
    return op


@pytest.mark.parametrize(("index", "name"), passing("float32"), ids=lambda v: str(v))
def test_forward_float32_still_passes(index: int, name: str, gate_samples: int) -> None:
    op = op_at(index, name)
    status, reason = run_phase(op, forward_dtype(op), False, gate_samples)
    assert status == "pass", reason


@pytest.mark.parametrize(("index", "name"), passing("backward"), ids=lambda v: str(v))
def test_backward_still_passes(index: int, name: str, gate_samples: int) -> None:
    op = op_at(index, name)
    dtype = backward_dtype(op)
    assert dtype is not None, f"{name} no longer supports autograd"
    status, reason = run_phase(op, dtype, True, gate_samples)
    assert status == "pass", reason
