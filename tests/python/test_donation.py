"""An in-place result takes over the buffer it replaces where nothing but its storage and
executions in flight hold it (donation), in every mode: a few rows written into a large tensor
cost no copy of the tensor, and every alias, copy and earlier read still sees what CPU would
show."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torch_tpu

MB = 1 << 20
MODES = ["strict", "defer_and_fuse"]


@pytest.mark.parametrize("mode", MODES)
def test_rows_written_into_a_large_tensor_allocate_no_second_copy(mode: str) -> None:
    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        big = torch.zeros(4 * MB, device="tpu")  # 16 MB
        rows = torch.tensor([3, 9], device="tpu")
        big[rows] = 1.0
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        before = torch.tpu.memory_allocated()
        for _ in range(3):
            big[rows] = big[rows] + 1.0  # read and written in one graph
            torch.tpu.synchronize()
        grown = torch.tpu.max_memory_allocated() - before
    assert grown < MB, f"the update allocated {grown} bytes: the 16 MB buffer was copied"
    expected = torch.zeros(4 * MB)
    expected[[3, 9]] = 4.0
    assert torch.equal(big.cpu(), expected)


@pytest.mark.parametrize("mode", MODES)
def test_in_place_writes_keep_every_alias_as_on_cpu(mode: str) -> None:
    def program(device: str) -> list[torch.Tensor]:
        a = torch.arange(6.0, device=device)
        b = torch.empty(6, device=device)
        b.copy_(a)  # on tpu the two storages may share one buffer
        view = a[2:4]
        before = a.clone()
        a.mul_(2)
        b.add_(1)
        view.add_(100)
        return [a, b, view, before]

    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        got = [t.cpu() for t in program("tpu")]
    for tpu_result, cpu_result in zip(got, program("cpu"), strict=True):
        assert torch.equal(tpu_result, cpu_result)


@pytest.mark.parametrize("mode", MODES)
def test_a_buffer_still_read_by_another_tensor_is_not_taken_over(mode: str) -> None:
    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        x = torch.ones(1000, device="tpu")
        torch.tpu.synchronize()
        y = torch.empty(1000, device="tpu")
        y.copy_(x)  # y may share x's buffer: x's value must survive y's update
        y.add_(5)
        torch.tpu.synchronize()
        assert torch.equal(x.cpu(), torch.ones(1000))
        assert torch.equal(y.cpu(), torch.full((1000,), 6.0))


def test_eager_in_place_writes_update_the_buffer_and_keep_earlier_reads() -> None:
    with torch_tpu.eager_mode("strict"):
        big = torch.arange(4.0 * MB, device="tpu")  # 16 MB
        rows = torch.tensor([3, 9], device="tpu")
        clone = big.clone()
        torch.tpu.synchronize()
        before = torch_tpu.metrics()["donated_buffers"]
        doubled = big * 2.0  # enqueued: still reading `big` when the writes below run
        big[rows] = -1.0
        big.index_put_((rows,), torch.tensor([7.0, 8.0], device="tpu"), accumulate=True)
        big.add_(1.0)
        clone.add_(2.0)  # may share big's first buffer: must not write into it
        torch.tpu.synchronize()
        donated = torch_tpu.metrics()["donated_buffers"] - before
    expected = torch.arange(4.0 * MB)
    assert torch.equal(doubled.cpu(), expected * 2.0)
    assert torch.equal(clone.cpu(), expected + 2.0)
    expected += 1.0
    expected[[3, 9]] = torch.tensor([7.0, 8.0])  # -1, accumulated 7 and 8, then + 1
    assert torch.equal(big.cpu(), expected)
    assert donated >= 3  # the three writes into `big` took over its buffer


def sgd_steps(
    device: str, compiled: bool, steps: int, keep: str
) -> tuple[nn.Module, list[torch.Tensor]]:
    """An MLP trained `steps` SGD steps. Before each step, `keep` = "product" enqueues a
    product of every parameter (a read still in flight when the step writes the parameter),
    "copy" takes a copy of it (which on tpu may share the parameter's buffer)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)).to(device)
    x, y = torch.randn(16, 64).to(device), torch.randn(16, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()

    run = torch.compile(step, backend="tpu") if compiled else step
    kept: list[torch.Tensor] = []
    for _ in range(steps):
        for p in model.parameters():
            if keep == "product":
                kept.append(p.detach() * 2.0)
            elif keep == "copy":
                kept.append(torch.empty_like(p).copy_(p.detach()))
        run()
    return model, kept


@pytest.mark.parametrize("keep", ["product", "copy"])
@pytest.mark.parametrize("mode", MODES)
def test_a_compiled_optimizer_step_updates_parameters_in_place_and_keeps_their_readers(
    mode: str, keep: str
) -> None:
    cpu_model, cpu_kept = sgd_steps("cpu", False, 4, keep)
    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        sgd_steps("tpu", True, 2, keep)  # recorded, then replayed
        torch.tpu.synchronize()
        before = torch_tpu.metrics()["donated_buffers"]
        model, kept = sgd_steps("tpu", True, 4, keep)
        torch.tpu.synchronize()
        donated = torch_tpu.metrics()["donated_buffers"] - before
    if keep == "product":
        # Reads in flight do not stop the update from writing the parameters' own buffers
        # (4 parameters, at least 3 replayed steps). Under DeferAndFuse the products join the
        # steps' graphs, and several steps run as one program, which takes the buffers over once.
        assert donated >= (4 if mode == "defer_and_fuse" else 4 * 3)
    for got, expected in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    # The products and copies hold the values from before each step.
    for got, expected in zip(kept, cpu_kept, strict=True):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)


def test_donation_can_be_turned_off_without_changing_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpu_model, _ = sgd_steps("cpu", False, 3, "product")
    monkeypatch.setenv("TORCH_TPU_DONATE", "0")
    before = torch_tpu.metrics()["donated_buffers"]
    model, _ = sgd_steps("tpu", True, 3, "product")
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["donated_buffers"] == before
    for got, expected in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
