"""vLLM with tensor parallel 2 on tpu: vLLM's multiprocess executor, one worker process and
device per rank, the attention heads, MLP and vocabulary split over both and joined by tpu_dist's
all-reduces and all-gathers; greedy tokens equal transformers' on CPU for prompts of different
lengths."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import PROMPTS, cpu_greedy

# Two engine or worker processes beside the test's: the full tier (scripts/test_serving.sh --full).
pytestmark = pytest.mark.full_suite

MAX_TOKENS = 8


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> Iterator[Any]:
    from vllm import LLM

    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the workers are processes anyway
    engine = LLM(
        model=str(tiny_llama),
        dtype="float32",
        max_model_len=256,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        seed=0,
        tensor_parallel_size=2,
    )
    yield engine
    del engine


def test_both_ranks_run_on_tpu_and_join_through_tpu_dist(llm: Any) -> None:
    from vllm.platforms import current_platform

    assert llm.llm_engine.vllm_config.parallel_config.tensor_parallel_size == 2
    assert current_platform.dist_backend == "tpu_dist"
    ranks = llm.collective_rpc("torch_tpu_metrics")
    assert len(ranks) == 2
    assert all(rank["executions"] > 0 for rank in ranks), ranks


def test_greedy_batch_of_different_lengths_matches_transformers_on_cpu(
    llm: Any, tiny_llama: Path
) -> None:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    got = [list(out.outputs[0].token_ids) for out in outputs]
    assert got == cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)
