"""torchrun worker: functional collectives (torch.ops._c10d_functional, what DTensor and
SimpleFSDP trace into a graph) inside graphs compiled with ``backend="tpu"``, forward and
backward, against the same function run eagerly on CPU through a Gloo group.

Writes one JSON line per case to $DIST_RESULTS.<rank>: {"case": ..., "error": null | "...",
"counts": [...]}: per call after the first two, torch_tpu's executions and joined graphs.
"""

from __future__ import annotations

import datetime
import json
import os
import traceback
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import torch_tpu

TPU = torch.device("tpu")
CALLS = 4


def sharded_step(w: torch.Tensor, x: torch.Tensor, group: Any) -> tuple[torch.Tensor, ...]:
    """A layer whose weight is sharded by rows: all-gathered for the forward, its gradient
    reduce-scattered by the backward (funcol's autograd all-gather)."""
    full = funcol.all_gather_tensor_autograd(w, 0, group)
    loss = (x @ full.t()).relu().square().mean()
    total = funcol.all_reduce(loss.detach(), "sum", group)
    return loss, total


def forward_only(w: torch.Tensor, x: torch.Tensor, group: Any) -> tuple[torch.Tensor, ...]:
    full = funcol.all_gather_tensor(w, 0, group)
    y = (x @ full.t()).relu()
    shard = funcol.reduce_scatter_tensor(y.t() @ x, "sum", 0, group)
    return y.sum(), shard * 2


def run_case(name: str, fn: Any, backward: bool, tpu_group: Any, gloo_group: Any) -> list[Any]:
    rank = dist.get_rank()
    w = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
    compiled = torch.compile(fn, backend="tpu", fullgraph=True)
    counts = []
    for call in range(CALLS):
        x = torch.randn(3, 8, generator=torch.Generator().manual_seed(10 + call))
        w_cpu = w.clone().requires_grad_(backward)
        want = fn(w_cpu, x, gloo_group)
        w_tpu = w.to(TPU).requires_grad_(backward)
        x_tpu = x.to(TPU)
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        got = compiled(w_tpu, x_tpu, tpu_group)
        if backward:
            got[0].backward()
            want[0].backward()
            got, want = (*got, w_tpu.grad), (*want, w_cpu.grad)
        torch.tpu.synchronize()
        after = torch_tpu.metrics()
        if call >= 2:
            counts.append({k: after[k] - before[k] for k in ("executions", "joined_graphs")})
        for g, e in zip(got, want, strict=True):
            assert g.device.type == "tpu", f"{name}: a result on {g.device}"
            torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-5)
    return counts


def main() -> None:
    dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    out = open(f"{os.environ['DIST_RESULTS']}.{rank}", "w")  # noqa: SIM115
    cases = {"forward": (forward_only, False), "forward_backward": (sharded_step, True)}
    for name, (fn, backward) in cases.items():
        error, counts = None, None
        try:
            counts = run_case(name, fn, backward, dist.group.WORLD, gloo)
        except Exception:  # noqa: BLE001  (reported to the test)
            error = traceback.format_exc()
        out.write(json.dumps({"case": name, "error": error, "counts": counts}) + "\n")
        out.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
