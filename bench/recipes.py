"""The training-framework recipes, timed: TorchTitan's Llama debug model on 2 processes (steps/s
on tpu in Strict and DeferAndFuse, with compiled blocks, and with torch_tpu's RMSNorm and
attention kernels swapped in by TorchTitan's override.imports, next to the same recipe on CPU
with Gloo; FSDP2 and tensor parallel), SimpleFSDP through TorchTitan's graph trainer (eager and
as a whole step compiled with its collectives, next to the same on CPU with Gloo), Diffusers'
DiT under FSDP2 (recipes/diffusion), and Ray Train's time to recover from a killed worker.

    .venv/bin/python bench/recipes.py [--steps 20] [--skip-titan] [--skip-ray] [--skip-dit]

Steps/s counts the steps after the third (compiles and warm-up excluded). Needs the titan and
ray extras (``bash scripts/setup.sh titan ray``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TITAN = ROOT / "recipes" / "titan" / "train.py"
RAY = ROOT / "recipes" / "ray" / "train.py"
DIT = ROOT / "recipes" / "diffusion" / "train_dit.py"
WARM_UP = 3
KERNELS = tuple(
    arg
    for name in ("jax_rms_norm", "pallas_attention")
    for arg in ("--override", f"torch_tpu.integrations.torchtitan.{name}")
)


def torchrun(
    nproc: int, *args: str, env: dict[str, str] | None = None, script: Path = TITAN
) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    subprocess.run(
        [*command, f"--nproc-per-node={nproc}", str(script), *args],
        check=True,
        capture_output=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


def titan_steps(
    out: Path, seed: Path, steps: int, *args: str, env: dict[str, str] | None = None
) -> tuple[float, str]:
    """Steps/s after the warm-up, and on tpu the executions and host syncs per step."""
    common = ("--out", str(out), "--steps", str(steps), "--seed-checkpoint", str(seed))
    torchrun(2, *common, *args, env=env)
    return step_rate(out)


def step_rate(out: Path) -> tuple[float, str]:
    """From a run's steps.json: steps/s after the warm-up, and on tpu the executions and host
    syncs per step."""
    per_step = json.loads((out / "steps.json").read_text())
    logged = per_step["logged_at"]
    measured = len(logged) - WARM_UP
    rate = measured / (logged[-1] - logged[WARM_UP - 1])
    counts = [
        (per_step[name][-1] - per_step[name][WARM_UP - 1]) / measured
        for name in ("executions", "host_syncs")
        if name in per_step
    ]
    return rate, " / ".join(f"{c:.0f}" for c in counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-dit", action="store_true")
    parser.add_argument("--skip-titan", action="store_true", help="skip the FSDP2 / TP table")
    args = parser.parse_args()
    defer = {"TPU_DEFER_AND_FUSE": "1"}
    columns = {
        "CPU + Gloo": (("--device", "cpu"), None),
        "tpu Strict": (("--device", "tpu"), None),
        "tpu DeferAndFuse": (("--device", "tpu"), defer),
        "tpu compiled": (("--device", "tpu", "--compile"), None),
        "tpu kernels": (("--device", "tpu", *KERNELS), None),
    }
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        torchrun(1, "--out", str(root / "seed"), "--device", "cpu", "--create-seed-checkpoint")
        seed = root / "seed" / "checkpoint" / "step-0"
        if not args.skip_titan:
            titan_table(root, seed, args.steps, columns)
        simple_fsdp(root, seed, args.steps)
        if not args.skip_dit:
            dit(root, args.steps)
        if args.skip_ray:
            return
        ray()


def titan_table(
    root: Path, seed: Path, steps: int, columns: dict[str, tuple[tuple[str, ...], Any]]
) -> None:
    print("TorchTitan Llama debug model (2 layers, seq 128, batch 4 per rank), 2 processes:")
    print("steps/s after the third step (tpu: and executions / host syncs per step)")
    print(f"| parallelism | {' | '.join(columns)} | best tpu / CPU |")
    print("| --- |" + " ---: |" * (len(columns) + 1))
    for parallel in ("fsdp", "tp"):
        results = [
            titan_steps(
                root / f"{parallel}-{i}",
                seed,
                steps,
                "--parallel",
                parallel,
                *extra,
                env=env,
            )
            for i, (extra, env) in enumerate(columns.values())
        ]
        cells = " | ".join(
            f"{rate:.2f} ({counts})" if counts else f"{rate:.2f}" for rate, counts in results
        )
        rates = [rate for rate, _ in results]
        print(f"| {parallel} | {cells} | {max(rates[1:]) / rates[0]:.2f}x |", flush=True)


def simple_fsdp(root: Path, seed: Path, steps: int, every: int = 4) -> None:
    """TorchTitan's graph trainer with SimpleFSDP, eager and as a whole step (forward, loss and
    backward traced with their FSDP collectives), on CPU with Gloo and on tpu; and the whole
    step on tpu logging every `every`-th step (a logged step adds the loss's all-reduces)."""
    print("\nSimpleFSDP (TorchTitan's graph trainer, same model, causal SDPA), 2 processes:")
    print("steps/s after the third step (tpu: and executions / host syncs per step)")
    print("| run | CPU + Gloo | tpu | tpu / CPU |")
    print("| --- | ---: | ---: | ---: |")
    for name, extra in (("eager", ()), ("whole step", ("--compile",))):
        results = [
            titan_steps(
                root / f"simple-{device}-{bool(extra)}",
                seed,
                steps,
                "--parallel",
                "simple_fsdp",
                "--device",
                device,
                *extra,
            )
            for device in ("cpu", "tpu")
        ]
        cells = " | ".join(f"{r:.2f} ({c})" if c else f"{r:.2f}" for r, c in results)
        print(f"| {name} | {cells} | {results[1][0] / results[0][0]:.2f}x |", flush=True)
    out = root / "simple-sparse"
    titan_steps(
        out, seed, steps, "--parallel", "simple_fsdp", "--device", "tpu", "--compile",
        "--log-freq", str(every),
    )  # fmt: skip
    per_step = json.loads((out / "steps.json").read_text())
    first = 2  # the second logged step (`every`): compiles are behind it
    measured = every * (len(per_step["logged_at"]) - 1 - first)
    rate = measured / (per_step["logged_at"][-1] - per_step["logged_at"][first])
    counts = " / ".join(
        f"{(per_step[k][-1] - per_step[k][first]) / measured:.2f}"
        for k in ("executions", "host_syncs")
    )
    print(f"| whole step, loss logged every {every}th step | | {rate:.2f} ({counts}) | |")


def ray() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        out = subprocess.run(
            [sys.executable, str(RAY), "tpu-ddp", "tpu-ddp-kill4", "--out", str(root / "ray")],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
        results = json.loads(out.stdout.strip().splitlines()[-1])
        del results["node_labels"]
        print("\nRay Train, 2 workers on a fake TPU host, DDP, 8 epochs")
        print("| run | seconds | recovery after the kill (s) |")
        print("| --- | ---: | ---: |")
        for name, result in results.items():
            recovery = result.get("recovery_s")
            recovered = "" if recovery is None else f"{recovery:.1f}"
            print(f"| {name} | {result['seconds']:.1f} | {recovered} |")


def dit(root: Path, steps: int) -> None:
    """Diffusers' DiT under FSDP2, 2 processes: CPU with Gloo and tpu Strict / DeferAndFuse."""
    columns = {
        "CPU + Gloo": ("cpu", None),
        "tpu Strict": ("tpu", None),
        "tpu DeferAndFuse": ("tpu", {"TPU_DEFER_AND_FUSE": "1"}),
    }
    results = []
    for i, (device, env) in enumerate(columns.values()):
        out = root / f"dit-{i}"
        args = ("--device", device, "--steps", str(steps), "--out", str(out))
        torchrun(2, *args, env=env, script=DIT)
        results.append(step_rate(out))
    print("\nDiffusers DiT (2 layers, 16x16x4 latents, batch 4 per rank), FSDP2, 2 processes:")
    print(f"| model | {' | '.join(columns)} | best tpu / CPU |")
    print("| --- |" + " ---: |" * (len(columns) + 1))
    cells = " | ".join(
        f"{rate:.2f} ({counts})" if counts else f"{rate:.2f}" for rate, counts in results
    )
    rates = [rate for rate, _ in results]
    print(f"| DiT | {cells} | {max(rates[1:]) / rates[0]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
