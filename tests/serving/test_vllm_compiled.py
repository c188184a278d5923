"""vLLM's compiled decode step on tpu (TORCH_TPU_VLLM_COMPILE=1, torch_tpu/vllm/compiler.py):
vLLM's piecewise compilation with torch_tpu's compiler, attention an opaque op between the
pieces. Greedy tokens equal transformers' on CPU, the forward replays recorded graphs without
dispatching the model's ops, and new batch shapes compile nothing after the warm-up."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import PROMPTS, cpu_greedy, tiny_engine

import torch_tpu

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> Iterator[Any]:
    saved = os.environ.get("TORCH_TPU_VLLM_COMPILE")
    os.environ["TORCH_TPU_VLLM_COMPILE"] = "1"
    try:
        engine = tiny_engine(tiny_llama)
        yield engine
        del engine
    finally:
        if saved is None:
            os.environ.pop("TORCH_TPU_VLLM_COMPILE", None)
        else:
            os.environ["TORCH_TPU_VLLM_COMPILE"] = saved


def _runner(llm: Any) -> Any:
    return llm.llm_engine.model_executor.driver_worker.worker.model_runner


def _generate(llm: Any, prompts: list[str], **params: Any) -> list[list[int]]:
    from vllm import SamplingParams

    outputs = llm.generate(prompts, SamplingParams(**params), use_tqdm=False)
    return [list(out.outputs[0].token_ids) for out in outputs]


def test_the_engine_runs_vllms_piecewise_compilation_with_torch_tpus_compiler(llm: Any) -> None:
    from vllm.config import CompilationMode, CUDAGraphMode

    from torch_tpu.vllm.platform import COMPILER

    config = llm.llm_engine.vllm_config.compilation_config
    assert config.mode == CompilationMode.VLLM_COMPILE
    assert config.backend == COMPILER
    assert config.cudagraph_mode == CUDAGraphMode.NONE
    assert "vllm::unified_attention_with_output" in config.splitting_ops
    layers = list(config.static_forward_context.values())
    assert layers and all(not layer.use_direct_call for layer in layers)
    assert all(layer.impl.replayed for layer in layers)
    # Dynamo traced around the attention op by its fake implementation.
    from torch._library.simple_registry import singleton

    assert singleton.find("vllm::unified_attention_with_output").fake_impl.kernel is not None


def test_new_batch_shapes_after_the_warm_up_compile_nothing(
    llm: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The first requests the engine serves. The worker's warm-up ran every (token bucket,
    # page bucket) and (token bucket, request bucket) pair twice (the second run joins the
    # forward's replays into one graph); request counts, prompt lengths and context lengths
    # never met before run the recorded graphs at their buckets.
    monkeypatch.setenv("TORCH_TPU_LOG_COMPILES", "1")
    capfd.readouterr()
    before = torch_tpu.metrics()["compiles"]
    long_prompt = " ".join(["tensor graph kernel token model cache batch request"] * 12)
    for prompts, max_tokens in (
        (PROMPTS[1:], 5),
        ([long_prompt], 40),
        ([*PROMPTS, long_prompt, "queue"], 9),
    ):
        _generate(llm, prompts, temperature=0, max_tokens=max_tokens, ignore_eos=True)
    compiled = [
        line for line in capfd.readouterr().err.splitlines() if "torch_tpu: compiled" in line
    ]
    assert compiled == []
    assert torch_tpu.metrics()["compiles"] == before


def test_greedy_batch_of_different_lengths_matches_transformers_on_cpu(
    llm: Any, tiny_llama: Path
) -> None:
    expected = cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)
    assert _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS) == expected


class _ForwardCounts:
    """Counters over each model forward (between the runner's forward hooks) and each
    decode step (execute_model and sample_tokens of a step that schedules one token a
    request)."""

    def __init__(self, runner: Any) -> None:
        self.forwards: list[dict[str, int]] = []
        self.decode_executions: list[int] = []
        self._before: dict[str, int] = {}
        self._step_start: int | None = None
        self.handles = [
            runner.model.register_forward_pre_hook(self._pre),
            runner.model.register_forward_hook(self._post),
        ]
        self.runner = runner
        self.execute, self.sample = runner.execute_model, runner.sample_tokens
        runner.execute_model, runner.sample_tokens = self._execute, self._sample

    def _pre(self, *_: Any) -> None:
        self._before = torch_tpu.metrics()

    def _post(self, *_: Any) -> None:
        after = torch_tpu.metrics()
        self.forwards.append({k: after[k] - self._before[k] for k in after})

    def _execute(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        counts = scheduler_output.num_scheduled_tokens
        decode = not scheduler_output.scheduled_new_reqs and counts and set(counts.values()) == {1}
        self._step_start = torch_tpu.metrics()["executions"] if decode else None
        return self.execute(scheduler_output, *args, **kwargs)

    def _sample(self, *args: Any, **kwargs: Any) -> Any:
        out = self.sample(*args, **kwargs)
        if self._step_start is not None:
            self.decode_executions.append(torch_tpu.metrics()["executions"] - self._step_start)
            self._step_start = None
        return out

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.runner.execute_model, self.runner.sample_tokens = self.execute, self.sample


def test_the_forward_replays_graphs_and_a_decode_step_runs_three_executions(
    llm: Any, tiny_llama: Path
) -> None:
    runner = _runner(llm)
    layers = runner.model_config.hf_config.num_hidden_layers
    _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS)  # every bucket seen once
    counts = _ForwardCounts(runner)
    try:
        tokens = _generate(llm, PROMPTS, temperature=0, max_tokens=MAX_TOKENS)
    finally:
        counts.close()
    assert tokens == cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)
    assert counts.forwards
    for forward in counts.forwards:
        # The pieces between the attention ops (layers + 1) and each layer's attention replay
        # their recorded graphs into one pending graph, run as one execution: no op of the
        # model is dispatched, and the one executable lookup is the joined graph's (eagerly
        # in DeferAndFuse, each of the forward's ~130 ops is a lookup of its own).
        assert forward["joined_graphs"] == 2 * layers + 1, forward
        assert forward["cache_hits"] + forward["cache_misses"] == 1, forward
        assert forward["executions"] == 1, forward
        assert forward["compiles"] == 0, forward
        assert forward["host_syncs"] == 0 and forward["downloads"] == 0, forward
    # A decode step: the forward, the logits of the requests' last tokens, then sampling.
    assert counts.decode_executions and set(counts.decode_executions) == {3}
