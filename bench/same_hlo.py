"""Where a workload's gap to jax.jit lies: in torch_tpu's HLO, in the plugin, or on the host.

Four workloads of bench/peers.py (the MLP step: 4 x Linear 512 with GELU, batch 128, MSE, SGD;
the TinyGPT step: dim 64, 2 layers, 8x32 tokens, cross entropy, AdamW; TinyGPT's forward in eval
under no_grad on 1x32 and 32x32 tokens), each run these ways, in interleaved rounds so that
the machine's drift reaches every row alike:

- jax.jit on jaxlib's own CPU runtime;
- jax.jit on torch_tpu's CPU plugin, registered as a jax platform: the same program under the
  same host code (jax's dispatch through the PJRT C API), so its gap to the row above is the
  plugin's runtime alone (jaxlib 0.10.2's XLA against the plugin's 0.11.2 build);
- the same jax function through ``torch_tpu.kernels.jax_op`` on tpu: jax's HLO, compiled and
  run by torch_tpu's CPU plugin;
- torch_tpu DeferAndFuse, the device time of the step's one fused executable (the host has
  recorded the step before the clock starts);
- torch_tpu DeferAndFuse, the whole step (recording included);
- torch.compile(backend="tpu"), the whole step; and its host time alone (the clock stops when
  the step's calls return, before the wait for the device).

Row 2 against row 1 is the plugin's runtime; row 3 against row 2 is what torch_tpu's path adds
to the same program (jax_op's dispatch); row 4 against row 3 is our HLO's share; rows 5 to 7
against row 4 are what the host adds (recording the ops; Dynamo, AOTAutograd and the replays of
the step's graphs).

    .venv/bin/python bench/same_hlo.py [--rounds 15 --per-round 5] [--steps mlp,gpt,fwd1,fwd32]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable, Sequence
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
from torch_tpu.testing.tiny_gpt import TinyGPT, training_step  # noqa: E402

Run = Callable[[], float | None]


def _register_plugin_with_jax() -> str | None:
    """Registers torch_tpu's plugin as a jax platform before jax starts its backends; returns
    the platform's name, or None where the plugin is not the CPU one (jax brings its own GPU
    plugin)."""
    path = torch_tpu.plugin_path()
    if "cpu" not in Path(path).name:
        return None
    from jax._src import xla_bridge

    xla_bridge.register_plugin("torch_tpu_plugin", library_path=path)
    return "torch_tpu_plugin"


PLUGIN_PLATFORM = _register_plugin_with_jax()


def jax_rows(
    jitted: Callable[..., object],
    jax_args: Sequence[object],
    on_plugin: Callable[..., object],
    tpu_args: Sequence[torch.Tensor],
) -> dict[str, Run]:
    """The jax rows of a workload (see the module docstring): `jitted(*jax_args)` on jaxlib and
    on torch_tpu's plugin, and `on_plugin` (its jax_op) on tpu tensors."""

    def run_jax() -> None:
        jax.block_until_ready(jitted(*jax_args))

    def run_jax_op() -> None:
        on_plugin(*tpu_args)
        torch.tpu.synchronize()

    rows: dict[str, Run] = {"jax.jit (jaxlib)": run_jax}
    if PLUGIN_PLATFORM is not None:
        placed = jax.device_put(tuple(jax_args), jax.devices(PLUGIN_PLATFORM)[0])

        def run_jax_on_the_plugin() -> None:
            jax.block_until_ready(jitted(*placed))

        rows["jax.jit on torch_tpu's plugin (jax's runtime)"] = run_jax_on_the_plugin
    rows["jax's HLO on torch_tpu's plugin (jax_op)"] = run_jax_op
    return rows


def timed(run: Run) -> float:
    """Seconds of one call: `run`'s own measure where it returns one, else its wall time."""
    start = time.perf_counter()
    measured = run()
    return measured if measured is not None else time.perf_counter() - start


