"""torchrun worker: pipeline parallelism (torch.distributed.pipelining, as TorchTitan drives it)
over tpu_dist on 2 ranks, with the 1F1B schedule (one stage a rank) and the interleaved 1F1B
schedule (two stages a rank), compared with single-process training of the whole model on the
CPU: each microbatch's loss at every step and every stage's final parameters. Each case writes
one JSON line to $DIST_RESULTS.<rank>."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B
from torch.nn import functional as F
from training_common import TPU, finish, start

import torch_tpu

STEPS, MICROBATCHES, BATCH, WIDTH = 5, 4, 8, 16


def whole_model() -> torch.nn.Sequential:
    """Four blocks and a head; stage k of a four-stage split is block k (the last with the
    head), of a two-stage split blocks 2k and 2k + 1."""
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(4)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 4))


def stage_layers(stage: int, stages: int) -> list[int]:
    per_stage = 4 // stages
    layers = list(range(stage * per_stage, (stage + 1) * per_stage))
    return layers + [4] if stage == stages - 1 else layers


def make_data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, 4, generator=g))
        for _ in range(STEPS)
    ]


def reference(data: list[tuple[torch.Tensor, torch.Tensor]]):
    """The whole model on the CPU: the mean of the microbatches' losses per step, SGD."""
    model = whole_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in data:
        opt.zero_grad()
        step = [
            F.mse_loss(model(a), b)
            for a, b in zip(x.chunk(MICROBATCHES), y.chunk(MICROBATCHES), strict=True)
        ]
        (sum(step) / MICROBATCHES).backward()
        opt.step()
        losses.append([loss.item() for loss in step])
    return losses, model


def train(rank: int, world: int, interleaved: bool, data):
    """This rank's stages trained by the schedule: the last stage's rank returns the losses."""
    stages = world * (2 if interleaved else 1)
    mine = [rank, rank + world] if interleaved else [rank]
    whole = whole_model()
    modules, pipeline_stages = [], []
    for index in mine:
        layers = stage_layers(index, stages)
        module = copy.deepcopy(torch.nn.Sequential(*[whole[i] for i in layers])).to(TPU)
        modules.append((layers, module))
        pipeline_stages.append(PipelineStage(module, index, stages, TPU))
    schedule = (
        ScheduleInterleaved1F1B(pipeline_stages, MICROBATCHES, loss_fn=F.mse_loss)
        if interleaved
        else Schedule1F1B(pipeline_stages[0], MICROBATCHES, loss_fn=F.mse_loss)
    )
    params = [p for _, module in modules for p in module.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    holds_first, holds_last = 0 in mine, stages - 1 in mine
    all_losses = []
    for x, y in data:
        opt.zero_grad()
        losses: list[torch.Tensor] = []
        args = (x.to(TPU),) if holds_first else ()
        kwargs = {"target": y.to(TPU), "losses": losses} if holds_last else {}
        schedule.step(*args, **kwargs)
        opt.step()
        all_losses.append([loss.item() for loss in losses])
    return all_losses if holds_last else None, modules


def check(rank: int, world: int, interleaved: bool, mode: str) -> None:
    data = make_data()
    want_losses, want_model = reference(data)
    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        got_losses, modules = train(rank, world, interleaved, data)
    if got_losses is not None:
        torch.testing.assert_close(
            torch.tensor(got_losses), torch.tensor(want_losses), rtol=1e-4, atol=1e-5
        )
    for layers, module in modules:
        for got, layer in zip(module, layers, strict=True):
            for (name, value), want in zip(
                got.named_parameters(), want_model[layer].parameters(), strict=True
            ):
                torch.testing.assert_close(
                    value.detach().cpu(),
                    want.detach(),
                    rtol=1e-4,
                    atol=1e-5,
                    msg=f"layer {layer} {name}",
                )


def main() -> None:
    rank, world, results = start()
    for name, interleaved, mode in (
        ("1f1b-strict", False, "strict"),
        ("1f1b-defer_and_fuse", False, "defer_and_fuse"),
        ("interleaved_1f1b-strict", True, "strict"),
    ):
        results.case(name, lambda: check(rank, world, interleaved, mode))  # noqa: B023
        dist.barrier()  # a rank whose comparison failed still meets the next case's schedule
    finish(results)


if __name__ == "__main__":
    main()
