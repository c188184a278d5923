"""Peak device memory of training steps on tpu next to jax.jit's for the same step, in one
table from one run (the MLP and TinyGPT steps of bench/peers.py).

    .venv/bin/python bench/memory.py

tpu: the most device memory held at once over three steps, after two warm-up steps
(`memory_stats()["device_buffer_bytes.peak"]`): the bytes of the device buffers alive, counted on
the buffers themselves, plus the temporaries of the executable being launched (from the plugin's
compiled-memory stats), sampled at each launch. Each cell has two figures:

- synchronized: `torch.tpu.synchronize()` after every step, so that one step's buffers are all
  there is, as in jax's figure;
- run ahead: the steps enqueued back to back, as a training loop runs them. A buffer whose last
  tensor is gone stays until the executions reading it have finished, while the host has
  already enqueued the next step, whose outputs the plugin allocates at launch.

jax.jit: the step's compiled-memory analysis, arguments + outputs - donated aliases +
temporaries, which is its whole footprint (the state lives in the step's arguments between
steps).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (its set-up: jax's own XLA flags, the shared workloads)

import torch_tpu  # noqa: E402
from torch_tpu.testing.tiny_gpt import training_step  # noqa: E402

MODES = (
    ("tpu Strict", "strict", None),
    ("tpu DeferAndFuse", "defer_and_fuse", None),
    ("tpu compiled", "strict", "tpu"),
)


def tpu_peak(step: Callable[[], Any], synchronized: bool) -> int:
    """The device peak over three steps after two."""
    for _ in range(2):
        step()
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    for _ in range(3):
        step()
        if synchronized:
            torch.tpu.synchronize()
    torch.tpu.synchronize()
    return int(torch.tpu.memory_stats()["device_buffer_bytes.peak"])


def mlp_tpu_step(backend: str | None) -> Callable[[], Any]:
    model, x, y = peers.mlp_setup()
    model = model.to("tpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=peers.SGD_LR)
    step = peers.torch_train_step(model, optimizer, F.mse_loss, x.to("tpu"), y.to("tpu"))
    return torch.compile(step, backend=backend) if backend else step


def gpt_tpu_step(backend: str | None) -> Callable[[], Any]:
    model, data = peers.gpt_setup()
    model = model.to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = training_step(model, optimizer, data[:, :-1].to("tpu"), data[:, 1:].to("tpu"))
    return torch.compile(step, backend=backend) if backend else step


def jax_footprint(jitted: Any, *args: Any) -> int:
    stats = jitted.lower(*args).compile().memory_analysis()
    return int(
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
        + stats.temp_size_in_bytes
    )


def mlp_jax() -> int:
    model, x, y = peers.mlp_setup()
    params = peers.jax_params(model)

    def step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(peers.jax_mlp_loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - peers.SGD_LR * g, params, grads), loss

    return jax_footprint(
        jax.jit(step, donate_argnums=0),
        params,
        jax.numpy.asarray(x.numpy()),
        jax.numpy.asarray(y.numpy()),
    )


def gpt_jax() -> int:
    model, data = peers.gpt_setup()
    params = peers.jax_params(model)
    zeros = {name: jax.numpy.zeros_like(p) for name, p in params.items()}
    state = (params, zeros, dict(zeros), jax.numpy.zeros((), jax.numpy.float32))
    return jax_footprint(
        jax.jit(peers.jax_adamw_step, donate_argnums=0),
        state,
        jax.numpy.asarray(data[:, :-1].numpy()),
        jax.numpy.asarray(data[:, 1:].numpy()),
    )


def main() -> None:
    rows = (
        ("MLP train step 4x512, b128, SGD", mlp_tpu_step, mlp_jax),
        ("TinyGPT train step 8x32, AdamW", gpt_tpu_step, gpt_jax),
    )
    print(
        f"plugin {Path(torch_tpu.plugin_path()).name}; KiB, device peak: synchronized / run ahead"
    )
    header = f"{'row':<32}" + "".join(f"{label:>22}" for label, _, _ in MODES)
    print(header + f"{'jax.jit':>10}{'worst x jax':>13}{'run ahead':>11}")
    for title, tpu_step, jax_row in rows:
        cells, worst, worst_ahead = [], 0.0, 0.0
        jax_bytes = jax_row()
        for _, mode, backend in MODES:
            peaks = []
            for synchronized in (True, False):
                with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
                    peaks.append(tpu_peak(tpu_step(backend), synchronized))
                torch._dynamo.reset()
            cells.append(f"{peaks[0] // 1024} / {peaks[1] // 1024}")
            worst = max(worst, peaks[0] / jax_bytes)
            worst_ahead = max(worst_ahead, peaks[1] / jax_bytes)
        print(
            f"{title:<32}"
            + "".join(f"{c:>22}" for c in cells)
            + f"{jax_bytes // 1024:>10}{worst:>12.2f}x{worst_ahead:>10.2f}x"
        )


if __name__ == "__main__":
    main()
