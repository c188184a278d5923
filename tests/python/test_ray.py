"""Ray Train on tpu (recipes/ray): a TorchTrainer with two workers on a local cluster that Ray
takes for a TPU host (use_tpu=True: TPU resources, the tpu_dist backend, torch_tpu's loader),
batches from Ray Data landing on tpu, checkpoints through ray.train.report. A worker killed
mid-run is replaced, the run resumes from its last checkpoint, and its losses are those of
single-process training (DDP) and of the same recipe on CPU with Gloo (DDP and FSDP2). Needs
the ray extra, which scripts/test.sh installs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_workers.launch import run_bounded

pytest.importorskip("ray.train")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "ray" / "train.py"
_spec = importlib.util.spec_from_file_location("ray_recipe", RECIPE)
assert _spec is not None and _spec.loader is not None
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)


def run_recipe(out: Path, *runs: str) -> dict[str, Any]:
    """The recipe's runs on one fresh cluster, in a process (and session) of their own."""
    command = [sys.executable, str(RECIPE), *runs, "--out", str(out)]
    stdout = run_bounded("recipes/ray/train.py", command, timeout=600)
    return json.loads(stdout.strip().splitlines()[-1])


def single_process_losses() -> list[float]:
    """The same training on one process, on the full batch: each epoch's DDP step averages the
    two workers' halves, which is the full batch's gradient."""
    x, y = (torch.from_numpy(a) for a in recipe.arrays())
    model = recipe.make_model("cpu")
    optimizer = recipe.make_optimizer(model)
    losses = []
    for _ in range(recipe.EPOCHS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_ddp_recovers_a_killed_worker_with_single_process_losses(tmp_path: Path) -> None:
    results = run_recipe(tmp_path, "tpu-ddp-kill4")
    # What Ray itself made of the fake host: the labels a v5e host in a 2x2 slice carries.
    labels = results["node_labels"]
    assert labels["ray.io/accelerator-type"] == "TPU-V5LITEPOD"
    assert labels["ray.io/tpu-topology"] == "2x2"
    result = results["tpu-ddp-kill4"]
    assert (result["backend"], result["batch_device"]) == ("tpu_dist", "tpu")
    assert result["recovery_s"] > 0  # a worker died, and the run went on
    torch.testing.assert_close(result["losses"], single_process_losses(), rtol=1e-5, atol=0)


@pytest.mark.full_suite
def test_ddp_and_fsdp_follow_gloo(tmp_path: Path) -> None:
    results = run_recipe(tmp_path, "cpu-ddp", "tpu-ddp", "cpu-fsdp", "tpu-fsdp-kill4")
    for strategy, tpu_run in (("ddp", "tpu-ddp"), ("fsdp", "tpu-fsdp-kill4")):
        reference, result = results[f"cpu-{strategy}"], results[tpu_run]
        assert (reference["backend"], reference["batch_device"]) == ("gloo", "cpu")
        assert (result["backend"], result["batch_device"]) == ("tpu_dist", "tpu")
        torch.testing.assert_close(result["losses"], reference["losses"], rtol=1e-5, atol=0)
    assert results["tpu-fsdp-kill4"]["recovery_s"] > 0
