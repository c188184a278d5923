"""Diffusers' diffusion transformer (recipes/diffusion/train_dit.py: a tiny, randomly
initialized DiTTransformer2DModel) trained for 10 steps under FSDP2 on 2 ranks with tpu_dist:
its losses follow the same recipe on CPU with Gloo, loss by loss. Needs the hf extra
(diffusers); each run takes a minute or more on two cores, so the test runs in the full
suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from dist_workers.launch import run_script

pytest.importorskip("diffusers")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "diffusion" / "train_dit.py"


def train(out: Path, *args: str) -> tuple[list[float], dict[str, list[float]]]:
    run_script(RECIPE, ["--out", str(out), *args], nproc=2, timeout=600)
    return (
        json.loads((out / "losses.json").read_text()),
        json.loads((out / "steps.json").read_text()),
    )


@pytest.mark.full_suite
def test_dit_under_fsdp2_follows_gloo(tmp_path: Path) -> None:
    reference, _ = train(tmp_path / "cpu", "--device", "cpu", "--steps", "10")
    losses, per_step = train(tmp_path / "tpu", "--device", "tpu", "--steps", "10")
    assert len(losses) == 10 and losses[-1] < losses[0]
    torch.testing.assert_close(losses, reference, rtol=1e-4, atol=0)
    # Every step ran on the device: its executions grew each step.
    executions = per_step["executions"]
    assert all(b > a for a, b in zip(executions, executions[1:], strict=False))
