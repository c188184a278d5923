"""vLLM's offline engine on tpu: greedy tokens equal transformers' on CPU, prefix caching, seeded
sampling, inputs prepared on the host equal to vLLM's own, and no compiles once a step's buckets
have run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serving_helpers import PROMPTS, cpu_greedy, tiny_engine

import torch_tpu

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> Iterator[Any]:
    engine = tiny_engine(
        tiny_llama,
        enable_prefix_caching=True,
        disable_log_stats=False,  # get_metrics() reads prefix-cache hits
    )
    yield engine
    del engine


def _generate(llm: Any, prompts: list[str], **params: Any) -> list[list[int]]:
    from vllm import SamplingParams

    outputs = llm.generate(prompts, SamplingParams(**params), use_tqdm=False)
    return [list(out.outputs[0].token_ids) for out in outputs]


def test_the_platform_is_torch_tpus_and_the_model_runs_on_tpu(llm: Any) -> None:
    from vllm.platforms import current_platform

    from torch_tpu.vllm.platform import TpuPlatform

    assert isinstance(current_platform, TpuPlatform)
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    weights = list(runner.get_model().parameters())
    assert weights and all(w.device.type == "tpu" for w in weights)
    assert torch_tpu.get_eager_mode() == "defer_and_fuse"


def test_greedy_batch_of_different_lengths_matches_transformers_on_cpu(
    llm: Any, tiny_llama: Path
) -> None:
    expected = cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)
    assert _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS) == expected


def test_prefix_cache_hits_give_the_same_tokens(llm: Any, tiny_llama: Path) -> None:
    # Prompts longer than a block (16 tokens) that share their first blocks: the second
    # request of each pair reads the shared prefix from the cache.
    base = " ".join(["tensor graph kernel token model cache batch request"] * 4)
    prompts = [base + " stream queue", base + " router load metric"]
    expected = cpu_greedy(tiny_llama, prompts, MAX_TOKENS)
    llm.reset_prefix_cache()
    first = _generate(llm, prompts[:1], temperature=0, max_tokens=MAX_TOKENS)
    stats_before = llm.llm_engine.get_metrics()
    second = _generate(llm, prompts, temperature=0, max_tokens=MAX_TOKENS)
    assert first == expected[:1]
    assert second == expected
    hits = _prefix_cache_hits(llm.llm_engine.get_metrics()) - _prefix_cache_hits(stats_before)
    assert hits >= 16, f"the shared prefix was not read from the cache ({hits} hit tokens)"


def _prefix_cache_hits(metrics: list[Any]) -> float:
    return sum(getattr(m, "value", 0) for m in metrics if m.name == "vllm:prefix_cache_hits")


def test_seeded_sampling_repeats_and_stays_in_the_top_k(llm: Any, tiny_llama: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    params = dict(temperature=1.0, top_p=0.9, top_k=5, seed=7, max_tokens=MAX_TOKENS)
    first = _generate(llm, PROMPTS, **params)
    again = _generate(llm, PROMPTS, **params)
    greedy = _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS)
    assert first == again
    assert first != greedy
    # top_k=5: each sampled token is among the 5 likeliest next tokens (CPU model) after the
    # prompt and the tokens sampled before it.
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    for prompt, sampled in zip(PROMPTS, first, strict=True):
        prompt_ids = tokenizer(prompt).input_ids
        with torch.no_grad():
            logits = model(torch.tensor([prompt_ids + sampled])).logits[0]
        top5 = logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(sampled)].topk(5).indices
        assert all(token in row.tolist() for token, row in zip(sampled, top5, strict=True))


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 0},
        # Unseeded random sampling: temperature, top-p and top-k tensors padded to the bucket.
        {"temperature": 0.8, "top_p": 0.9, "top_k": 20},
    ],
    ids=["greedy", "top_p_top_k"],
)
def test_other_request_counts_in_the_same_buckets_compile_nothing(
    llm: Any,
    sampling: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # A step's request and token counts change from step to step; its executables (input
    # preparation, the forward, logits and sampling) follow only their padded buckets. One and
    # then two requests fewer give every step other counts in the same buckets.
    params = {"max_tokens": MAX_TOKENS, "ignore_eos": True, **sampling}
    _generate(llm, PROMPTS, **params)
    monkeypatch.setenv("TORCH_TPU_LOG_COMPILES", "1")
    capfd.readouterr()
    before = torch_tpu.metrics()["compiles"]
    _generate(llm, PROMPTS[1:], **params)
    _generate(llm, PROMPTS[2:], **params)
    compiled = [
        line for line in capfd.readouterr().err.splitlines() if "torch_tpu: compiled" in line
    ]
    assert compiled == []
    assert torch_tpu.metrics()["compiles"] == before


def test_host_prepared_inputs_equal_vllms_device_preparation(
    llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each step runs vLLM's own input preparation (on the device) and then the runner's (on
    # the host); the buffers the forward reads must hold the same values.
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    runner_class = type(runner)
    compared: list[int] = []

    def snapshot(num_reqs: int, tokens: int) -> dict[str, torch.Tensor]:
        table = runner.input_batch.block_table[0]
        return {
            "input_ids": runner.input_ids.gpu[:tokens].cpu(),
            "positions": runner.positions[:tokens].cpu(),
            "query_start_loc": runner.query_start_loc.gpu[: num_reqs + 1].cpu(),
            "seq_lens": runner.seq_lens[:num_reqs].cpu(),
            "num_computed_tokens": runner.num_computed_tokens[:num_reqs].cpu(),
            "slot_mapping": table.slot_mapping.gpu[:tokens].cpu(),
            "block_table": table.block_table.gpu[:num_reqs].cpu(),
            "discard_request_mask": runner.discard_request_mask.gpu[:num_reqs].cpu(),
        }

    def both(self: Any, scheduler_output: Any, scheduled: Any) -> Any:
        num_reqs = self.input_batch.num_reqs
        tokens = scheduler_output.total_num_scheduled_tokens
        vllms_rows, *_ = GPUModelRunner._prepare_inputs(self, scheduler_output, scheduled)
        vllms = snapshot(num_reqs, tokens)
        result = original(self, scheduler_output, scheduled)
        ours = snapshot(num_reqs, tokens)
        for name, expected in vllms.items():
            torch.testing.assert_close(ours[name], expected, rtol=0, atol=0, msg=name)
        assert result[0][:num_reqs].cpu().tolist() == vllms_rows.cpu().tolist()
        assert len(result[0]) >= num_reqs
        compared.append(tokens)
        return result

    original = runner_class._prepare_inputs
    monkeypatch.setattr(runner_class, "_prepare_inputs", both)
    _generate(llm, PROMPTS, temperature=0, max_tokens=4, ignore_eos=True)
    # A prefill of every prompt together, then decode steps of one token per request.
    assert compared[0] > len(PROMPTS) and compared[-1] == len(PROMPTS)


def test_a_repeated_batch_compiles_nothing(llm: Any) -> None:
    _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS)
    before = torch_tpu.metrics()
    _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS)
    after = torch_tpu.metrics()
    assert after["compiles"] == before["compiles"]
    assert after["executions"] > before["executions"]
    torch.tpu.synchronize()
