"""Training under tpu_dist (torchrun, 2 ranks): DDP on tpu equals single-process training on
the full batch on the CPU, loss by loss and parameter by parameter, in Strict and
DeferAndFuse, with small buckets and static_graph, no_sync accumulation, the bf16 compression
hook, find_unused_parameters, and a torch.compile'd loss."""

from __future__ import annotations

from typing import Any

import pytest
from dist_workers.launch import assert_passed, run_worker

DDP_CASES = [
    "ddp-strict",
    "ddp-defer_and_fuse",
    "ddp-small_buckets_static_graph",
    "ddp-no_sync",
    "ddp-bf16_compress_hook",
    "ddp-find_unused_parameters",
    "ddp-compiled",
    "ddp-compiled_model",
]


@pytest.fixture(scope="session")
def ddp_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "ddp_worker.py", timeout=300)


@pytest.mark.parametrize("case", DDP_CASES)
def test_ddp_matches_single_process(
    case: str, ddp_results: list[dict[str, dict[str, Any]]]
) -> None:
    assert_passed(ddp_results, case)
