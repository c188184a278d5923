"""The prefix cache's host-memory tier on tpu (`kv_offloading_size`, vLLM's native offloading):
a prefix evicted from the device's KV cache comes back from host memory instead of being
recomputed, and the tokens stay transformers' on CPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import cpu_greedy, tiny_engine

MAX_TOKENS = 8
BLOCK = 16
# 12 device blocks (8 KiB each for the tiny model): one long prompt's 4 blocks plus the
# fillers' are more than the device cache holds, so the prefix's blocks are evicted.
DEVICE_BLOCKS = 12
PREFIX = " ".join(["prefix block page decode"] * 12)
FILLERS = [" ".join([word] * 48) for word in ("queue", "router", "gauge", "latency")]


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> Iterator[Any]:
    engine = tiny_engine(
        tiny_llama,
        max_model_len=128,
        max_num_batched_tokens=128,
        block_size=BLOCK,
        kv_cache_memory_bytes=DEVICE_BLOCKS * 8192,
        enable_prefix_caching=True,
        kv_offloading_size=0.01,  # GiB of host memory: ~1,300 blocks
        disable_log_stats=False,  # get_metrics() reads the cache counters
    )
    yield engine
    del engine


def _counters(llm: Any) -> dict[str, float]:
    names = ("vllm:prefix_cache_hits", "vllm:external_prefix_cache_hits")
    found = dict.fromkeys(names, 0.0)
    for metric in llm.llm_engine.get_metrics():
        if metric.name in names:
            found[metric.name] += getattr(metric, "value", 0)
    found["vllm:kv_offload_store_bytes"] = sum(
        getattr(m, "value", 0)
        for m in llm.llm_engine.get_metrics()
        if m.name == "vllm:kv_offload_store_bytes"
    )
    return found


def _greedy(llm: Any, prompt: str) -> list[int]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
    return list(llm.generate([prompt], params, use_tqdm=False)[0].outputs[0].token_ids)


def test_the_engine_moves_blocks_with_torch_tpus_worker(llm: Any) -> None:
    from torch_tpu.vllm.kv_offload import SPEC_NAME

    config = llm.llm_engine.vllm_config.kv_transfer_config
    assert config.kv_connector == "OffloadingConnector"
    assert config.kv_connector_extra_config["spec_name"] == SPEC_NAME


def test_an_evicted_prefix_is_restored_from_host_memory(llm: Any, tiny_llama: Path) -> None:
    first = PREFIX + " one"
    assert _greedy(llm, first) == cpu_greedy(tiny_llama, [first], MAX_TOKENS)[0]
    stored = _counters(llm)
    assert stored["vllm:kv_offload_store_bytes"] > 0, "the prompt's blocks were not offloaded"

    for filler in FILLERS:  # the device cache holds 12 blocks: the prefix's are evicted
        _greedy(llm, filler)

    before = _counters(llm)
    again = PREFIX + " two"
    assert _greedy(llm, again) == cpu_greedy(tiny_llama, [again], MAX_TOKENS)[0]
    after = _counters(llm)
    device_hits = after["vllm:prefix_cache_hits"] - before["vllm:prefix_cache_hits"]
    host_hits = after["vllm:external_prefix_cache_hits"] - before["vllm:external_prefix_cache_hits"]
    prefix_blocks = len(PREFIX.split()) // BLOCK  # at least this many full blocks of tokens
    assert device_hits == 0, "the prefix was still in device memory: nothing was evicted"
    assert host_hits >= prefix_blocks * BLOCK, f"{host_hits} tokens came from host memory"
