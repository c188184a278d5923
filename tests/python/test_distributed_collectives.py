"""tpu_dist collectives under torchrun (2 ranks): every collective x dtype x async_op on tpu
tensors equals the same call on CPU tensors through Gloo; subgroups, object collectives,
coalescing, CPU tensors on the same group, and float8 where nothing is reduced.

One torchrun launch runs every case (process start-up and rendezvous are paid once); each
case is then its own test here, failing with the rank's traceback."""

from __future__ import annotations

from typing import Any

import pytest
from dist_workers import collectives_worker
from dist_workers.launch import assert_passed, run_worker

SYNC_ASYNC = [
    f"{case}-{mode}" for case in collectives_worker.cases(0, 2) for mode in ("sync", "async")
]
OTHER = [
    *collectives_worker.special_cases(0, 2),
    "topology_aware_mesh",
    "staged_results_survive_buffer_reuse",
    "pending_work_under_defer_and_fuse",
    "coalesced",
    "subgroups",
    "objects",
    "cpu_tensors_on_the_same_group",
    "barrier_and_pending_work",
]


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "collectives_worker.py", timeout=300)


@pytest.mark.parametrize("case", SYNC_ASYNC + OTHER)
def test_collective_matches_gloo(case: str, results: list[dict[str, dict[str, Any]]]) -> None:
    assert_passed(results, case)
