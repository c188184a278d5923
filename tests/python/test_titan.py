"""TorchTitan's debug models (recipes/titan: Llama, and DeepSeek V3's mixture of experts) on tpu
under torchrun with 2 ranks: their losses follow the same recipe on CPU with Gloo, from the same
seed checkpoint, with FSDP2, tensor parallel, pipeline stages (1F1B, interleaved 1F1B; with FSDP2
inside each stage on 4 ranks), compiled blocks, and SimpleFSDP through TorchTitan's graph trainer
(eager, and as a whole step compiled with its collectives); a run resumed from its
torch.distributed.checkpoint continues with the same losses. Needs the titan extra, which
scripts/test.sh installs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from dist_workers.launch import run_script

pytest.importorskip("torchtitan")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "titan" / "train.py"


def train(out: Path, *args: str, nproc: int = 2) -> list[float]:
    run_script(RECIPE, ["--out", str(out), *args], nproc=nproc, timeout=600)
    return json.loads((out / "losses.json").read_text())


_seeds: dict[tuple[str, int], str] = {}


def seed_checkpoint(model: str, tmp_path_factory: pytest.TempPathFactory, layers: int = 2) -> str:
    """TorchTitan's step-0 checkpoint of `model` with `layers` layers, made once (on CPU, one
    process)."""
    if (model, layers) not in _seeds:
        out = tmp_path_factory.mktemp(f"titan_seed_{model}_{layers}")
        args = ["--model", model, "--device", "cpu", "--layers", str(layers)]
        args += ["--create-seed-checkpoint", "--out", str(out)]
        run_script(RECIPE, args, nproc=1, timeout=600)
        _seeds[model, layers] = str(out / "checkpoint" / "step-0")
    return _seeds[model, layers]


@pytest.mark.parametrize(
    "steps, checkpoint_at",
    [(6, 3), pytest.param(20, 10, marks=pytest.mark.full_suite)],
    ids=["6-steps", "20-steps"],
)
def test_fsdp_follows_gloo_and_resumes_from_its_checkpoint(
    steps: int, checkpoint_at: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seed = seed_checkpoint("llama3", tmp_path_factory)
    recipe = ["--parallel", "fsdp", "--steps", str(steps), "--seed-checkpoint", seed]
    reference = train(tmp_path / "cpu", "--device", "cpu", *recipe)
    run = tmp_path / "tpu"
    losses = train(run, "--device", "tpu", "--checkpoint-at", str(checkpoint_at), *recipe)
    assert len(losses) == steps and losses[-1] < losses[0]
    torch.testing.assert_close(losses, reference, rtol=1e-4, atol=0)

    # The run saved a checkpoint at `checkpoint_at` and at its end; without the last it resumes
    # from the first.
    shutil.rmtree(run / "checkpoint" / f"step-{steps}")
    resumed = train(run, "--device", "tpu", "--checkpoint-at", str(checkpoint_at), *recipe)
    torch.testing.assert_close(resumed, losses[checkpoint_at:], rtol=1e-5, atol=0)


@pytest.mark.full_suite
@pytest.mark.parametrize(
    "model, parallel, compile",
    [
        ("llama3", "tp", False),
        ("llama3", "fsdp", True),
        ("llama3", "tp", True),
        ("deepseek_v3", "fsdp", False),  # mixture of experts
    ],
    ids=["tp", "fsdp-compiled", "tp-compiled", "moe-fsdp"],
)
def test_20_steps_follow_gloo(
    model: str,
    parallel: str,
    compile: bool,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    seed = seed_checkpoint(model, tmp_path_factory)
    recipe = ["--model", model, "--parallel", parallel, "--steps", "20", "--seed-checkpoint", seed]
    reference = train(tmp_path / "cpu", "--device", "cpu", *recipe)
    losses = train(
        tmp_path / "tpu", "--device", "tpu", *recipe, *(["--compile"] if compile else [])
    )
    assert len(losses) == 20 and losses[-1] < losses[0]
    torch.testing.assert_close(losses, reference, rtol=1e-4, atol=0)


@pytest.mark.parametrize(
    "parallel, layers, ranks",
    [
        ("pp", 2, 2),
        pytest.param("pp_interleaved", 4, 2, marks=pytest.mark.full_suite),
        pytest.param("pp_fsdp", 2, 4, marks=pytest.mark.full_suite),
    ],
    ids=["1f1b", "interleaved_1f1b", "1f1b_x_fsdp_4_ranks"],
)
def test_pipeline_schedules_follow_gloo(
    parallel: str, layers: int, ranks: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # TorchTitan's own pipeline split (embeddings with the first stage, norm and head with the
    # last), one stage a rank (1F1B) or two (interleaved), activations and gradients sent by
    # tpu_dist's send/recv; the losses come from the last stage's rank. pp_fsdp: 2 stages, each
    # sharded by FSDP2 over 2 ranks (its all-gathers and reduce-scatters on tpu_dist too).
    seed = seed_checkpoint("llama3", tmp_path_factory, layers)
    recipe = ["--parallel", parallel, "--layers", str(layers), "--steps", "4"]
    recipe += ["--seed-checkpoint", seed]
    reference = train(tmp_path / "cpu", "--device", "cpu", *recipe, nproc=ranks)
    losses = train(tmp_path / "tpu", "--device", "tpu", *recipe, nproc=ranks)
    assert len(losses) == 4 and min(losses) > 0 and losses[-1] < losses[0]
    torch.testing.assert_close(losses, reference, rtol=1e-4, atol=0)


@pytest.mark.full_suite
@pytest.mark.parametrize("whole_step", [False, True], ids=["eager", "whole-step"])
def test_simple_fsdp_follows_gloo(
    whole_step: bool, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # TorchTitan's graph trainer with SimpleFSDP (parameters sharded as DTensors, gathered by
    # DTensor redistributes in the forward). Whole-step: forward, loss and backward traced into
    # one graph (aot_fx_trace) with one all-gather and one reduce-scatter bucket; on tpu the
    # stretches between them are compiled programs. The tpu run logs every 4th step, so that
    # its unlogged steps show what a step costs: the same recipe on CPU logs every step.
    steps, every = 12, 4
    seed = seed_checkpoint("llama3", tmp_path_factory)
    recipe = ["--parallel", "simple_fsdp", "--steps", str(steps), "--seed-checkpoint", seed]
    recipe += ["--compile"] if whole_step else []
    reference = train(tmp_path / "cpu", "--device", "cpu", *recipe)
    run = tmp_path / "tpu"
    losses = train(run, "--device", "tpu", *recipe, "--log-freq", str(every))
    logged = [1, *range(every, steps + 1, every)]  # TorchTitan logs the first step too
    assert len(reference) == steps and reference[-1] < reference[0]
    torch.testing.assert_close(losses, [reference[s - 1] for s in logged], rtol=1e-4, atol=0)
    if whole_step:
        # Per step: (the previous step's clipping and optimizer + this step's parameters copied
        # into the all-gather bucket), (forward and backward, up to the reduce-scatter), (the
        # gradients out of the bucket and their norms, up to the norm's all-reduce). A logged
        # step has one more: the loss's all-reduces need the optimizer's graph run first.
        executions = json.loads((run / "steps.json").read_text())["executions"]
        between_logs = [b - a for a, b in zip(executions[1:], executions[2:], strict=False)]
        assert between_logs == [3 * every + 1] * (len(logged) - 2), executions


KERNEL_OVERRIDES = [
    "--override",
    "torch_tpu.integrations.torchtitan.jax_rms_norm",
    "--override",
    "torch_tpu.integrations.torchtitan.pallas_attention",
]


@pytest.mark.full_suite
@pytest.mark.parametrize(
    "parallel, compile",
    [("fsdp", False), ("tp", False), ("fsdp", True)],
    ids=["fsdp", "tp", "fsdp-compiled"],
)
def test_kernels_swapped_in_by_configuration_keep_the_losses(
    parallel: str, compile: bool, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # TorchTitan's override.imports swaps every RMSNorm for torch_tpu's jax kernel and the flex
    # attention for its Pallas kernel (torch_tpu.integrations.torchtitan); under FSDP2, under
    # tensor (and sequence) parallel, where they run on each rank's shards, and in compiled
    # blocks, the losses stay those of the stock model on tpu and on CPU with Gloo.
    steps, layers = 4, 2
    seed = seed_checkpoint("llama3", tmp_path_factory, layers)
    recipe = ["--parallel", parallel, "--steps", str(steps), "--seed-checkpoint", seed]
    reference = train(tmp_path / "cpu", "--device", "cpu", *recipe)
    on_tpu = ["--device", "tpu", *recipe, *(["--compile"] if compile else [])]
    stock = train(tmp_path / "tpu", *on_tpu)
    run = tmp_path / "kernels"
    losses = train(run, *on_tpu, *KERNEL_OVERRIDES)
    assert len(losses) == steps and losses[-1] < losses[0]
    torch.testing.assert_close(losses, stock, rtol=1e-4, atol=0)
    torch.testing.assert_close(losses, reference, rtol=1e-4, atol=0)
    # The kernels ran in every layer of every step, forward and backward: each block's two
    # norms and attention, and the final norm. A compiled graph that replays runs its ops without
    # reaching their implementation, so compiled runs count at least one step's.
    runs = json.loads((run / "kernel_runs.json").read_text())
    counted = steps if not compile else 1
    norms, attentions = counted * (2 * layers + 1), counted * layers
    for name, least in (("rms_norm", norms), ("masked_attention", attentions)):
        got = runs[f"torch_tpu_layers::{name}"]
        if compile:
            assert min(got.values()) >= least, (name, got)
        else:
            assert got == {"forward": least, "backward": least}, name


def test_torch_tpu_kernels_are_refused_on_the_cpu_reference(tmp_path: Path) -> None:
    # The CPU reference runs without torch_tpu loaded: asking it for torch_tpu's kernels is an
    # error that says so, not a silent run without them.
    with pytest.raises(AssertionError, match="swap in with --device tpu"):
        train(tmp_path / "cpu", "--device", "cpu", "--steps", "1", *KERNEL_OVERRIDES, nproc=1)
