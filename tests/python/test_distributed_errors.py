"""tpu_dist's bad input and faults (torchrun, 2 ranks): mixed devices, AVG of integers, a
wrong tensor count, ranks that disagree on dtype, size or collective (every rank gets an error
naming the collective and the group still works), a rank that never arrives (the other fails
within the group's timeout) and a rank that dies (the survivor's next collective fails)."""

from __future__ import annotations

from typing import Any

import pytest
from dist_workers.launch import assert_passed, run_worker

BOTH_RANKS = [
    "mixed_devices",
    "avg_of_integers",
    "all_to_all_wrong_count",
    "dtype_differs_across_ranks",
    "shape_differs_across_ranks",
    "collective_differs_across_ranks",
    "group_works_after_errors",
    "rank_never_arrives",
]
SURVIVOR_ONLY = ["peer_process_died"]


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "errors_worker.py", timeout=120)


@pytest.mark.parametrize("case", BOTH_RANKS + SURVIVOR_ONLY)
def test_error_case(case: str, results: list[dict[str, dict[str, Any]]]) -> None:
    ranks = results[:1] if case in SURVIVOR_ONLY else results
    assert_passed(ranks, case)
