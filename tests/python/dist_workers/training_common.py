"""Shared by the training workers: the data, the model builders, single-process CPU training
on the full batch (the reference) and the comparison."""

from __future__ import annotations

import datetime
import json
import os
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn import functional as F

from torch_tpu.testing.tiny_gpt import TinyGPT

TPU = torch.device("tpu")
STEPS = 10
BATCH, LENGTH, VOCAB = 8, 12, 64


class WithUnused(torch.nn.Module):
    """A model with a branch that takes no part in the loss (find_unused_parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.gpt = TinyGPT(vocab=VOCAB, dim=32, heads=2, layers=1, max_len=LENGTH)
        self.unused = torch.nn.Linear(4, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.gpt(tokens)


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def reference(
    build: Callable[[], torch.nn.Module], data: list[torch.Tensor], clip: float | None = None
):
    """Single-process CPU training on the full batch (gradient norms clipped to `clip`): the
    losses and final parameters."""
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for batch in data:
        opt.zero_grad()
        loss = lm_loss(model, batch)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def gpt() -> torch.nn.Module:
    return TinyGPT(vocab=VOCAB, dim=32, heads=2, layers=2, max_len=LENGTH)


def make_data() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=g) for _ in range(STEPS)]


def compare(got: tuple[list[float], dict], want: tuple[list[float], dict], tol: float) -> None:
    got_losses, got_params = got
    want_losses, want_params = want
    torch.testing.assert_close(
        torch.tensor(got_losses), torch.tensor(want_losses), rtol=tol, atol=tol
    )
    assert got_params.keys() == want_params.keys()
    for name, value in want_params.items():
        torch.testing.assert_close(got_params[name], value, rtol=tol, atol=tol, msg=name)


class Results:
    """Each case's outcome, written as JSON lines to $DIST_RESULTS.<rank>."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.rows: list[dict[str, Any]] = []

    def case(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            self.rows.append({"case": name, "error": None})
        except Exception:  # noqa: BLE001 - each case reports its own failure
            self.rows.append({"case": name, "error": traceback.format_exc(limit=6)})

    def save(self) -> None:
        with open(f"{os.environ['DIST_RESULTS']}.{self.rank}", "w") as f:
            for row in self.rows:
                f.write(json.dumps(row) + "\n")


def start() -> tuple[int, int, Results]:
    """Joins the tpu_dist group (timeout $DIST_TIMEOUT, default 120 s): rank, world, results."""
    timeout = datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT", "120")))
    dist.init_process_group("tpu_dist", timeout=timeout)
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))  # this process's chip is tpu:LOCAL_RANK
    return dist.get_rank(), dist.get_world_size(), Results(dist.get_rank())


def finish(results: Results) -> None:
    results.save()
    dist.barrier()
    dist.destroy_process_group()
