"""Per-op dispatch cost on tpu (cache hits) next to torch CPU eager and a bare PJRT execute of
the same computation, in one table from one run.

    .venv/bin/python bench/dispatch_overhead.py

Then: the compiles and time of reading a view at 256 different offsets; and Strict mode's
run-ahead: how many of a training step's executions are still in flight on the device when the
host has finished enqueueing the step, and the most in flight at once. Last, where the host's
time goes, phase by phase (a second process with TORCH_TPU_HOST_TIMERS=1): an op in Strict, an
op recorded in DeferAndFuse, and a compiled training step's graph replays. And the flight
recorder's cost per op, off and on (`--flight-recorder` prints only that table).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

import torch_tpu
from torch_tpu.testing.steps import mse_training_step

ITERATIONS = 2000
REPEATS = 5


def per_call_us(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    for _ in range(50):
        fn()
    sync()
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / ITERATIONS * 1e6)
    return statistics.median(samples)


def bare_pjrt_us(op: str) -> tuple[float, float] | None:
    bench = getattr(torch_tpu._C, "_bench_bare_execute", None)
    if bench is None:
        return None
    return tuple(bench(op, ITERATIONS))  # type: ignore[return-value]


def main() -> None:
    a_cpu, b_cpu = torch.randn(4, 4), torch.randn(4, 4)
    a, b = a_cpu.to("tpu"), b_cpu.to("tpu")
    # The last two take built-in arguments (a dim, an int list and a flag), which are part of
    # the executable's cache key; the bare execute is measured for add and matmul only.
    cases: dict[str, tuple[str | None, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
        "add 4x4": ("add", lambda x, y: x + y),
        "matmul 4x4": ("matmul", torch.matmul),
        "softmax dim 1": (None, lambda x, y: torch.softmax(x, 1)),
        "sum dim 1": (None, lambda x, y: x.sum(1)),
    }
    print(
        f"{'op':<14} {'cpu eager':>10} {'tpu enqueue':>12} {'tpu op+sync':>11} "
        f"{'pjrt bare':>10} {'pjrt +wait':>11} {'tpu/cpu':>8} {'tpu/pjrt':>9}   (us per op)"
    )
    for name, (kind, fn) in cases.items():
        cpu = per_call_us(lambda fn=fn: fn(a_cpu, b_cpu), lambda: None)
        enqueue = per_call_us(lambda fn=fn: fn(a, b), lambda: None)
        torch.tpu.synchronize()
        # Each op followed by a device-wide sync: the cost of one op run to completion.
        synced = per_call_us(lambda fn=fn: (fn(a, b), torch.tpu.synchronize()), lambda: None)
        bare = bare_pjrt_us(kind) if kind is not None else None
        bare_text = f"{bare[0]:>10.2f} {bare[1]:>11.2f}" if bare else f"{'n/a':>10} {'n/a':>11}"
        ratio = f"{enqueue / bare[0]:>9.1f}" if bare else f"{'n/a':>9}"
        print(
            f"{name:<14} {cpu:>10.2f} {enqueue:>12.2f} {synced:>11.2f} {bare_text} "
            f"{enqueue / cpu:>8.1f} {ratio}"
        )
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    for _ in range(100):
        a + b
    torch.tpu.synchronize()
    m = torch_tpu.metrics()
    print(
        f"\n100 adds after warm-up: compiles={m['compiles']} cache_hits={m['cache_hits']} "
        f"executions={m['executions']}"
    )


def offsets_table() -> None:
    """A view's storage offset is a runtime input: reading x[i] for every row compiles once."""
    x = torch.randn(256, 8).to("tpu")
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["compiles"]
    start = time.perf_counter()
    torch.stack([torch.exp(x[i]) for i in range(256)]).cpu()
    first = time.perf_counter() - start
    compiles = torch_tpu.metrics()["compiles"] - before
    start = time.perf_counter()
    torch.stack([torch.exp(x[i]) for i in range(256)]).cpu()
    again = time.perf_counter() - start
    print(
        f"\ntorch.stack([exp(x[i]) for i in range(256)]) on (256, 8): first call {first:.2f} s "
        f"({compiles} compiles), second call {again * 1e3:.1f} ms"
    )


