"""GRPO under Ray (recipes/rl/grpo_ray.py): the vLLM engine and the trainer as Ray actors with
one tpu device each; the trainer's pushes reach the engine across processes (host bytes through
Ray), the engine then generates what transformers generates on CPU with the trainer's weights,
and the reward improves only with the pushes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from serving_helpers import cpu_greedy

pytest.importorskip("ray", reason="Ray in the serving environment: scripts/setup_serving.sh")

RL = Path(__file__).resolve().parents[2] / "recipes" / "rl"
sys.path.insert(0, str(RL))
import grpo  # noqa: E402
import grpo_ray  # noqa: E402

STEPS = 6


@pytest.mark.full_suite  # ~2 minutes: scripts/test_serving.sh --full
def test_grpo_with_engine_and_trainer_as_ray_actors(tmp_path: Path) -> None:
    saved = tmp_path / "trained"
    command = [sys.executable, str(RL / "grpo_ray.py"), "--steps", str(STEPS), "--baseline"]
    try:
        done = subprocess.run(
            [*command, "--save", str(saved)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"grpo_ray.py did not finish in 600 s: {str(error.stderr)[-3000:]}")
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    # One device each: two processes, each on its own tpu:0, Ray's chips 0 and 1.
    engine, trainer = result["engine"], result["trainer"]
    assert engine["pid"] != trainer["pid"]
    assert engine["device"] == trainer["device"] == "tpu:0"
    assert {engine["tpu_visible_chips"], trainer["tpu_visible_chips"]} == {"0", "1"}

    # Every step pushed the whole model, as bytes, across the two processes.
    assert result["pushes"] == STEPS
    assert result["sent"]["pushes"] == STEPS
    weights = sum(p.stat().st_size for p in saved.glob("*.safetensors"))
    assert STEPS * weights * 0.95 < result["sent"]["bytes"] <= STEPS * weights

    # Step 0 samples the first weights in both runs; later steps improve only with pushes.
    rewards, baseline = result["rewards"], result["baseline_rewards"]
    assert rewards[0] == baseline[0]
    late = slice(STEPS // 2, None)
    gain = (sum(rewards[late]) - sum(baseline[late])) / len(rewards[late])
    assert gain > 0.1, result

    # The engine serves the trainer's last weights.
    assert result["greedy"] == cpu_greedy(saved, grpo.PROMPTS, grpo_ray.GREEDY_TOKENS)
