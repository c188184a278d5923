"""GRPO on tpu: a tiny Llama policy trained with a group-relative policy-gradient loss, its
completions sampled by a running vLLM engine on tpu, its weights pushed to that engine after
every step through vLLM's weight-transfer API (torch_tpu.vllm.weight_sync, backend ``tpu``),
without a restart.

One process holds both: the engine (vLLM's ``LLM``, its engine core in this process) and the
trainer (the same model in transformers, on the same tpu device, AdamW). The machine it was
written on has 2 cores: an FSDP2 trainer on 2 ranks plus an engine process is 3 processes on
2 cores, and at this size the trainer has nothing to shard. Colocated, a push is one
device-to-device copy per parameter (nothing crosses the host).

The task (verifiable, no reward model): a completion earns the share of its tokens that are
one of the tiny tokenizer's whole task words (" tensor", " kernel", ...); a random policy
earns ~6%. Each step samples ``--group`` completions of ``--max-tokens`` tokens for each of
the prompts (temperature 1, a seed per step), normalises the rewards within each prompt's group
(the advantages), and takes ``--epochs`` AdamW steps on the clipped-ratio objective against
the sampling policy's log-probabilities (no KL term, no reference model).

    .venv-serving/bin/python recipes/rl/grpo.py --steps 8 [--no-push] [--engine-process]
        [--save DIR] [--out run.json]

prints one JSON line: the mean reward of each step's samples, the push count and seconds.
``--no-push`` trains the same way but leaves the engine on its first weights: the baseline.
``--engine-process`` runs vLLM's engine core in a process of its own (vLLM's default outside
this recipe): the pushes go as host bytes through vLLM's RPC. ``--save DIR`` writes the
trainer's last weights there and adds the engine's greedy tokens after each prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPTS = ["the device", "a kernel of the", "request with a queue", "greedy decode of"]
# The policy: a tiny Llama whose narrow weights (standard deviation 0.1) leave the next-token
# distribution broad enough for a group's samples to differ.
INIT_RANGE = 0.1


@dataclass
class GrpoConfig:
    steps: int = 8
    group: int = 8
    max_tokens: int = 8
    epochs: int = 2
    lr: float = 3e-2
    clip: float = 0.2
    temperature: float = 1.0
    seed: int = 0
    push: bool = True


def target_tokens(tokenizer: Any) -> list[int]:
    """The reward's tokens: each task word with its leading space, where it is one token."""
    from torch_tpu.testing.tiny_llama import _WORDS

    ids = [tokenizer.encode(" " + w, add_special_tokens=False) for w in _WORDS]
    return sorted({i[0] for i in ids if len(i) == 1})


def reward(completion: list[int], targets: set[int]) -> float:
    return sum(t in targets for t in completion) / len(completion)


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """[prompts, group] rewards to advantages: each group's rewards less their mean, over their
    standard deviation (a group whose samples all earned the same has no advantage)."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    return (rewards - mean) / (std + 1e-4)


# The engine's settings: float32 as the trainer, a group of every prompt in one batch, a small
# KV cache, vLLM's weight transfer with torch_tpu's backend.
ENGINE_SETTINGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 128,
    "max_num_batched_tokens": 256,
    "max_num_seqs": 32,
    "kv_cache_memory_bytes": 32 << 20,
    "seed": 0,
    "weight_transfer_config": {"backend": "tpu"},
}


def make_engine(model_dir: Path, **options: Any) -> Any:
    """The vLLM engine, its engine core in this process, with the tpu weight transfer."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    return LLM(model=str(model_dir), **{**ENGINE_SETTINGS, **options})


def make_sender(llm: Any, policy: torch.nn.Module, host_bytes: bool = False) -> Any:
    """vLLM's trainer-side weight transfer for the tpu backend, over this process's engine."""
    from vllm.distributed.weight_transfer.base import ModuleSource
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from torch_tpu.vllm.weight_sync import LLMWeightSyncClient, TpuTrainerInitInfo

    return WeightTransferTrainerFactory.trainer_init(
        TpuTrainerInitInfo(rank=0, host_bytes=host_bytes),
        client=LLMWeightSyncClient(llm),
        source=ModuleSource(policy),
    )


