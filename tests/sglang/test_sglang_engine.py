"""SGLang's runtime (sglang.srt: scheduler, radix cache, token-to-KV pool) on tpu through
torch_tpu's platform plugin: greedy tokens equal transformers' on CPU, the radix cache serves a
shared prefix, and on the CPU plugin the KV pool's default is bounded (torch_tpu.kv_budget)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serving_helpers import PROMPTS, cpu_greedy

from torch_tpu import kv_budget
from torch_tpu.sglang.compat import kv_bytes_per_token

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> Iterator[Any]:
    import sglang

    with pytest.MonkeyPatch.context() as env:
        env.delenv(kv_budget.ENV, raising=False)
        # No KV-pool setting (max_total_tokens, mem_fraction_static): the platform's default.
        llm = sglang.Engine(
            model_path=str(tiny_llama),
            device="tpu",
            dtype="float32",
            context_length=256,
            random_seed=0,
            log_level="warning",
        )
        yield llm
        llm.shutdown()


def _generate(engine: Any, prompts: list[str]) -> list[dict[str, Any]]:
    return engine.generate(prompts, {"temperature": 0, "max_new_tokens": MAX_TOKENS})


def test_the_platform_is_torch_tpus(engine: Any) -> None:
    from sglang.srt.platforms import current_platform

    from torch_tpu.sglang.platform import TpuSRTPlatform

    assert isinstance(current_platform, TpuSRTPlatform)
    info = engine.get_server_info()
    assert info["device"] == "tpu"
    assert info["attention_backend"] == "torch_native"


def test_greedy_batch_of_different_lengths_matches_transformers_on_cpu(
    engine: Any, tiny_llama: Path
) -> None:
    outputs = _generate(engine, PROMPTS)
    assert [out["output_ids"] for out in outputs] == cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)


def test_the_radix_cache_serves_a_shared_prefix(engine: Any, tiny_llama: Path) -> None:
    base = " ".join(["tensor graph kernel token model cache batch request"] * 4)
    prompts = [base + " stream queue", base + " router load metric"]
    engine.flush_cache()
    first = _generate(engine, prompts[:1])
    second = _generate(engine, prompts[1:])
    expected = cpu_greedy(tiny_llama, prompts, MAX_TOKENS)
    assert [first[0]["output_ids"], second[0]["output_ids"]] == expected
    assert first[0]["meta_info"]["cached_tokens"] == 0
    # The second prompt's shared words (40 tokens or so) come from the radix cache.
    assert second[0]["meta_info"]["cached_tokens"] >= 32


def test_the_kv_pools_default_on_the_cpu_plugin_is_bounded(engine: Any, tiny_llama: Path) -> None:
    info = engine.get_server_info()
    per_token = kv_bytes_per_token(str(tiny_llama), torch.float32)
    # min(4 GiB, a quarter of the memory available at start) in tokens, not SGLang's
    # mem_fraction_static of all free RAM.
    cap = info["max_total_tokens"] * per_token
    assert 0 < cap <= min(4 * kv_budget.GiB, torch.tpu.mem_get_info(0)[1] // 4)
    assert 0 < info["max_total_num_tokens"] <= info["max_total_tokens"]
