"""Training-step time of a small transformer, side by side from one run: torch.compile on tpu,
eager Strict and DeferAndFuse on tpu, torch CPU eager and torch.compile (inductor) on CPU. Then
the host time per call of a compiled 100-op graph: recorded on every call (each op dispatched
into the fused graph again) against replayed (its executable run on the call's inputs). Last,
where a compiled call's time goes, for a TinyGPT forward at batch 1 and a greedy decoding step
(the shapes of bench/peers.py's rows): Dynamo and AOTAutograd before torch_tpu's graph call,
that call (the replay: its arguments gathered, the executable launched; the CPU plugin may run
a small program's first kernels on the launching thread), what follows it, and the wait for
the result. Then a compiled MLP training step with its graphs joined into one program per
step (the default) against each graph launched on its own (TORCH_TPU_JOIN_GRAPHS=0), with and
without a host read of the loss after every step, interleaved in one process.

    .venv/bin/python bench/compile.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import torch_tpu
from torch_tpu import _C, _bucketing
from torch_tpu.testing.steps import mse_training_step
from torch_tpu.testing.tiny_gpt import TinyGPT, tiny_lm_training_step


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


def host_split_table(calls: int = 2000) -> None:
    """Median µs per compiled call: before torch_tpu's graph call, in it, after it, and the wait
    for the result (a synchronize, or the token's .item())."""
    marks: dict[str, float] = {}
    graph_call = _bucketing.BucketedGraph.__call__

    def timed_graph_call(self: _bucketing.BucketedGraph, args: list[Any]) -> Any:
        marks["in"] = time.perf_counter()
        result = graph_call(self, args)
        marks["out"] = time.perf_counter()
        return result

    torch.manual_seed(0)
    model = TinyGPT(dim=64, layers=2, max_len=32).eval().to("tpu")
    tokens = torch.randint(0, 64, (1, 32)).to("tpu")
    forward = torch.compile(model, backend="tpu")
    decode = torch.compile(model.decode_step, backend="tpu")
    caches = model.empty_caches()
    position = torch.zeros((), dtype=torch.long, device="tpu")
    token = torch.tensor(3, device="tpu")

    def run_forward() -> None:
        forward(tokens)

    decoded = [0]

    def run_decode() -> torch.Tensor:
        decoded[0] += 1
        if decoded[0] % 30 == 0:  # the caches hold 32 positions
            position.zero_()
        return decode(token, position, caches)

    header = ("before", "graph call", "after", "wait")
    print(f"\n{'compiled call, median us':<32} " + " ".join(f"{h:>10}" for h in header))
    _bucketing.BucketedGraph.__call__ = timed_graph_call  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            for label, run, wait in (
                ("TinyGPT forward 1x32", run_forward, lambda _: torch.tpu.synchronize()),
                ("TinyGPT decode step", run_decode, lambda out: out.item()),
            ):
                parts: list[list[float]] = [[], [], [], []]
                for i in range(calls + 50):
                    start = time.perf_counter()
                    out = run()
                    returned = time.perf_counter()
                    wait(out)
                    done = time.perf_counter()
                    if i >= 50:
                        for part, seconds in zip(
                            parts,
                            (marks["in"] - start, marks["out"] - marks["in"],
                             returned - marks["out"], done - returned),
                            strict=True,
                        ):  # fmt: skip
                            part.append(seconds)
                medians = [statistics.median(part) * 1e6 for part in parts]
                print(f"{label:<32} " + " ".join(f"{m:>10.1f}" for m in medians))
    finally:
        _bucketing.BucketedGraph.__call__ = graph_call  # type: ignore[method-assign]


def joined_steps_table(steps: int = 20, rounds: int = 8) -> None:
    """ms per compiled step (4 x Linear(512) + GELU, batch 128, SGD), medians over interleaved
    rounds. Joined, a step's forward, backward and optimizer graphs run as one program once the
    step is recorded; on their own, the forward runs while the host records the backward."""
    torch.manual_seed(0)
    layers = [m for _ in range(4) for m in (torch.nn.Linear(512, 512), torch.nn.GELU())]
    model = torch.nn.Sequential(*layers).to("tpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 512).to("tpu"), torch.randn(128, 512).to("tpu")

    step = torch.compile(mse_training_step(model, optimizer, x, y), backend="tpu")

    def ms(join: str, read_each_step: bool) -> float:
        os.environ["TORCH_TPU_JOIN_GRAPHS"] = join  # read at each call
        for _ in range(3):
            step().item()
        start = time.perf_counter()
        for _ in range(steps):
            loss = step()
            if read_each_step:
                loss.item()
        torch.tpu.synchronize()
        return (time.perf_counter() - start) / steps * 1e3

    previous = os.environ.get("TORCH_TPU_JOIN_GRAPHS")
    print(f"\n{'compiled MLP step, ms':<34} {'joined':>8} {'one by one':>11} {'ratio':>7}")
    try:
        for read_each_step in (False, True):
            times: dict[str, list[float]] = {"1": [], "0": []}
            for _ in range(rounds):
                for join in ("1", "0"):
                    times[join].append(ms(join, read_each_step))
            joined, alone = (statistics.median(times[j]) for j in ("1", "0"))
            label = "loss.item() every step" if read_each_step else "no read until the end"
            print(f"{label:<34} {joined:>8.2f} {alone:>11.2f} {joined / alone:>6.2f}x")
    finally:
        if previous is None:
            os.environ.pop("TORCH_TPU_JOIN_GRAPHS", None)
        else:
            os.environ["TORCH_TPU_JOIN_GRAPHS"] = previous


if __name__ == "__main__":
    main()
    host_split_table()
    joined_steps_table()
