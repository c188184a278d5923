"""Speculative decoding on tpu: n-gram (prompt lookup) and a draft model. Greedy tokens equal
transformers' greedy on CPU without speculation, and vLLM's spec-decode counters show drafts
accepted and rejected (the rejection sampler's and the drafter's kernels are torch_tpu's)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import PROMPTS, cpu_greedy, make_deeper_llama, tiny_engine

MAX_TOKENS = 32
# The tiny Llama's greedy continuation of this prompt repeats tokens (a run of one token
# eight times): prompt lookup has something to find in what was generated.
REPEATING = "compile compile latency model the kernel model prefill latency block block load"


def _engine(model: Path, speculative: dict[str, Any]) -> Any:
    return tiny_engine(
        model,
        speculative_config=speculative,
        disable_log_stats=False,  # get_metrics() reads the spec-decode counters
    )


def _greedy(llm: Any, prompts: list[str]) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    return [list(out.outputs[0].token_ids) for out in llm.generate(prompts, params, use_tqdm=False)]


def _counters(llm: Any) -> dict[str, float]:
    found = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode_num_"):
            found[metric.name.removeprefix("vllm:spec_decode_num_")] = getattr(metric, "value", 0)
    return found


@pytest.fixture(scope="module")
def draft_models(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("deeper")
    return {
        # Two more layers that add nothing: predicts exactly what its draft does.
        "agreeing": make_deeper_llama(tiny_llama, root, extra_layers=2, scale=0.0),
        # Two more layers that count: the draft is right some of the time.
        "departing": make_deeper_llama(tiny_llama, root, extra_layers=2, scale=0.3),
    }


@pytest.fixture
def release() -> Iterator[list[Any]]:
    engines: list[Any] = []
    yield engines
    engines.clear()
    gc.collect()


def test_ngram_greedy_equals_no_speculation_and_drafts_are_accepted(
    tiny_llama: Path, release: list[Any]
) -> None:
    prompts = [REPEATING, *PROMPTS]
    expected = cpu_greedy(tiny_llama, prompts, MAX_TOKENS)
    speculative = {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
    }
    llm = _engine(tiny_llama, speculative)
    release.append(llm)
    assert _greedy(llm, prompts) == expected
    counts = _counters(llm)
    assert counts["draft_tokens"] > counts["accepted_tokens"] > 0, counts


@pytest.mark.parametrize("target", ["agreeing", "departing"])
def test_draft_model_greedy_equals_no_speculation(
    tiny_llama: Path, draft_models: dict[str, Path], target: str, release: list[Any]
) -> None:
    model = draft_models[target]
    expected = cpu_greedy(model, PROMPTS, MAX_TOKENS)
    speculative = {"method": "draft_model", "model": str(tiny_llama), "num_speculative_tokens": 3}
    llm = _engine(model, speculative)
    release.append(llm)
    assert _greedy(llm, PROMPTS) == expected
    counts = _counters(llm)
    assert counts["draft_tokens"] > 0
    if target == "agreeing":
        # The drafter's inputs (positions, slots, the tokens it continues from) are right
        # only if every draft of a model identical to the target is accepted.
        assert counts["accepted_tokens"] == counts["draft_tokens"], counts
    else:
        assert counts["draft_tokens"] > counts["accepted_tokens"] > 0, counts
