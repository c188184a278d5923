"""Structured output through vLLM's default backend (xgrammar) on tpu: JSON-schema and choice
requests obey their grammars, their greedy tokens equal transformers on CPU masked by the same
grammar with xgrammar's CPU kernel, and free requests batched with them are untouched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serving_helpers import PROMPTS, cpu_greedy, tiny_engine

MAX_TOKENS = 64
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z ]{1,12}$"},
        "count": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["kv", "spec"]}, "maxItems": 3},
    },
    "required": ["name", "count"],
    "additionalProperties": False,
}
CHOICES = ["prefill", "decode", "sample"]


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> Iterator[Any]:
    engine = tiny_engine(
        tiny_llama,
        # xgrammar is what vLLM's "auto" picks for these requests; named, so that the JSON
        # can be compact (a random model otherwise pads it with whitespace to max_tokens).
        structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
    )
    yield engine
    del engine


def _params(**structured: Any) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    outputs = StructuredOutputsParams(**structured) if structured else None
    return SamplingParams(temperature=0, max_tokens=MAX_TOKENS, structured_outputs=outputs)


def _cpu_masked_greedy(model_dir: Path, prompt: str, grammar: Any) -> list[int]:
    """transformers' greedy decoding on CPU with xgrammar's mask (its CPU kernel) applied to
    each step's logits, until the grammar ends (EOS included) or MAX_TOKENS."""
    import xgrammar as xgr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    matcher = xgr.GrammarMatcher(grammar)
    bitmask = xgr.allocate_token_bitmask(1, model.config.vocab_size)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    out: list[int] = []
    with torch.no_grad():
        while len(out) < MAX_TOKENS and not matcher.is_terminated():
            logits = model(ids).logits[:, -1, :].clone()
            matcher.fill_next_token_bitmask(bitmask)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            token = int(logits.argmax(dim=-1))
            assert matcher.accept_token(token)
            out.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


def _compiler(model_dir: Path) -> Any:
    import xgrammar as xgr
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    return xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab))


def test_vllms_default_backend_is_xgrammar(llm: Any) -> None:
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    params = _params(json=SCHEMA)
    llm.generate(["the device"], params, use_tqdm=False)
    manager = llm.llm_engine.engine_core.engine_core.structured_output_manager
    assert isinstance(manager.backend, XgrammarBackend)


def test_json_schema_outputs_validate_and_equal_cpu_masked_greedy(
    llm: Any, tiny_llama: Path
) -> None:
    import jsonschema

    prompts = PROMPTS[:3]
    outputs = llm.generate(prompts, _params(json=SCHEMA), use_tqdm=False)
    grammar = _compiler(tiny_llama).compile_json_schema(
        json.dumps(SCHEMA), any_whitespace=False, separators=(",", ":")
    )
    for prompt, output in zip(prompts, outputs, strict=True):
        completion = output.outputs[0]
        assert completion.finish_reason == "stop", completion.text
        jsonschema.validate(json.loads(completion.text), SCHEMA)
        assert list(completion.token_ids) == _cpu_masked_greedy(tiny_llama, prompt, grammar)


def test_choice_requests_batched_with_free_ones_leave_the_free_ones_unmasked(
    llm: Any, tiny_llama: Path
) -> None:
    # Structured and free requests interleave in one batch: each mask row must land on its
    # own request's logits and the free rows must stay unmasked.
    prompts = PROMPTS * 2
    params = [_params(choice=CHOICES) if i % 2 else _params() for i in range(len(prompts))]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    grammar = _compiler(tiny_llama).compile_grammar(
        "root ::= " + " | ".join(json.dumps(choice) for choice in CHOICES)
    )
    free_expected = cpu_greedy(tiny_llama, prompts[0::2], MAX_TOKENS)
    for i, (prompt, output) in enumerate(zip(prompts, outputs, strict=True)):
        completion = output.outputs[0]
        if i % 2:
            assert completion.text in CHOICES
            assert list(completion.token_ids) == _cpu_masked_greedy(tiny_llama, prompt, grammar)
        else:
            assert list(completion.token_ids) == free_expected[i // 2]
