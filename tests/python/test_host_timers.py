"""TORCH_TPU_HOST_TIMERS=1: torch_tpu.metrics() reports host time per phase of an op, a flush
and a compiled graph's replay, one call per phase per op. Read once at start-up, so each case
runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, torch, torch_tpu
a, b = torch.ones(4, 4, device="tpu"), torch.full((4, 4), 2.0, device="tpu")
report = {}
for mode in ("strict", "defer_and_fuse"):
    with torch_tpu.eager_mode(mode):
        a + b
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        outs = [a + b for _ in range(10)]
        torch.tpu.synchronize()
        assert all(torch.equal(o.cpu(), torch.full((4, 4), 3.0)) for o in outs)
    report[mode] = torch_tpu.metrics()
f = torch.compile(lambda x: (x * 2 + 1).relu(), backend="tpu")
f(a)
torch.tpu.synchronize()
torch_tpu.reset_metrics()
outs = [f(a) for _ in range(5)]
torch.tpu.synchronize()
assert all(torch.equal(o.cpu(), torch.full((4, 4), 3.0)) for o in outs)
report["compiled"] = torch_tpu.metrics()
print(json.dumps(report))
"""


def run(timers: bool) -> dict[str, dict[str, int]]:
    env = {**os.environ, "TORCH_TPU_HOST_TIMERS": "1" if timers else "0"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_each_phase_is_timed_once_per_op_and_per_replay() -> None:
    report = run(timers=True)
    strict = report["strict"]
    for phase in ("total", "arguments", "cache_key", "lookup", "inputs", "launch", "outputs"):
        assert strict[f"host_calls.op_{phase}"] == 10, phase
        assert strict[f"host_us.op_{phase}"] >= 0
    # The parts never add up to more than the whole.
    parts = sum(
        v for k, v in strict.items() if k.startswith("host_us.op_") and k != "host_us.op_total"
    )
    assert parts <= strict["host_us.op_total"] + 10  # whole µs, rounded down per phase

    fused = report["defer_and_fuse"]
    assert fused["host_calls.op_record"] == 10
    assert "host_calls.op_launch" not in fused  # recorded, never launched one by one
    assert fused["host_calls.flush"] == 1  # the ten adds ran as one graph at the sync

    compiled = report["compiled"]
    for phase in ("total", "signature", "inputs", "launch", "outputs"):
        assert compiled[f"host_calls.replay_{phase}"] == 5, phase


def test_off_by_default_no_phase_is_reported() -> None:
    report = run(timers=False)
    assert not any(key.startswith(("host_us.", "host_calls.")) for key in report["strict"])
    # The counters themselves are unchanged by the timers' absence.
    assert report["strict"]["executions"] == 10