def tpu_rows(make_step: Callable[[], Callable[[], torch.Tensor]]) -> dict[str, Run]:
    """The torch_tpu rows of a torch step; `make_step` gives a step function with its own
    parameters and optimizer on tpu. The compiled rows get their own: an optimizer's state
    made by an eager step would keep its step counts on the CPU (see _dynamo_backend.py)."""
    step = make_step()
    compiled = torch.compile(make_step(), backend="tpu")

    # The step's result is held until after the wait: a result nobody holds is dead code that
    # DeferAndFuse never computes.
    def fused_device() -> float:
        with torch_tpu.eager_mode("defer_and_fuse"):
            result = step()
            _C._materialize_pending()  # the step's one executable is enqueued
            start = time.perf_counter()
            torch.tpu.synchronize()
            del result
            return time.perf_counter() - start

    def fused_step() -> None:
        with torch_tpu.eager_mode("defer_and_fuse"):
            result = step()
            torch.tpu.synchronize()
            del result

    def compiled_step() -> None:
        compiled()
        torch.tpu.synchronize()

    def compiled_host() -> float:
        start = time.perf_counter()
        compiled()
        seconds = time.perf_counter() - start
        torch.tpu.synchronize()
        return seconds

    return {
        "DeferAndFuse fused step, device time": fused_device,
        "DeferAndFuse step, whole": fused_step,
        "compiled step, whole": compiled_step,
        "compiled step, host time": compiled_host,
    }


def mlp_rows() -> dict[str, Run]:
    model, x_cpu, y_cpu = peers.mlp_setup()
    params = peers.jax_params(model)
    names = sorted(params)

    def jax_step(x: jax.Array, y: jax.Array, *flat: jax.Array) -> tuple[jax.Array, ...]:
        p = dict(zip(names, flat, strict=True))
        loss, grads = jax.value_and_grad(peers.jax_mlp_loss)(p, x, y)
        return (loss, *[p[n] - peers.SGD_LR * grads[n] for n in names])

    jitted = jax.jit(jax_step)
    x_jax, y_jax = jnp.asarray(x_cpu.numpy()), jnp.asarray(y_cpu.numpy())
    flat_jax = [params[n] for n in names]

    torch_tpu.set_eager_mode("strict")
    on_plugin = jax_op(jax_step, name="bench::same_hlo_mlp_step")
    x_tpu, y_tpu = x_cpu.to("tpu"), y_cpu.to("tpu")
    flat_tpu = [torch.from_numpy(np.array(params[n])).to("tpu") for n in names]

    def make_step() -> Callable[[], torch.Tensor]:
        tpu_model = copy.deepcopy(model).to("tpu")
        optimizer = torch.optim.SGD(tpu_model.parameters(), lr=peers.SGD_LR)
        return peers.torch_train_step(tpu_model, optimizer, F.mse_loss, x_tpu, y_tpu)

    return {
        **jax_rows(jitted, [x_jax, y_jax, *flat_jax], on_plugin, [x_tpu, y_tpu, *flat_tpu]),
        **tpu_rows(make_step),
    }


def gpt_rows() -> dict[str, Run]:
    model, data = peers.gpt_setup()
    params = peers.jax_params(model)
    names = sorted(params)
    count = len(names)

    def jax_step(
        inputs: jax.Array, targets: jax.Array, step_count: jax.Array, *flat: jax.Array
    ) -> tuple[jax.Array, ...]:
        """peers.jax_adamw_step on flat arguments (parameters, first and second moments)."""
        state = tuple(
            dict(zip(names, flat[i * count : (i + 1) * count], strict=True)) for i in range(3)
        )
        (p, m, v, new_count), loss = peers.jax_adamw_step((*state, step_count), inputs, targets)
        return (loss, new_count, *[tree[n] for tree in (p, m, v) for n in names])

    jitted = jax.jit(jax_step)
    inputs_jax, targets_jax = jnp.asarray(data[:, :-1].numpy()), jnp.asarray(data[:, 1:].numpy())
    flat_jax = [params[n] for n in names] + [jnp.zeros_like(params[n]) for n in names] * 2
    count_jax = jnp.zeros((), jnp.float32)

    torch_tpu.set_eager_mode("strict")
    on_plugin = jax_op(jax_step, name="bench::same_hlo_gpt_step")
    inputs_tpu, targets_tpu = data[:, :-1].to("tpu"), data[:, 1:].to("tpu")
    flat_tpu = [torch.from_numpy(np.array(a)).to("tpu") for a in flat_jax]
    count_tpu = torch.zeros((), device="tpu")

    def make_step() -> Callable[[], torch.Tensor]:
        tpu_model = TinyGPT(dim=peers.GPT_DIM, layers=peers.GPT_LAYERS, max_len=peers.GPT_LEN)
        tpu_model.load_state_dict(model.state_dict())
        tpu_model = tpu_model.to("tpu")
        optimizer = torch.optim.AdamW(tpu_model.parameters(), lr=peers.ADAMW_LR)
        return training_step(tpu_model, optimizer, inputs_tpu, targets_tpu)

    return {
        **jax_rows(
            jitted,
            [inputs_jax, targets_jax, count_jax, *flat_jax],
            on_plugin,
            [inputs_tpu, targets_tpu, count_tpu, *flat_tpu],
        ),
        **tpu_rows(make_step),
    }


