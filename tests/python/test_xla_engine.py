"""The XLA collective engine's lowering in one process over two CPU devices: all_reduce (every
op), all_gather and all_to_all along each dimension, reduce_scatter and a ring permute, for
float32, bfloat16, int32, int64 and bool, against the host engine's arithmetic on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dist_workers import xla_engine_worker
from dist_workers.launch import once_per_run

WORKER = Path(__file__).resolve().parent / "dist_workers" / "xla_engine_worker.py"


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    def run() -> dict[str, dict[str, Any]]:
        path = tmp_path_factory.mktemp("xla_engine") / "results"
        env = {**os.environ, "TORCH_TPU_CPU_DEVICE_COUNT": "2", "DIST_RESULTS": str(path)}
        done = subprocess.run(
            [sys.executable, str(WORKER)], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-6000:]
        rows = [json.loads(line) for line in Path(f"{path}.0").read_text().splitlines()]
        return {r["case"]: r for r in rows}

    return once_per_run(tmp_path_factory, "xla_engine", run)


@pytest.mark.parametrize("case", list(xla_engine_worker.cases()))
def test_xla_engine_matches_host_arithmetic(case: str, results: dict[str, dict[str, Any]]) -> None:
    assert case in results, f"{case} did not run"
    assert results[case]["error"] is None, results[case]["error"]
