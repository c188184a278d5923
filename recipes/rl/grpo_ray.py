"""GRPO under Ray: the vLLM engine and the trainer as two Ray actors, one tpu device each (a
placement group of two {CPU: 1, TPU: 1} bundles on ``fake_tpu_cluster()``'s v5e host, see
recipes/ray/train.py), the same loop as recipes/rl/grpo.py driven from here.

The engine actor is vLLM's own ``LLM`` (its engine core in the actor's process), the class vLLM's
RLHF examples make an actor of; the trainer actor pushes its weights to it through vLLM's
``RayVLLMWeightSyncClient`` and torch_tpu's ``tpu`` weight-transfer backend as host bytes,
carried by Ray from one process to the other. The driver only moves token ids and rewards.

    .venv-serving/bin/python recipes/rl/grpo_ray.py --steps 6 [--no-push] [--baseline]
        [--save DIR]

prints one JSON line: each step's mean reward, the pushes, where each actor ran (process,
device, the chip Ray gave it), and the engine's greedy tokens for grpo.PROMPTS after the last
push; ``--baseline`` first runs the loop without pushes (a trainer of its own, the same
engine) and adds its rewards; ``--save DIR`` writes the trainer's last weights there (a
Hugging Face model folder).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

RL = Path(__file__).resolve().parent
ROOT = RL.parents[1]
sys.path.insert(0, str(RL))
sys.path.insert(0, str(ROOT / "recipes" / "ray"))

import grpo  # noqa: E402

GREEDY_TOKENS = grpo.GREEDY_TOKENS


def placement(model: Any) -> dict[str, Any]:
    """Where this actor runs: its process, its weights' device, the chip Ray gave it."""
    import torch

    device = next(model.parameters()).device
    return {
        "pid": os.getpid(),
        "device": str(device),
        "tpu_visible_chips": os.environ.get("TPU_VISIBLE_CHIPS"),
        "eager_mode": __import__("torch_tpu").get_eager_mode(),
        "threads": torch.get_num_threads(),
    }


