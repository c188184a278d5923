"""Pipeline parallelism over tpu_dist (torchrun, 2 ranks): torch.distributed.pipelining's 1F1B
and interleaved 1F1B schedules, the stages' activations and gradients sent rank to rank by
tpu_dist's send/recv, equal to single-process training of the whole model on the CPU (each
microbatch's loss, every parameter)."""

from __future__ import annotations

from typing import Any

import pytest
from dist_workers.launch import assert_passed, run_worker

CASES = ["1f1b-strict", "1f1b-defer_and_fuse", "interleaved_1f1b-strict"]


@pytest.fixture(scope="session")
def pipeline_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "pipeline_worker.py", timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_pipeline_schedule_matches_single_process(
    case: str, pipeline_results: list[dict[str, dict[str, Any]]]
) -> None:
    assert_passed(pipeline_results, case)
