"""Training-step time of a small transformer, side by side from one run: torch.compile on tpu,
eager Strict and DeferAndFuse on tpu, torch CPU eager and torch.compile (inductor) on CPU. Then
the host time per call of a compiled 100-op graph: recorded on every call (each op dispatched
into the fused graph again) against replayed (its executable run on the call's inputs). Last,
an optimizer step alone (SGD and AdamW over a 4 x Linear(512, 512) MLP's 1M parameters),
eager and compiled, with the parameter and state buffers it updated in place per step
(torch_tpu.metrics()["donated_buffers"]), next to the same step with TORCH_TPU_DONATE=0, where
each update copies the buffer first.

    .venv/bin/python bench/compile.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch

import torch_tpu
from torch_tpu import _C
from torch_tpu.testing.tiny_gpt import tiny_lm_training_step


def ms_per_step(step: Callable[[], float], warmup: int = 3, repeats: int = 20) -> float:
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> None:
    rows: dict[str, float] = {}
    torch._dynamo.reset()
    rows["tpu, torch.compile(backend='tpu')"] = ms_per_step(tiny_lm_training_step("tpu", "tpu"))
    torch_tpu.set_eager_mode("strict")
    rows["tpu, eager Strict"] = ms_per_step(tiny_lm_training_step("tpu", None))
    torch_tpu.set_eager_mode("defer_and_fuse")
    rows["tpu, eager DeferAndFuse"] = ms_per_step(tiny_lm_training_step("tpu", None))
    torch_tpu.set_eager_mode("strict")
    rows["cpu, torch eager"] = ms_per_step(tiny_lm_training_step("cpu", None))
    torch._dynamo.reset()
    rows["cpu, torch.compile (inductor)"] = ms_per_step(tiny_lm_training_step("cpu", "inductor"))
    base = rows["tpu, eager Strict"]
    print(
        f"{'TinyGPT training step (dim 64, 2 layers, batch 8x32)':<40} {'ms/step':>9} "
        f"{'vs tpu Strict':>14}"
    )
    for name, ms in rows.items():
        print(f"{name:<52} {ms:>9.2f} {base / ms:>13.2f}x")
    replay_table()
    optimizer_table()


def chain(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    for _ in range(25):  # 100 ops, as an FX graph's generated code would run them
        x = torch.tanh(x @ w) * 0.5 + x
    return (x,)


def host_us_per_call(call: Callable[[], object], calls: int = 200, repeats: int = 5) -> float:
    """Median µs of host time per call: the device work of these small shapes runs behind."""
    call()
    torch.tpu.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.tpu.synchronize()
    return statistics.median(samples)


def replay_table() -> None:
    torch_tpu.set_eager_mode("strict")
    x, w = torch.randn(8, 16, device="tpu"), torch.randn(16, 16, device="tpu") * 0.1
    replay = _C._GraphReplay(chain)
    recorded = host_us_per_call(lambda: _C._run_recorded(chain, x, w))
    replayed = host_us_per_call(lambda: replay(x, w))
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: chain(a, b)[0], backend="tpu")
    through_dynamo = host_us_per_call(lambda: compiled(x, w))
    print(f"\n{'compiled 100-op graph, host time per call':<52} {'us/call':>9} {'vs recorded':>12}")
    for name, us in (
        ("recorded on every call (each op dispatched)", recorded),
        ("replayed (_C._GraphReplay)", replayed),
        ("torch.compile(backend='tpu') call, replayed", through_dynamo),
    ):
        print(f"{name:<52} {us:>9.1f} {recorded / us:>11.1f}x")


def optimizer_step(kind: str, compiled: bool) -> Callable[[], None]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).to("tpu")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer = (
        torch.optim.SGD(model.parameters(), lr=0.01)
        if kind == "SGD"
        else torch.optim.AdamW(model.parameters(), lr=1e-3)
    )

    def step() -> None:
        optimizer.step()

    torch._dynamo.reset()
    return torch.compile(step, backend="tpu") if compiled else step


def optimizer_table() -> None:
    print(
        f"\n{'optimizer step alone, 1M parameters, synced':<44} {'ms/step':>8} "
        f"{'DONATE=0':>9} {'ratio':>6} {'in place':>9}"
    )
    for kind in ("SGD", "AdamW"):
        for mode, compiled in (("strict", False), ("defer_and_fuse", False), ("strict", True)):
            torch_tpu.set_eager_mode(mode)  # type: ignore[arg-type]
            step = optimizer_step(kind, compiled)

            def synced(step: Callable[[], None] = step) -> float:
                step()
                torch.tpu.synchronize()
                return 0.0

            ms_per_step(synced, warmup=3, repeats=3)
            before = torch_tpu.metrics()["donated_buffers"]
            donating = ms_per_step(synced, warmup=0, repeats=50)
            in_place = (torch_tpu.metrics()["donated_buffers"] - before) / 50
            os.environ["TORCH_TPU_DONATE"] = "0"
            try:
                copying = ms_per_step(synced, warmup=3, repeats=50)
            finally:
                del os.environ["TORCH_TPU_DONATE"]
            label = f"{kind}, {'torch.compile' if compiled else 'eager ' + mode}"
            print(
                f"{label:<44} {donating:>8.3f} {copying:>9.3f} {copying / donating:>5.1f}x "
                f"{in_place:>9.0f}"
            )
    torch_tpu.set_eager_mode("strict")


if __name__ == "__main__":
    main()
