"""FSDP2, DTensor, tensor parallelism and distributed checkpoints on tpu through tpu_dist
(torchrun, 2 ranks), each against the same computation in one process on the CPU: FSDP2
training (resharding after forward or not, bf16 parameters with fp32 reduction, gradient
clipping on DTensors, DeferAndFuse, a compiled loss) equals full-batch training; DTensor
redistributions and ops equal the full tensor's; Colwise/Rowwise, SequenceParallel,
loss_parallel and attention on head-sharded DTensors match CPU gradients; a checkpoint saved on
two ranks loads on one and back."""

from __future__ import annotations

from typing import Any

import pytest
from dist_workers.launch import assert_passed, run_worker

CASES = [
    "fsdp2-reshard",
    "fsdp2-no_reshard",
    "fsdp2-defer_and_fuse",
    "fsdp2-bf16_params_fp32_reduce",
    "fsdp2-clip_grad_norm",
    "fsdp2-compiled",
    "fsdp2-compiled_model",
    "dtensor-redistribution",
    "dtensor-ops",
    "tensor_parallel-colwise_rowwise",
    "tensor_parallel-sequence_and_loss_parallel",
    "tensor_parallel-attention",
    "checkpoint-save_2_load_1_and_back",
]


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "fsdp_worker.py", timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_matches_single_process(case: str, results: list[dict[str, dict[str, Any]]]) -> None:
    assert_passed(results, case)
