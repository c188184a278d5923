"""Where the MLP training step's gap to jax.jit lies: in torch_tpu's HLO, or in the plugin.

The same step (bench/peers.py's MLP: 4 x Linear 512 with GELU, batch 128, MSE, SGD) four ways,
in interleaved rounds so that the machine's drift reaches every row alike:

- jax.jit on jaxlib's own CPU runtime;
- the same jax function through ``torch_tpu.kernels.jax_op`` on tpu: jax's HLO, compiled and
  run by torch_tpu's CPU plugin;
- torch_tpu DeferAndFuse, the device time of the step's one fused executable (the host has
  recorded the step before the clock starts);
- torch_tpu DeferAndFuse, the whole step (recording included).

Row 2 against row 1 is the plugin's share; row 3 against row 2 is our HLO's share.

    .venv/bin/python bench/same_hlo.py [--rounds 15 --per-round 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (its set-up: jax's own XLA flags, the shared workloads)

import torch_tpu  # noqa: E402
from torch_tpu import _C  # noqa: E402
from torch_tpu.kernels import jax_op  # noqa: E402


def jax_step_function() -> tuple[Callable[..., tuple[jax.Array, ...]], list[str]]:
    model, _, _ = peers.mlp_setup()
    names = sorted(peers.jax_params(model))

    def step(x: jax.Array, y: jax.Array, *flat: jax.Array) -> tuple[jax.Array, ...]:
        params = dict(zip(names, flat, strict=True))
        loss, grads = jax.value_and_grad(peers.jax_mlp_loss)(params, x, y)
        return (loss, *[params[n] - peers.SGD_LR * grads[n] for n in names])

    return step, names


def timed(run: Callable[[], float | None]) -> float:
    """Seconds of one call: `run`'s own measure where it returns one, else its wall time."""
    start = time.perf_counter()
    measured = run()
    return measured if measured is not None else time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--per-round", type=int, default=5)
    args = parser.parse_args()

    step, names = jax_step_function()
    model, x_cpu, y_cpu = peers.mlp_setup()
    params = peers.jax_params(model)

    jitted = jax.jit(step)
    x_jax, y_jax = jnp.asarray(x_cpu.numpy()), jnp.asarray(y_cpu.numpy())
    flat_jax = [params[n] for n in names]

    torch_tpu.set_eager_mode("strict")
    on_plugin = jax_op(step, name="bench::same_hlo_mlp_step")
    x_tpu, y_tpu = x_cpu.to("tpu"), y_cpu.to("tpu")
    flat_tpu = [torch.from_numpy(np.array(params[n])).to("tpu") for n in names]

    tpu_model = model.to("tpu")
    optimizer = torch.optim.SGD(tpu_model.parameters(), lr=peers.SGD_LR)
    torch_step = peers.torch_train_step(tpu_model, optimizer, F.mse_loss, x_tpu, y_tpu)

    def run_jax() -> None:
        jax.block_until_ready(jitted(x_jax, y_jax, *flat_jax))

    def run_on_plugin() -> None:
        on_plugin(x_tpu, y_tpu, *flat_tpu)
        torch.tpu.synchronize()

    def run_fused_device() -> float:
        with torch_tpu.eager_mode("defer_and_fuse"):
            torch_step()
            _C._materialize_pending()  # the step's one executable is enqueued
            start = time.perf_counter()
            torch.tpu.synchronize()
            return time.perf_counter() - start

    def run_fused_step() -> None:
        with torch_tpu.eager_mode("defer_and_fuse"):
            torch_step()
            torch.tpu.synchronize()

    rows = {
        "jax.jit (jaxlib)": run_jax,
        "jax's HLO on torch_tpu's plugin (jax_op)": run_on_plugin,
        "DeferAndFuse fused step, device time": run_fused_device,
        "DeferAndFuse step, whole": run_fused_step,
    }
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for run in rows.values():  # compiles, then warms
        for _ in range(3):
            run()
    for _ in range(args.rounds):
        for name, run in rows.items():
            samples[name].extend(timed(run) for _ in range(args.per_round))

    jax_median = statistics.median(samples["jax.jit (jaxlib)"])
    print(f"MLP train step 4x{peers.MLP_WIDTH}, b{peers.MLP_BATCH}, SGD; "
          f"{args.rounds} interleaved rounds of {args.per_round}")  # fmt: skip
    print("| way | median ms | min ms | median x jax.jit |")
    print("|---|---:|---:|---:|")
    for name, times in samples.items():
        median = statistics.median(times)
        print(
            f"| {name} | {median * 1e3:.2f} | {min(times) * 1e3:.2f} | {median / jax_median:.2f}x |"
        )


if __name__ == "__main__":
    main()