class Engine:
    """vLLM's ``LLM`` with the recipe's settings (made a subclass of it in ``actors()``):
    RayVLLMWeightSyncClient calls its RL methods; a finished push resets its prefix cache."""

    def __init__(self, model_dir: str) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        super().__init__(model=model_dir, **grpo.ENGINE_SETTINGS)  # type: ignore[misc]

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        super().finish_weight_update(weight_version)  # type: ignore[misc]
        self.reset_prefix_cache()  # type: ignore[attr-defined]

    def sample(self, prompt_ids: list[list[int]], config: dict[str, Any], step: int) -> Any:
        return grpo.sample(self, prompt_ids, grpo.GrpoConfig(**config), step)

    def greedy(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        return grpo.greedy(self, prompt_ids)

    def where(self) -> dict[str, Any]:
        runner = self.llm_engine.model_executor.driver_worker.worker.model_runner  # type: ignore[attr-defined]
        return placement(runner.get_model())


class Trainer:
    """The policy on this actor's tpu device, its GRPO learner, and vLLM's trainer-side weight
    transfer to the engine actor (host bytes: the engine is another process)."""

    def __init__(self, model_dir: str, config: dict[str, Any], engine: Any) -> None:
        from transformers import AutoTokenizer
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.clients import RayVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from torch_tpu.vllm.weight_sync import TpuTrainerInitInfo

        self.model_dir = model_dir
        self.policy = grpo.load_policy(Path(model_dir))
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.learner = grpo.Learner(self.policy, tokenizer.eos_token_id, grpo.GrpoConfig(**config))
        self.sender = WeightTransferTrainerFactory.trainer_init(
            TpuTrainerInitInfo(rank=0, host_bytes=True),
            client=RayVLLMWeightSyncClient(engine),
            source=ModuleSource(self.policy),
        )

    def update(self, prompt_ids: Any, completions: Any, rewards: Any) -> None:
        self.learner.update(prompt_ids, completions, rewards)

    def push(self, version: str) -> float:
        start = time.perf_counter()
        self.sender.send_weights(weight_version=version)
        return time.perf_counter() - start

    def pushed(self) -> dict[str, Any]:
        return asdict(self.sender.sent)

    def save(self, path: str) -> None:
        grpo.save(self.policy, Path(self.model_dir), Path(path))

    def where(self) -> dict[str, Any]:
        return placement(self.policy)


def placed(model_dir: Path) -> tuple[Any, Any]:
    """The engine actor on the first bundle of a two-bundle placement group, and a factory of
    trainer actors on the second."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from vllm import LLM

    group = placement_group([{"CPU": 1, "TPU": 1}] * 2, strategy="PACK")
    ray.get(group.ready(), timeout=120)

    def on(bundle: int) -> dict[str, Any]:
        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)
        return {"num_cpus": 1, "resources": {"TPU": 1}, "scheduling_strategy": strategy}

    engine_class = ray.remote(type("EngineActor", (Engine, LLM), {"__repr__": _engine_repr}))
    engine = engine_class.options(**on(0)).remote(str(model_dir))
    trainer_class = ray.remote(Trainer).options(**on(1))
    return engine, lambda config: trainer_class.remote(str(model_dir), asdict(config), engine)


def _engine_repr(self: Any) -> str:
    return "Engine"


def loop(
    engine: Any, trainer: Any, tokenizer: Any, config: grpo.GrpoConfig
) -> tuple[list[float], list[float]]:
    """grpo.train's loop with the engine and trainer as actors: (mean rewards, push seconds)."""
    import ray

    targets = set(grpo.target_tokens(tokenizer))
    prompt_ids = [tokenizer.encode(p) for p in grpo.PROMPTS]
    rewards, push_seconds = [], []
    for step in range(config.steps):
        completions = ray.get(engine.sample.remote(prompt_ids, asdict(config), step), timeout=600)
        scored = [[grpo.reward(c, targets) for c in group] for group in completions]
        rewards.append(sum(map(sum, scored)) / sum(map(len, scored)))
        ray.get(trainer.update.remote(prompt_ids, completions, scored), timeout=600)
        if config.push:
            push_seconds.append(ray.get(trainer.push.remote(str(step + 1)), timeout=600))
    return rewards, push_seconds


def run(config: grpo.GrpoConfig, save: Path | None, baseline: bool) -> dict[str, Any]:
    """The loop under Ray; with ``baseline``, first the same loop without pushes (its own
    trainer, the same engine, still on its first weights)."""
    import ray
    from train import fake_tpu_cluster
    from transformers import AutoTokenizer

    from torch_tpu.testing.tiny_llama import make_tiny_llama

    model_dir = make_tiny_llama(
        tempfile.mkdtemp(prefix="grpo_ray_"), initializer_range=grpo.INIT_RANGE
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = [tokenizer.encode(p) for p in grpo.PROMPTS]
    path = os.pathsep.join([str(RL), str(ROOT), os.environ.get("PYTHONPATH", "")])
    cluster = fake_tpu_cluster(runtime_env={"env_vars": {"PYTHONPATH": path}})
    result: dict[str, Any] = {}
    try:
        engine, new_trainer = placed(model_dir)
        if baseline:
            trainer = new_trainer(replace(config, push=False))
            result["baseline_rewards"], _ = loop(
                engine, trainer, tokenizer, replace(config, push=False)
            )
            ray.kill(trainer)  # its bundle goes to the next trainer
        trainer = new_trainer(config)
        rewards, push_seconds = loop(engine, trainer, tokenizer, config)
        if save is not None:
            ray.get(trainer.save.remote(str(save)), timeout=120)
        return result | {
            "rewards": rewards,
            "pushes": len(push_seconds),
            "push_seconds": push_seconds,
            "sent": ray.get(trainer.pushed.remote()),
            "engine": ray.get(engine.where.remote()),
            "trainer": ray.get(trainer.where.remote()),
            "greedy": ray.get(engine.greedy.remote(prompt_ids)),
            "model_dir": str(model_dir),
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=grpo.GrpoConfig.steps)
    parser.add_argument("--no-push", action="store_true", help="the baseline: no weight push")
    parser.add_argument("--save", type=Path, help="write the trainer's last weights here")
    parser.add_argument(
        "--baseline", action="store_true", help="first the same loop without pushes"
    )
    args = parser.parse_args()
    config = grpo.GrpoConfig(steps=args.steps, push=not args.no_push)
    print(json.dumps(run(config, args.save, args.baseline)))


if __name__ == "__main__":
    main()
