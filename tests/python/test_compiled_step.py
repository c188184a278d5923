"""A compiled training step (zero_grad, forward, backward, optimizer step) is one device program:
Dynamo's graphs of the step (the forward, AOTAutograd's backward, the optimizer's step) replay
into one pending graph that runs as one executable when the next step's forward arrives. Counted
per step here (the counts are the same on every plugin) and checked against CPU step by step."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch._dynamo
from conftest import TPU
from torch import nn

import torch_tpu

Optimizer = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]

OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1),
    "sgd_momentum_foreach": lambda params: torch.optim.SGD(
        params, lr=0.1, momentum=0.9, foreach=True
    ),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2),
    "adamw_foreach": lambda params: torch.optim.AdamW(params, lr=1e-2, foreach=True),
    "adamw_fused": lambda params: torch.optim.AdamW(params, lr=1e-2, fused=True),
}

COUNTED = ("executions", "uploads", "downloads", "host_syncs", "compiles", "joined_graphs")


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def train(
    device: torch.device | str, optimizer_name: str, steps: int, count_after: int = 0
) -> tuple[list[torch.Tensor], nn.Module, list[dict[str, int]]]:
    """`steps` compiled steps on fresh batches; the losses, the model, and the counters of each
    step after the first `count_after` (the synchronized warm-up)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    model = model.to(device)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    batches = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(steps)]

    @torch.compile(backend="tpu")
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    losses: list[torch.Tensor] = []
    counts: list[dict[str, int]] = []
    for i, (x, y) in enumerate(batches):
        if i == count_after and device != "cpu":
            torch.tpu.synchronize()
        before = torch_tpu.metrics() if device != "cpu" else {}
        losses.append(step(x.to(device), y.to(device)))
        if i >= count_after and device != "cpu":
            after = torch_tpu.metrics()
            counts.append({key: after[key] - before[key] for key in COUNTED})
    return losses, model, counts


@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
def test_a_compiled_training_step_is_one_program(optimizer_name: str) -> None:
    steps, warm_up = 14, 4
    cpu_losses, cpu_model, _ = train("cpu", optimizer_name, steps)
    losses, model, counts = train(TPU, optimizer_name, steps, count_after=warm_up)

    # Each step: the batch's two uploads, no host read, no compile; its three graphs join one
    # pending graph (with autograd's seed for the backward, a fill), and the previous step's
    # pending graph runs as one executable.
    # With fused=True, torch.optim runs the update outside the compiled graphs: its kernel
    # replays as a graph too, but in Strict the step counters' increment before it reads the
    # pending graph and runs on its own.
    strict = torch_tpu.get_eager_mode() == "strict"
    expected = {
        "executions": 2 if optimizer_name == "adamw_fused" and strict else 1,
        "uploads": 2,
        "downloads": 0,
        "host_syncs": 0,
        "compiles": 0,
        "joined_graphs": 3,
    }
    # The first counted step has nothing pending before it (the warm-up synchronized).
    assert counts[0]["executions"] <= expected["executions"]
    assert all(count == expected for count in counts[1:]), counts

    torch.testing.assert_close(
        torch.stack(losses).cpu(), torch.stack(cpu_losses).detach(), rtol=1e-4, atol=1e-5
    )
    for got, want in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)


def test_graphs_run_one_by_one_when_joining_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_losses, _, _ = train("cpu", "adamw", 8)
    monkeypatch.setenv("TORCH_TPU_JOIN_GRAPHS", "0")
    losses, _, counts = train(TPU, "adamw", 8, count_after=4)
    # The forward, backward and optimizer graphs, and the backward's seed (a fill) on its own.
    assert all(count["joined_graphs"] == 0 for count in counts)
    assert all(count["executions"] == 4 for count in counts), counts
    torch.testing.assert_close(
        torch.stack(losses).cpu(), torch.stack(cpu_losses).detach(), rtol=1e-4, atol=1e-5
    )


def test_a_read_between_steps_runs_the_pending_step_first() -> None:
    """A loss read, a parameter read, an eager op on a parameter and a state_dict copy between
    steps each see the step before them, as they would if every graph ran at once."""
    torch.manual_seed(0)
    cpu = nn.Linear(4, 2)
    model = nn.Linear(4, 2).to(TPU)
    model.load_state_dict(cpu.state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (cpu, model)]
    x = torch.randn(3, 4)

    def make_step(
        m: nn.Module, opt: torch.optim.Optimizer
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        def step(inp: torch.Tensor) -> torch.Tensor:
            opt.zero_grad()
            loss = m(inp).square().mean()
            loss.backward()
            opt.step()
            return loss

        return step

    cpu_step = make_step(cpu, optimizers[0])
    tpu_step = torch.compile(make_step(model, optimizers[1]), backend="tpu")
    for _ in range(4):
        want_loss = cpu_step(x)
        got_loss = tpu_step(x.to(TPU))
        assert got_loss.item() == pytest.approx(want_loss.item(), rel=1e-5)
        torch.testing.assert_close(model.weight.detach().cpu(), cpu.weight.detach())
        torch.testing.assert_close((model.bias * 2).detach().cpu(), (cpu.bias * 2).detach())
        state = {k: v.cpu() for k, v in model.state_dict().items()}
        torch.testing.assert_close(state["weight"], cpu.weight.detach())


def test_a_step_after_fills_of_several_lengths_stays_exact() -> None:
    """Fills of 3, 5 and 6 floats start the 8-element size bucket: later fills of a length up
    to 8 run at the bucket's length (see size_buckets.h). The backward's seed, a 1-element fill,
    joins the pending step at its exact size instead, and the step stays right."""
    for length in (3, 5, 6):
        torch.testing.assert_close(torch.ones(length, device=TPU).cpu(), torch.ones(length))
    cpu_losses, cpu_model, _ = train("cpu", "sgd", 6)
    losses, model, counts = train(TPU, "sgd", 6, count_after=3)
    assert all(count["executions"] == 1 for count in counts[1:]), counts
    torch.testing.assert_close(
        torch.stack(losses).cpu(), torch.stack(cpu_losses).detach(), rtol=1e-4, atol=1e-5
    )
    for got, want in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", ["index_select", "take"])
def test_joined_graphs_name_the_op_whose_index_check_failed(bad: str) -> None:
    """Two compiled graphs with index checks join one pending graph; an index out of range in
    either is reported at the next sync naming that graph's op, not the other's."""
    pick = torch.compile(lambda x, i: x.index_select(0, i) * 2, backend="tpu")
    take = torch.compile(lambda x, i: torch.take(x, i) + 1, backend="tpu")
    x = torch.arange(10.0, device=TPU)
    fine = torch.tensor([1, 2], device=TPU)
    out_of_range = torch.tensor([1, 12], device=TPU)
    for _ in range(2):  # recorded, then replayed
        torch.testing.assert_close(pick(x, fine).cpu(), torch.tensor([2.0, 4.0]))
        torch.testing.assert_close(take(x, fine).cpu(), torch.tensor([2.0, 3.0]))
    before = torch_tpu.metrics()["joined_graphs"]
    picked = pick(x, out_of_range if bad == "index_select" else fine)
    taken = take(x, out_of_range if bad == "take" else fine)
    assert torch_tpu.metrics()["joined_graphs"] == before + 2
    with pytest.raises(IndexError, match=f"aten::{bad}"):
        (picked.sum() + taken.sum()).item()
    # The next calls are fine again.
    torch.testing.assert_close((pick(x, fine) + take(x, fine)).cpu(), torch.tensor([4.0, 7.0]))
