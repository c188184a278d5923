"""torchrun worker: DDP training of a tiny transformer on tpu through tpu_dist, compared with
single-process training on the full batch on the CPU (losses at every step and the final
parameters). Each case writes one JSON line to $DIST_RESULTS.<rank>."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from training_common import (
    BATCH,
    TPU,
    WithUnused,
    compare,
    finish,
    gpt,
    lm_loss,
    make_data,
    reference,
    start,
)

import torch_tpu


def train_ddp(
    build: Callable[[], torch.nn.Module],
    data: list[torch.Tensor],
    rank: int,
    world: int,
    *,
    ddp_kwargs: dict[str, Any],
    hook: Any = None,
    no_sync_halves: bool = False,
    compiled: bool = False,
    compiled_model: bool = False,
):
    torch.manual_seed(0)
    model = DDP(build().to(TPU), **ddp_kwargs)
    # The whole model compiled: forward and backward graphs, split at DDP's buckets.
    forward = torch.compile(model, backend="tpu") if compiled_model else model
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.compile(lm_loss, backend="tpu") if compiled else lm_loss
    losses = []
    per_rank = BATCH // world
    for batch in data:
        local = batch[rank * per_rank : (rank + 1) * per_rank].to(TPU)
        opt.zero_grad()
        if no_sync_halves:
            # Gradient accumulation: the first half's backward skips the all-reduce.
            half = per_rank // 2
            with model.no_sync():
                first = lm_loss(model, local[:half]) / 2
                first.backward()
            second = lm_loss(model, local[half:]) / 2
            second.backward()
            loss = (first + second).detach()
        else:
            loss = loss_fn(forward, local)
            loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
    params = {k.removeprefix("module."): v.detach().cpu() for k, v in model.named_parameters()}
    return losses, params


def main() -> None:
    rank, world, results = start()
    data = make_data()
    want = reference(gpt, data)
    case = results.case

    def plain(mode: str) -> Callable[[], None]:
        def run() -> None:
            with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
                got = train_ddp(gpt, data, rank, world, ddp_kwargs={})
            compare(got, want, 1e-4)

        return run

    case("ddp-strict", plain("strict"))
    case("ddp-defer_and_fuse", plain("defer_and_fuse"))
    case(
        "ddp-small_buckets_static_graph",
        lambda: compare(
            train_ddp(
                gpt, data, rank, world, ddp_kwargs={"bucket_cap_mb": 0.01, "static_graph": True}
            ),
            want,
            1e-4,
        ),
    )
    case(
        "ddp-no_sync",
        lambda: compare(
            train_ddp(gpt, data, rank, world, ddp_kwargs={}, no_sync_halves=True), want, 1e-4
        ),
    )
    case(
        "ddp-bf16_compress_hook",
        lambda: compare(
            train_ddp(gpt, data, rank, world, ddp_kwargs={}, hook=default_hooks.bf16_compress_hook),
            want,
            3e-2,
        ),
    )

    def unused() -> None:
        def build() -> torch.nn.Module:
            return WithUnused()

        want_unused = reference(build, data)
        got = train_ddp(build, data, rank, world, ddp_kwargs={"find_unused_parameters": True})
        compare(got, want_unused, 1e-4)

    case("ddp-find_unused_parameters", unused)
    case(
        "ddp-compiled",
        lambda: compare(
            train_ddp(gpt, data, rank, world, ddp_kwargs={}, compiled=True), want, 1e-4
        ),
    )

    case(
        "ddp-compiled_model",
        lambda: compare(
            train_ddp(gpt, data, rank, world, ddp_kwargs={}, compiled_model=True), want, 1e-4
        ),
    )

    finish(results)


if __name__ == "__main__":
    main()