def gpt_forward_rows(batch: int) -> Callable[[], dict[str, Run]]:
    """TinyGPT's forward in eval under no_grad (bench/peers.py's gpt_fwd rows)."""

    def rows() -> dict[str, Run]:
        model, _ = peers.gpt_setup()
        model.eval()
        params = peers.jax_params(model)
        names = sorted(params)
        tokens_cpu = torch.randint(0, peers.GPT_VOCAB, (batch, peers.GPT_LEN))

        def jax_forward(tokens: jax.Array, *flat: jax.Array) -> jax.Array:
            return peers.jax_gpt_forward(dict(zip(names, flat, strict=True)), tokens)

        jitted = jax.jit(jax_forward)
        tokens_jax = jnp.asarray(tokens_cpu.numpy())
        flat_jax = [params[n] for n in names]
        torch_tpu.set_eager_mode("strict")
        on_plugin = jax_op(jax_forward, name=f"bench::same_hlo_gpt_forward_{batch}")
        tokens_tpu = tokens_cpu.to("tpu")
        flat_tpu = [torch.from_numpy(np.array(a)).to("tpu") for a in flat_jax]

        def make_step() -> Callable[[], torch.Tensor]:
            tpu_model = TinyGPT(dim=peers.GPT_DIM, layers=peers.GPT_LAYERS, max_len=peers.GPT_LEN)
            tpu_model.load_state_dict(model.state_dict())
            tpu_model = tpu_model.eval().to("tpu")

            def forward() -> torch.Tensor:
                with torch.no_grad():
                    return tpu_model(tokens_tpu)

            return forward

        return {
            **jax_rows(jitted, [tokens_jax, *flat_jax], on_plugin, [tokens_tpu, *flat_tpu]),
            **tpu_rows(make_step),
        }

    return rows


STEPS: dict[str, tuple[str, Callable[[], dict[str, Run]]]] = {
    "mlp": (f"MLP train step 4x{peers.MLP_WIDTH}, b{peers.MLP_BATCH}, SGD", mlp_rows),
    "gpt": ("TinyGPT train step 8x32, AdamW", gpt_rows),
    "fwd1": ("TinyGPT forward 1x32, no grad", gpt_forward_rows(1)),
    "fwd32": ("TinyGPT forward 32x32, no grad", gpt_forward_rows(32)),
}


def table(title: str, rows: dict[str, Run], rounds: int, per_round: int) -> None:
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for run in rows.values():  # compiles, then warms
        for _ in range(3):
            run()
    for _ in range(rounds):
        for name, run in rows.items():
            samples[name].extend(timed(run) for _ in range(per_round))

    jax_median = statistics.median(samples["jax.jit (jaxlib)"])
    print(f"\n{title}; {rounds} interleaved rounds of {per_round}")
    print("| way | median ms | min ms | median x jax.jit |")
    print("|---|---:|---:|---:|")
    for name, times in samples.items():
        median = statistics.median(times)
        print(
            f"| {name} | {median * 1e3:.2f} | {min(times) * 1e3:.2f} | {median / jax_median:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--per-round", type=int, default=5)
    parser.add_argument(
        "--steps", default=",".join(STEPS), help="comma separated: " + ",".join(STEPS)
    )
    args = parser.parse_args()
    for key in args.steps.split(","):
        title, make_rows = STEPS[key]
        table(title, make_rows(), args.rounds, args.per_round)


if __name__ == "__main__":
    main()
