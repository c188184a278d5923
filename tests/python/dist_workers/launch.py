"""Runs a worker script under torchrun with a hard time limit, so a hang fails fast and shows
every rank's output instead of eating the CI budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def torchrun(
    worker: str,
    results: Path,
    *,
    nproc: int = 2,
    timeout: float = 240,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> list[list[dict[str, Any]]]:
    """Runs HERE/worker on `nproc` ranks; returns each rank's JSON-lines results."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(HERE / worker),
        *(args or []),
    ]
    full_env = {**os.environ, "DIST_RESULTS": str(results), "OMP_NUM_THREADS": "1", **(env or {})}
    try:
        done = subprocess.run(
            command, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"{worker} did not finish in {timeout} s; output:\n{_text(expired.stdout)}\n"
            f"{_text(expired.stderr)}"
        ) from None
    if done.returncode != 0:
        raise AssertionError(
            f"{worker} exited {done.returncode}; output:\n{done.stdout[-6000:]}\n"
            f"{done.stderr[-6000:]}"
        )
    per_rank = []
    for rank in range(nproc):
        lines = Path(f"{results}.{rank}").read_text().splitlines()
        per_rank.append([json.loads(line) for line in lines])
    return per_rank


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")[-6000:]


def by_case(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
    """Each rank's results keyed by case name."""
    return [{r["case"]: r for r in rank} for rank in per_rank]


def assert_passed(results: list[dict[str, dict[str, Any]]], case: str) -> None:
    """`case` ran on every rank in `results` and reported no error."""
    for rank, cases in enumerate(results):
        assert case in cases, f"rank {rank} did not run {case}"
        assert cases[case]["error"] is None, f"rank {rank}: {cases[case]['error']}"
