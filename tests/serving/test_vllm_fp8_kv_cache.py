"""An FP8 KV cache (kv_cache_dtype="fp8") on tpu: greedy tokens equal transformers on CPU with
keys and values rounded through float8; the same cache budget holds twice the tokens of a bf16
cache; and against the bf16-cache run the output passes vLLM's own fp8-KV check
(tests/models/quantization/test_fp8.py: check_logprobs_close over 4 greedy tokens with 8
logprobs: where the runs first differ, each run's token is among the other's top 8)."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from serving_helpers import PROMPTS

BUDGET = 32 << 20
# vLLM's test_fp8.py: 4 tokens ("due to low-precision numerical divergence"), 8 logprobs.
VLLM_MAX_TOKENS = 4
VLLM_NUM_LOGPROBS = 8
LONGER = 16
MORE_PROMPTS = [
    *PROMPTS,
    "tensor graph kernel",
    "the queue of the server stream",
    "a model",
    "decode the cache page",
]

Run = list[tuple[list[int], list[dict[int, float]]]]


def _run(model: Path, dtype: str, kv_cache_dtype: str, max_tokens: int) -> tuple[Run, dict]:
    """Greedy tokens with their top logprobs per prompt, and the cache's size report."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # These runs take a few steps each: compiling every step shape first would cost more.
    os.environ["TORCH_TPU_VLLM_WARM_UP"] = "0"
    from vllm import LLM, SamplingParams

    try:  # the in-process worker reads it while the engine starts
        llm = LLM(
            model=str(model),
            dtype=dtype,
            max_model_len=256,
            max_num_batched_tokens=256,
            max_num_seqs=8,
            kv_cache_memory_bytes=BUDGET,
            kv_cache_dtype=kv_cache_dtype,
            seed=0,
        )
    finally:
        del os.environ["TORCH_TPU_VLLM_WARM_UP"]
    params = SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=VLLM_NUM_LOGPROBS)
    run = []
    for out in llm.generate(MORE_PROMPTS, params, use_tqdm=False):
        completion = out.outputs[0]
        logprobs = [{t: lp.logprob for t, lp in step.items()} for step in completion.logprobs]
        run.append((list(completion.token_ids), logprobs))
    cache = llm.llm_engine.vllm_config.cache_config
    report = {
        **llm.collective_rpc("kv_cache_report")[0],
        "blocks": cache.num_gpu_blocks,
        "block_size": cache.block_size,
    }
    del llm
    gc.collect()
    return run, report


def _logprobs_close(reference: Run, tested: Run) -> list[int | None]:
    """vLLM's check_logprobs_close, asserted: per prompt, the first position where the tokens
    differ (None if none), where each run's token must be in the other's top logprobs."""
    first_differences = []
    for (ids_0, lps_0), (ids_1, lps_1) in zip(reference, tested, strict=True):
        first = None
        for position, (token_0, token_1) in enumerate(zip(ids_0, ids_1, strict=False)):
            if token_0 != token_1:
                assert token_0 in lps_1[position] and token_1 in lps_0[position], (ids_0, ids_1)
                first = position
                break
        first_differences.append(first)
    return first_differences


def _cpu_greedy_fp8_kv(model_dir: Path, prompts: list[str], max_tokens: int) -> list[list[int]]:
    """transformers' greedy on CPU, its attention reading keys and values rounded through
    float8_e4m3fn (what an fp8 cache with scale 1 stores)."""
    import transformers.models.llama.modeling_llama as llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    exact = llama.eager_attention_forward

    def through_fp8(module: Any, query: Any, key: Any, value: Any, *args: Any, **kw: Any) -> Any:
        def rounded(t: torch.Tensor) -> torch.Tensor:
            return t.to(torch.float8_e4m3fn).to(t.dtype)

        return exact(module, query, rounded(key), rounded(value), *args, **kw)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    )
    results = []
    llama.eager_attention_forward = through_fp8
    try:
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False)
            results.append(out[0, ids.shape[1] :].tolist())
    finally:
        llama.eager_attention_forward = exact
    return results


def test_fp8_cache_greedy_equals_cpu_attention_over_float8_rounded_keys_and_values(
    tiny_llama: Path,
) -> None:
    run, _ = _run(tiny_llama, "float32", "fp8", LONGER)
    expected = _cpu_greedy_fp8_kv(tiny_llama, MORE_PROMPTS, LONGER)
    assert [ids for ids, _ in run] == expected


@pytest.fixture(scope="module")
def bf16_runs(tiny_llama: Path) -> dict[str, tuple[Run, dict]]:
    return {kv: _run(tiny_llama, "bfloat16", kv, LONGER) for kv in ("auto", "fp8")}


def test_fp8_cache_holds_twice_the_tokens_in_the_same_bytes(
    bf16_runs: dict[str, tuple[Run, dict]],
) -> None:
    def bytes_per_token(report: dict) -> float:
        return report["allocated"] / (report["blocks"] * report["block_size"])

    bf16, fp8 = bf16_runs["auto"][1], bf16_runs["fp8"][1]
    assert bf16["allocated"] == fp8["allocated"] == BUDGET
    assert fp8["blocks"] == 2 * bf16["blocks"]
    assert bytes_per_token(fp8) * 2 == bytes_per_token(bf16)


def test_fp8_cache_output_within_vllms_fp8_tolerance_of_the_bf16_cache(
    bf16_runs: dict[str, tuple[Run, dict]],
) -> None:
    bf16, fp8 = bf16_runs["auto"][0], bf16_runs["fp8"][0]

    def first(run: Run, count: int) -> Run:
        return [(ids[:count], lps[:count]) for ids, lps in run]

    # vLLM's own measure, at its own length; then the same measure over 16 tokens.
    _logprobs_close(first(bf16, VLLM_MAX_TOKENS), first(fp8, VLLM_MAX_TOKENS))
    differences = _logprobs_close(bf16, fp8)
    gaps = [
        abs(lps_0[i][ids_0[i]] - lps_1[i][ids_0[i]])
        for (ids_0, lps_0), (ids_1, lps_1), diff in zip(bf16, fp8, differences, strict=True)
        for i in range(min(len(ids_0), len(ids_1)) if diff is None else diff)
    ]
    print(f"first differing token per prompt: {differences}; largest logprob gap before it: "
          f"{max(gaps):.3f} nats")  # fmt: skip
