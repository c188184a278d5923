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
  already enqueued the next step, whose outputs the plugin allocates at launch. The host waits
  for the device when such buffers pass TORCH_TPU_RETIRED_PERCENT of the live bytes;
- unbounded: run ahead with that bound off (percent 0), as before it existed.

A second table times the steps run ahead with the bound and without, in rounds of ten steps
that alternate which goes first (medians of six), to show what the waits cost.

The MLP step also runs with zero_grad last, so that no gradient outlives the step, as in jax's
step: the usual order keeps one step's .grad tensors until the next step starts.

jax.jit: the step's compiled-memory analysis, arguments + outputs - donated aliases +
temporaries, which is its whole footprint (the state lives in the step's arguments between
steps).
"""

from __future__ import annotations

import statistics
import sys
import time
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


def mlp_tpu_step_grads_dropped(backend: str | None) -> Callable[[], Any]:
    """The MLP step with zero_grad last: no .grad outlives the step, as no gradient outlives
    jax's step. The usual order keeps a step's gradients until the next one starts, so every
    PyTorch device holds them at the peak: the difference between the two rows is the
    program's, not the device's."""
    model, x, y = peers.mlp_setup()
    model = model.to("tpu")
    x, y = x.to("tpu"), y.to("tpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=peers.SGD_LR)

    def step() -> torch.Tensor:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

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


def run_ahead_ms(step: Callable[[], Any], percents: tuple[int, ...]) -> list[float]:
    """Median ms per step run ahead under each retired-bytes percent, in rounds that alternate
    their order, then the waits per step under the first."""
    times: list[list[float]] = [[] for _ in percents]
    waits = 0
    for round_index in range(6):
        # Each order as often as the other: the first of two back-to-back runs was measured
        # ~10% slower with nothing else different.
        order = list(enumerate(percents))
        for column, percent in order if round_index % 2 == 0 else order[::-1]:
            torch_tpu._C._set_retired_percent(percent)
            torch.tpu.synchronize()
            before = torch_tpu.metrics()["run_ahead_waits"]
            start = time.perf_counter()
            for _ in range(10):
                step()
            torch.tpu.synchronize()
            times[column].append((time.perf_counter() - start) * 100)
            if column == 0:
                waits += torch_tpu.metrics()["run_ahead_waits"] - before
    return [statistics.median(column) for column in times] + [waits / 60]


def main() -> None:
    rows = (
        ("MLP train step 4x512, b128, SGD", mlp_tpu_step, mlp_jax),
        ("  the same, zero_grad last", mlp_tpu_step_grads_dropped, mlp_jax),
        ("TinyGPT train step 8x32, AdamW", gpt_tpu_step, gpt_jax),
    )
    bound = torch_tpu._C._retired_percent()
    print(
        f"plugin {Path(torch_tpu.plugin_path()).name}; KiB, device peak: "
        f"synchronized / run ahead / run ahead unbounded (TORCH_TPU_RETIRED_PERCENT {bound} / 0)"
    )
    header = f"{'row':<32}" + "".join(f"{label:>26}" for label, _, _ in MODES)
    print(header + f"{'jax.jit':>10}{'worst x jax':>13}{'run ahead':>11}{'unbounded':>11}")
    speed_rows = []
    for title, tpu_step, jax_row in rows:
        cells, speeds, worst = [], [], [0.0, 0.0, 0.0]
        jax_bytes = jax_row()
        for _, mode, backend in MODES:
            peaks = []
            with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
                step = tpu_step(backend)
                for synchronized, percent in ((True, bound), (False, bound), (False, 0)):
                    torch_tpu._C._set_retired_percent(percent)
                    peaks.append(tpu_peak(step, synchronized))
                speeds.append(run_ahead_ms(step, (bound, 0)))
            torch_tpu._C._set_retired_percent(bound)
            torch._dynamo.reset()
            cells.append(" / ".join(str(peak // 1024) for peak in peaks))
            worst = [max(w, peak / jax_bytes) for w, peak in zip(worst, peaks, strict=True)]
        print(
            f"{title:<32}"
            + "".join(f"{c:>26}" for c in cells)
            + f"{jax_bytes // 1024:>10}"
            + "".join(f"{w:>{12 if i == 0 else 10}.2f}x" for i, w in enumerate(worst))
        )
        speed_rows.append((title, speeds))
    print(
        "\nms per step run ahead: bounded / unbounded (medians of 6 rounds of 10, in both orders); "
        "the bound's waits per step"
    )
    print(f"{'row':<32}" + "".join(f"{label:>26}" for label, _, _ in MODES))
    for title, speeds in speed_rows:
        print(
            f"{title:<32}" + "".join(f"{f'{a:.2f} / {b:.2f}; {w:.1f}':>26}" for a, b, w in speeds)
        )


if __name__ == "__main__":
    main()
