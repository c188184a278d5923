"""RL weight sync into a running vLLM engine on tpu (torch_tpu.vllm.weight_sync, recipes/rl):
pushed weights generate what transformers generates on CPU with the same weights, in both
transports; a push after the first compiles nothing; bad pushes fail by name; and GRPO's
reward improves over a few steps only when the weights are pushed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serving_helpers import PROMPTS, cpu_greedy

import torch_tpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes" / "rl"))
import grpo  # noqa: E402

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torch_tpu.testing.tiny_llama import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("rl"), initializer_range=grpo.INIT_RANGE)


@pytest.fixture(scope="module")
def llm(policy_dir: Path) -> Iterator[Any]:
    engine = grpo.make_engine(policy_dir)
    yield engine
    del engine


def _greedy(llm: Any, prompts: list[str]) -> list[list[int]]:
    from vllm import SamplingParams

    outputs = llm.generate(
        prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS), use_tqdm=False
    )
    return [list(out.outputs[0].token_ids) for out in outputs]


def _other_weights(policy_dir: Path, seed: int) -> torch.nn.Module:
    """The policy's architecture with other seeded weights, wide (std 0.5) so that greedy
    decoding does not hang on near-ties."""
    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(policy_dir)
    config.initializer_range = 0.5
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).float()


def _saved(model: torch.nn.Module, policy_dir: Path, path: Path) -> Path:
    """The model's weights (copied to CPU) with the policy's tokenizer, for cpu_greedy."""
    import shutil

    model.to("cpu").save_pretrained(path, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (policy_dir / name).exists():
            shutil.copy(policy_dir / name, path / name)
    return path


@pytest.mark.parametrize("host_bytes", [False, True], ids=["device_tensors", "host_bytes"])
def test_pushed_weights_generate_what_transformers_generates_on_cpu(
    llm: Any, policy_dir: Path, tmp_path: Path, host_bytes: bool
) -> None:
    seed = 11 if host_bytes else 7
    model = _other_weights(policy_dir, seed).to("tpu")
    sender = grpo.make_sender(llm, model, host_bytes=host_bytes)
    before = _greedy(llm, PROMPTS)
    metrics = torch_tpu.metrics()
    sender.send_weights()
    pushed = torch_tpu.metrics()
    after = _greedy(llm, PROMPTS)
    expected = cpu_greedy(_saved(model, policy_dir, tmp_path / "pushed"), PROMPTS, MAX_TOKENS)
    assert after == expected
    assert after != before
    uploads = pushed["uploads"] - metrics["uploads"]
    if host_bytes:
        assert uploads >= len(list(model.parameters()))  # every tensor crossed from the host
    else:
        assert uploads == 0  # device-to-device copies only


def test_a_second_push_compiles_nothing(llm: Any, policy_dir: Path) -> None:
    model = _other_weights(policy_dir, 3).to("tpu")
    sender = grpo.make_sender(llm, model)
    sender.send_weights()
    _greedy(llm, PROMPTS)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.9)
    torch.tpu.synchronize()  # the trainer's deferred update runs (and compiles) here
    compiles = torch_tpu.metrics()["compiles"]
    sender.send_weights()
    _greedy(llm, PROMPTS)
    assert torch_tpu.metrics()["compiles"] == compiles
    from torch_tpu.vllm.weight_sync import push_stats

    stats = push_stats(llm)
    assert stats.pushes >= 2 and stats.bytes > 0


def test_bad_pushes_fail_by_name(llm: Any) -> None:
    from torch_tpu.vllm.weight_sync import TpuWeightTransferUpdateInfo

    weight = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="2 dtype_names for 1 names"):
        TpuWeightTransferUpdateInfo(["a"], ["float32", "float32"], [[4, 4]], tensors=[weight])
    with pytest.raises(ValueError, match="declared float32 \\[2, 8\\]"):
        TpuWeightTransferUpdateInfo(["a"], ["float32"], [[2, 8]], tensors=[weight])
    with pytest.raises(ValueError, match="carries 3 bytes"):
        TpuWeightTransferUpdateInfo(["a"], ["float32"], [[4, 4]], data=[b"abc"])
    with pytest.raises(ValueError, match="exactly one"):
        TpuWeightTransferUpdateInfo(["a"], ["float32"], [[4, 4]])
    refused = {
        "model.nothing.weight": "no parameter for \\['model.nothing.weight'\\]",
        # A whole parameter and a shard of a fused one (q_proj into qkv_proj), both mis-shaped.
        "model.norm.weight": "refused model.norm.weight \\(float32 \\[4, 4\\]\\)",
        "model.layers.0.self_attn.q_proj.weight": "refused model.layers.0.self_attn.q_proj",
    }
    worker = llm.llm_engine.model_executor.driver_worker.worker
    for name, message in refused.items():
        llm.start_weight_update()
        try:
            info = TpuWeightTransferUpdateInfo([name], ["float32"], [[4, 4]], tensors=[weight])
            with pytest.raises(ValueError, match=message):
                llm.update_weights({"update_info": info.payload()})
        finally:
            # A failed update ends the worker's session; finish it only if it is still open.
            if worker._weight_update_active:
                llm.finish_weight_update()


def test_grpo_reward_improves_only_with_pushed_weights(
    llm: Any, policy_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    # The engine back on the policy's first weights (earlier tests pushed others).
    grpo.make_sender(llm, grpo.load_policy(policy_dir)).send_weights()
    config = grpo.GrpoConfig(steps=6)
    baseline = grpo.train(
        llm, grpo.load_policy(policy_dir), tokenizer, grpo.GrpoConfig(steps=6, push=False)
    )
    policy = grpo.load_policy(policy_dir)
    trained = grpo.train(llm, policy, tokenizer, config)
    # Step 0 samples the same first weights in both runs, with the same seed.
    assert trained["rewards"][0] == baseline["rewards"][0]
    assert trained["pushes"] == config.steps
    late = slice(config.steps // 2, None)
    gain = sum(trained["rewards"][late]) - sum(baseline["rewards"][late])
    assert gain / len(trained["rewards"][late]) > 0.1, (trained, baseline)
    # The engine serves the trainer's last weights.
    expected = cpu_greedy(_saved(policy, policy_dir, tmp_path / "trained"), PROMPTS, MAX_TOKENS)
    assert _greedy(llm, PROMPTS) == expected


@pytest.mark.full_suite  # ~45 s: scripts/test_serving.sh --full
def test_grpo_with_the_engine_core_in_its_own_process(tmp_path: Path) -> None:
    # vLLM's default layout: the engine core in a process of its own; the pushes go as host
    # bytes through vLLM's RPC.
    import json
    import subprocess

    saved = tmp_path / "trained"
    script = Path(grpo.__file__)
    command = [sys.executable, str(script), "--steps", "4", "--engine-process", "--save"]
    done = subprocess.run(
        [*command, str(saved)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert result["pushes"] == result["sent"]["pushes"] == 4
    weights = sum(p.stat().st_size for p in saved.glob("*.safetensors"))
    assert 4 * weights * 0.95 < result["sent"]["bytes"] <= 4 * weights
    assert result["rewards"][-1] > result["rewards"][0] + 0.1
    assert result["greedy"] == cpu_greedy(saved, grpo.PROMPTS, grpo.GREEDY_TOKENS)