def sample(llm: Any, prompt_ids: list[list[int]], config: GrpoConfig, step: int) -> list[Any]:
    """``group`` completions of each prompt: [prompts][group] token lists."""
    from vllm import SamplingParams

    params = SamplingParams(
        n=config.group,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        ignore_eos=True,
        seed=config.seed * 1000 + step,
    )
    outputs = llm.generate(
        [{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False
    )
    return [[list(c.token_ids) for c in out.outputs] for out in outputs]


def sequences(
    prompt_ids: list[list[int]], completions: list[list[list[int]]], pad: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each prompt and one completion, right-padded to one length: tokens [B, L], the indices
    in the shifted logits [B, T] that predict each completion token, and those tokens [B, T]."""
    rows, positions, targets = [], [], []
    length = max(len(p) for p in prompt_ids) + len(completions[0][0])
    for ids, group in zip(prompt_ids, completions, strict=True):
        for completion in group:
            rows.append(ids + completion + [pad] * (length - len(ids) - len(completion)))
            positions.append(list(range(len(ids) - 1, len(ids) - 1 + len(completion))))
            targets.append(completion)
    as_tensor = lambda x: torch.tensor(x, device=device)  # noqa: E731
    return as_tensor(rows), as_tensor(positions), as_tensor(targets)


def token_logprobs(
    policy: torch.nn.Module, tokens: torch.Tensor, positions: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    logits = policy(input_ids=tokens).logits.float()
    picked = torch.gather(logits, 1, positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    return torch.log_softmax(picked, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def grpo_loss(
    logprobs: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, clip: float
) -> torch.Tensor:
    """The clipped surrogate, per token, averaged: every completion has the same length."""
    ratio = torch.exp(logprobs - old)
    advantage = advantages.unsqueeze(-1)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * advantage
    return -torch.minimum(unclipped, clipped).mean()


class Learner:
    """The trainer: the policy, AdamW, and one GRPO update per batch of scored completions."""

    def __init__(self, policy: torch.nn.Module, pad_id: int, config: GrpoConfig) -> None:
        self.policy = policy
        self.pad_id = pad_id
        self.config = config
        self.device = next(policy.parameters()).device.type
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)

    def update(
        self, prompt_ids: list[list[int]], completions: list[Any], rewards: list[list[float]]
    ) -> None:
        """``epochs`` optimizer steps on the clipped objective, the ratio taken against the
        policy's log-probabilities before the first (the policy that sampled them)."""
        advantages = group_advantages(torch.tensor(rewards)).flatten().to(self.device)
        tokens, positions, completion_ids = sequences(
            prompt_ids, completions, self.pad_id, self.device
        )
        with torch.no_grad():
            old = token_logprobs(self.policy, tokens, positions, completion_ids)
        for _ in range(self.config.epochs):
            logprobs = token_logprobs(self.policy, tokens, positions, completion_ids)
            loss = grpo_loss(logprobs, old, advantages, self.config.clip)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


def train(
    llm: Any, policy: torch.nn.Module, tokenizer: Any, config: GrpoConfig, sender: Any = None
) -> dict[str, Any]:
    """The loop: per step, sample, score, update, push (``config.push``). Returns the mean
    reward of each step's samples and the pushes' count and seconds."""
    targets = set(target_tokens(tokenizer))
    prompt_ids = [tokenizer.encode(p) for p in PROMPTS]
    learner = Learner(policy, tokenizer.eos_token_id, config)
    if config.push and sender is None:
        sender = make_sender(llm, policy)
    mean_rewards, push_seconds = [], []
    for step in range(config.steps):
        completions = sample(llm, prompt_ids, config, step)
        rewards = [[reward(c, targets) for c in group] for group in completions]
        mean_rewards.append(sum(map(sum, rewards)) / sum(map(len, rewards)))
        learner.update(prompt_ids, completions, rewards)
        if config.push:
            start = time.perf_counter()
            sender.send_weights(weight_version=str(step + 1))
            push_seconds.append(time.perf_counter() - start)
    return {"rewards": mean_rewards, "pushes": len(push_seconds), "push_seconds": push_seconds}


def load_policy(model_dir: Path, device: str = "tpu") -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)


GREEDY_TOKENS = 12


def greedy(llm: Any, prompt_ids: list[list[int]]) -> list[list[int]]:
    """The engine's greedy tokens (GREEDY_TOKENS of them) after each prompt."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=GREEDY_TOKENS)
    outputs = llm.generate(
        [{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False
    )
    return [list(out.outputs[0].token_ids) for out in outputs]


def save(policy: torch.nn.Module, model_dir: Path, path: Path) -> None:
    """The policy's weights, copied to the host, as a model folder with the tokenizer."""
    import shutil

    from transformers import AutoModelForCausalLM

    cpu = AutoModelForCausalLM.from_pretrained(model_dir)
    cpu.load_state_dict({k: v.cpu() for k, v in policy.state_dict().items()})
    cpu.save_pretrained(path, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, path / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=GrpoConfig.steps)
    parser.add_argument("--group", type=int, default=GrpoConfig.group)
    parser.add_argument("--max-tokens", type=int, default=GrpoConfig.max_tokens)
    parser.add_argument("--epochs", type=int, default=GrpoConfig.epochs)
    parser.add_argument("--lr", type=float, default=GrpoConfig.lr)
    parser.add_argument("--seed", type=int, default=GrpoConfig.seed)
    parser.add_argument("--no-push", action="store_true", help="the baseline: no weight push")
    parser.add_argument(
        "--engine-process",
        action="store_true",
        help="the engine core in a process of its own; pushes as host bytes over vLLM's RPC",
    )
    parser.add_argument(
        "--save", type=Path, help="write the trainer's last weights here; report greedy tokens"
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from torch_tpu.testing.tiny_llama import make_tiny_llama

    model_dir = make_tiny_llama(tempfile.mkdtemp(prefix="grpo_"), initializer_range=INIT_RANGE)
    if args.engine_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    llm = make_engine(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = GrpoConfig(
        steps=args.steps,
        group=args.group,
        max_tokens=args.max_tokens,
        epochs=args.epochs,
        lr=args.lr,
        seed=args.seed,
        push=not args.no_push,
    )
    policy = load_policy(model_dir)
    sender = make_sender(llm, policy, host_bytes=args.engine_process) if config.push else None
    result = train(llm, policy, tokenizer, config, sender)
    if args.save:
        save(policy, model_dir, args.save)
        result["greedy"] = greedy(llm, [tokenizer.encode(p) for p in PROMPTS])
        result["sent"] = vars(sender.sent) if sender is not None else None
    line = json.dumps(result)
    print(line)
    if args.out:
        args.out.write_text(line + "\n")


if __name__ == "__main__":
    main()