def run_ahead_table(steps: int = 20) -> None:
    """Strict mode enqueues and returns: the host builds step N+1 while step N still runs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)
    ).to("tpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512).to("tpu")

    def step() -> None:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()

    for _ in range(3):
        step()
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    at_return = []
    start = time.perf_counter()
    for _ in range(steps):
        step()
        at_return.append(torch_tpu._C._in_flight())
    enqueued = time.perf_counter() - start
    torch.tpu.synchronize()
    total = time.perf_counter() - start
    m = torch_tpu.metrics()
    print(
        f"\nStrict run-ahead, MLP 512-2048-512 b256 SGD, {steps} steps: host done enqueueing after "
        f"{enqueued * 1e3:.0f} ms, device done after {total * 1e3:.0f} ms; executions in flight "
        f"when a step's Python returns: mean {statistics.mean(at_return):.1f}, max "
        f"{max(at_return)}; most in flight at a launch: {m['max_in_flight']} "
        f"(of {m['executions'] // steps} per step)"
    )


def compiled_graph_table(calls: int = 100) -> None:
    """A compiled 100-op graph's call: host time to enqueue it and ops looked up per call (a
    replay looks up one executable and runs it), next to the same 100 ops dispatched one by
    one in Strict mode."""

    def chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(25):
            x = torch.tanh(x @ w) * 0.5 + x
        return x

    x, w = torch.randn(8, 16).to("tpu"), (torch.randn(16, 16) * 0.1).to("tpu")
    compiled = torch.compile(chain, backend="tpu")
    print(
        f"\n{'100-op graph, per call':<24} {'host us':>9} {'call+sync us':>13} "
        f"{'lookups':>8} {'executions':>11}"
    )
    for name, fn in (("Strict, op by op", chain), ("compiled, replayed", compiled)):
        for _ in range(3):
            fn(x, w)
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        start = time.perf_counter()
        for _ in range(calls):
            fn(x, w)
        host = (time.perf_counter() - start) / calls * 1e6
        torch.tpu.synchronize()
        m = torch_tpu.metrics()
        start = time.perf_counter()
        for _ in range(calls):
            fn(x, w)
            torch.tpu.synchronize()
        synced = (time.perf_counter() - start) / calls * 1e6
        print(
            f"{name:<24} {host:>9.1f} {synced:>13.1f} {m['cache_hits'] / calls:>8.1f} "
            f"{m['executions'] / calls:>11.1f}"
        )


def host_us_per_step(step: Callable[[], object], steps: int) -> tuple[float, dict[str, int]]:
    """Host µs per call of `step` after 5 warm-up calls, and the counters of those calls (their
    work finished)."""
    for _ in range(5):
        step()
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    host = (time.perf_counter() - start) / steps * 1e6
    torch.tpu.synchronize()
    return host, torch_tpu.metrics()


def tiny_step_table(steps: int = 200) -> None:
    """Host time per training step of an MLP too small for its compute to matter (3 x Linear
    8x8, batch 4, SGD): what each mode costs the host around the device's work. On a GPU a step
    like this is bound by it (bench/peers.py on the H200: jax.jit runs the whole MLP step in
    0.22 ms)."""

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 8),
            torch.nn.GELU(),
            torch.nn.Linear(8, 8),
            torch.nn.GELU(),
            torch.nn.Linear(8, 8),
        ).to("tpu")
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    x, y = torch.randn(4, 8).to("tpu"), torch.randn(4, 8).to("tpu")
    print(f"\n{'tiny MLP step':<24} {'host us':>9} {'executions':>11} {'lookups':>8}")
    for label, mode, backend in (
        ("Strict", "strict", None),
        ("DeferAndFuse", "defer_and_fuse", None),
        ("compiled", "strict", "tpu"),
    ):
        model, optimizer = make()
        step = mse_training_step(model, optimizer, x, y)
        fn = torch.compile(step, backend=backend) if backend else step
        with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
            host, m = host_us_per_step(fn, steps)
        print(
            f"{label:<24} {host:>9.1f} {m['executions'] / steps:>11.1f} "
            f"{m['cache_hits'] / steps:>8.1f}"
        )


def median_us(fn: Callable[[], object], calls: int = 5000) -> float:
    for _ in range(100):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def read_back_table() -> None:
    """Reading values back to the host, each call timed alone (median µs): a ready scalar, a
    scalar just computed (the op and the read), and 1024 floats; next to torch CPU and, where
    jax is installed, jax on its own CPU runtime."""
    x, y = torch.randn(()).to("tpu"), torch.randn(1024).to("tpu")
    x_cpu, y_cpu = x.cpu(), y.cpu()
    torch.tpu.synchronize()
    rows: dict[str, list[Callable[[], object]]] = {
        "x.item(), x ready": [x.item, x_cpu.item],
        "(x + 1).item()": [lambda: (x + 1).item(), lambda: (x_cpu + 1).item()],
        "y.cpu(), 1024 floats": [y.cpu, y_cpu.numpy],
    }
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
    except ImportError:
        pass
    else:
        x_jax, y_jax = jnp.asarray(x_cpu.numpy()), jnp.asarray(y_cpu.numpy())
        add_one = jax.jit(lambda a: a + 1)
        rows["x.item(), x ready"].append(lambda: float(x_jax))
        rows["(x + 1).item()"].append(lambda: float(add_one(x_jax)))
        rows["y.cpu(), 1024 floats"].append(lambda: np.asarray(y_jax))
    print(f"\n{'read back (us per call)':<24} {'tpu':>8} {'torch cpu':>10} {'jax':>8}")
    for label, (tpu, cpu, *jax_read) in rows.items():
        jax_text = f"{median_us(jax_read[0]):>8.2f}" if jax_read else f"{'n/a':>8}"
        print(f"{label:<24} {median_us(tpu):>8.2f} {median_us(cpu):>10.2f} {jax_text}")


def phase_rows(metrics: dict[str, int], prefix: str, units: int) -> list[tuple[str, float, float]]:
    """(phase, µs per unit, calls per unit) of the timers whose name starts with `prefix`."""
    rows = []
    for key, total_us in sorted(metrics.items()):
        if key.startswith("host_us." + prefix):
            phase = key.removeprefix("host_us.")
            calls = metrics["host_calls." + phase]
            rows.append((phase, total_us / units, calls / units))
    # An op's time in none of its phases: the kernel's entry (its lowering's lookup, the
    # argument stack), the run-ahead bound, and any flush of a pending graph it caused.
    if "host_us.op_total" in metrics:
        parts = ("arguments", "cache_key", "lookup", "inputs", "launch", "completion", "outputs")
        inside = sum(metrics.get(f"host_us.op_{part}", 0) for part in parts + ("record",))
        rows.append(("op_other", (metrics["host_us.op_total"] - inside) / units, 0.0))
    return rows


def host_phases_table(ops: int = 4000, steps: int = 200) -> None:
    """Run in a process with TORCH_TPU_HOST_TIMERS=1: µs per op (or per step) in each phase."""
    a, b = torch.randn(4, 4).to("tpu"), torch.randn(4, 4).to("tpu")
    sections: list[tuple[str, list[tuple[str, float, float]]]] = []
    for label, mode in (("add 4x4, Strict", "strict"), ("add 4x4, DeferAndFuse", "defer_and_fuse")):
        with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
            for _ in range(100):
                a + b
            torch.tpu.synchronize()
            torch_tpu.reset_metrics()
            for _ in range(ops):
                a + b
            torch.tpu.synchronize()
        sections.append((label + ", per op", phase_rows(torch_tpu.metrics(), "op_", ops)))

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.GELU()
    ).to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8).to("tpu"), torch.randn(4, 8).to("tpu")

    step = torch.compile(mse_training_step(model, optimizer, x, y), backend="tpu")

    host, m = host_us_per_step(step, steps)
    rows = phase_rows(m, "", steps)
    ours = sum(us for phase, us, _ in rows if phase in ("op_total", "replay_total"))
    rows.append(("outside torch_tpu (Dynamo, AOTAutograd, autograd)", host - ours, 1.0))
    sections.append(
        (
            f"compiled MLP + AdamW step, per step (host {host:.1f} us, "
            f"{m['executions'] / steps:.1f} executions)",
            rows,
        )
    )
    print(f"\n{'host phases (TORCH_TPU_HOST_TIMERS=1)':<40} {'us':>9} {'calls':>7}")
    for title, rows in sections:
        print(title)
        for phase, us, calls in rows:
            print(f"  {phase:<38} {us:>9.2f} {calls:>7.2f}")


def flight_recorder_table(repeats: int = 15) -> None:
    """µs per op with the flight recorder off and on, toggled between interleaved samples so
    that drift hits both alike (TORCH_TPU_FLIGHT_RECORDER_LINES is read at start-up: run with
    it set to see the cost of recording Python lines)."""
    if not torch_tpu._C._flight_recorder_capacity():
        print("\nflight recorder: off (TORCH_TPU_FLIGHT_RECORDER=0)")
        return
    a, b = torch.randn(4, 4).to("tpu"), torch.randn(4, 4).to("tpu")
    lines = os.environ.get("TORCH_TPU_FLIGHT_RECORDER_LINES") == "1"
    print(
        f"\n{'flight recorder' + (' (with Python lines)' if lines else ''):<34} "
        f"{'off':>8} {'on':>8} {'on/off':>7}   (us per op, median of {repeats})"
    )
    cases = {
        "add 4x4, Strict": ("strict", lambda: a + b),
        "matmul 4x4, Strict": ("strict", lambda: a @ b),
        "add 4x4, DeferAndFuse": ("defer_and_fuse", lambda: a + b),
    }
    for name, (mode, fn) in cases.items():
        samples: dict[bool, list[float]] = {False: [], True: []}
        with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
            for _ in range(repeats):
                for on in (False, True):
                    torch_tpu._C._set_flight_recorder_enabled(on)
                    for _ in range(50):
                        fn()
                    torch.tpu.synchronize()
                    start = time.perf_counter()
                    for _ in range(ITERATIONS):
                        fn()
                    torch.tpu.synchronize()
                    samples[on].append((time.perf_counter() - start) / ITERATIONS * 1e6)
        torch_tpu._C._set_flight_recorder_enabled(True)
        off, on = statistics.median(samples[False]), statistics.median(samples[True])
        print(f"{name:<34} {off:>8.2f} {on:>8.2f} {on / off:>7.3f}")
    # The recording alone, with no op around it: what the ratios above should show.
    record_ns = statistics.median(torch_tpu._C._bench_flight_record_ns(100_000) for _ in range(5))
    print(f"{'recording one op alone (ns)':<34} {record_ns:>17.0f}")


if __name__ == "__main__":
    if "--host-phases" in sys.argv:
        host_phases_table()
        sys.exit(0)
    if "--flight-recorder" in sys.argv:
        flight_recorder_table()
        sys.exit(0)
    main()
    read_back_table()
    offsets_table()
    run_ahead_table()
    compiled_graph_table()
    tiny_step_table()
    flight_recorder_table()
    # The timers are read once at start-up: a process of their own.
    subprocess.run(
        [sys.executable, __file__, "--host-phases"],
        env={**os.environ, "TORCH_TPU_HOST_TIMERS": "1"},
        check=True,
        timeout=600,
    )
