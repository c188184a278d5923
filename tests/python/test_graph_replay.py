"""A compiled graph's later calls replay its recorded executable (_C._GraphReplay): one
execution per call, no op dispatched again, and everything a call reads, draws or writes is
that call's own, as when each call is recorded."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._dynamo
from conftest import TPU
from torch import nn

import torch_tpu
from torch_tpu import _C


def chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for _ in range(25):  # 100 ops
        x = torch.tanh(x @ w) * 0.5 + x
    return x


def test_a_100_op_graph_runs_as_one_execution_per_call() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.1
    compiled = torch.compile(chain, backend="tpu")
    xt, wt = x.to(TPU), w.to(TPU)
    compiled(xt, wt)
    inputs = [xt + i for i in range(5)]
    torch.tpu.synchronize()
    before = torch_tpu.metrics()
    outputs = [compiled(a, wt) for a in inputs]
    torch.tpu.synchronize()  # the last call waits, pending, for what comes next
    after = torch_tpu.metrics()
    # Each call: one execution of the 100-op graph and one cache lookup, no per-op lookups.
    assert after["executions"] - before["executions"] == 5
    assert after["cache_hits"] - before["cache_hits"] == 5
    assert after["fused_ops"] - before["fused_ops"] == 500
    assert after["compiles"] == before["compiles"]
    for i, got in enumerate(outputs):
        torch.testing.assert_close(got.cpu(), chain(x + i, w), rtol=1e-4, atol=1e-4)


def test_replay_counts() -> None:
    replay = _C._GraphReplay(lambda a, b: (a * b + 1.0,))
    a, b = torch.ones(3, device=TPU), torch.full((3,), 2.0, device=TPU)
    for k in range(3):
        (out,) = replay(a, b + k)
        torch.testing.assert_close(out.cpu(), torch.full((3,), 3.0 + k))
    assert replay.replays == 2


def test_inputs_mutated_in_the_graph_are_written_on_every_call() -> None:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6))

    cpu, tpu = make(), make().to(TPU)
    compiled = torch.compile(tpu, backend="tpu")
    for step in range(4):
        x = torch.randn(10, 6) + step
        torch.testing.assert_close(compiled(x.to(TPU)).cpu(), cpu(x), rtol=1e-4, atol=1e-4)
    bn_cpu, bn_tpu = cpu[1], tpu[1]
    assert isinstance(bn_cpu, nn.BatchNorm1d) and isinstance(bn_tpu, nn.BatchNorm1d)
    assert bn_tpu.running_mean is not None and bn_cpu.running_mean is not None
    torch.testing.assert_close(bn_tpu.running_mean.cpu(), bn_cpu.running_mean)
    assert int(bn_tpu.num_batches_tracked.cpu()) == 4  # type: ignore[union-attr]


def test_randomness_is_drawn_afresh_on_every_replayed_call() -> None:
    dropout = torch.compile(lambda x: torch.nn.functional.dropout(x, 0.5), backend="tpu")
    x = torch.ones(256, device=TPU)
    torch.manual_seed(7)
    first = [dropout(x).cpu() for _ in range(3)]
    assert not torch.equal(first[1], first[2])
    torch.manual_seed(7)
    again = [dropout(x).cpu() for _ in range(3)]
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b)


def test_outputs_that_alias_inputs_or_each_other() -> None:
    def views(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z = (y * 2).view(-1)
        return x.t(), z[2:], z, y

    compiled = torch.compile(views, backend="tpu")
    for k in range(3):
        x, y = torch.randn(3, 4) + k, torch.randn(2, 3)
        xt, yt = x.to(TPU), y.to(TPU)
        got = compiled(xt, yt)
        for g, e in zip(got, views(x, y), strict=True):
            torch.testing.assert_close(g.cpu(), e)
        assert got[0].untyped_storage().data_ptr() == xt.untyped_storage().data_ptr()
        assert got[1].untyped_storage().data_ptr() == got[2].untyped_storage().data_ptr()
        assert got[1].storage_offset() == 2
        assert (
            got[3] is yt or got[3].untyped_storage().data_ptr() == yt.untyped_storage().data_ptr()
        )


def run_each(fn: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Any]:
    compiled = torch.compile(fn, backend="tpu", dynamic=False)
    return [compiled(*args) for args in calls]


def test_new_layouts_record_again() -> None:
    torch._dynamo.reset()
    base = torch.arange(24.0).reshape(4, 6)
    layouts = [base, base.t(), base[1:], base[:, ::2], base]
    got = run_each(lambda x: (x.exp() - 1).sum(0), [(t.to(TPU),) for t in layouts])
    for g, t in zip(got, layouts, strict=True):
        torch.testing.assert_close(g.cpu(), (t.exp() - 1).sum(0))


def test_a_replay_is_keyed_on_values_sharing_and_dtype() -> None:
    """Python numbers are constants of the recording, arguments sharing a storage are one
    buffer of it, and the default dtype shapes its factories: each difference records anew,
    and each signature seen before replays what it recorded."""
    replay = _C._GraphReplay(lambda a, b, k: (a * (k % 7) + b, torch.ones(2, device=a.device)))
    x, y = torch.arange(4.0, device=TPU), torch.full((4,), 3.0, device=TPU)
    big = 2**70
    for k in (2, 2.5, -0.0, 0.0, True, big, big + 1, 2, 2.5):
        out, ones = replay(x, y, k)
        torch.testing.assert_close(out.cpu(), torch.arange(4.0) * float(k % 7) + 3.0)
        assert ones.dtype == torch.float32
    assert replay.replays == 2  # the second 2 and 2.5
    doubled = x * 2
    out, _ = replay(doubled, doubled, 3)
    out2, _ = replay(x, doubled, 3)
    torch.testing.assert_close(out.cpu(), torch.arange(4.0) * 8)
    torch.testing.assert_close(out2.cpu(), torch.arange(4.0) * 5)
    with default_dtype(torch.float64):
        _, ones = replay(x, y, 2)
    assert ones.dtype == torch.float64
    assert replay.replays == 2


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def test_graphs_reading_cpu_scalars_or_swapping_buffers_stay_correct() -> None:
    # A CPU scalar argument may be read on the host; a copy_ into an argument may share a
    # buffer outside the fused graph: such calls are recorded every time, never replayed.
    scale = torch.compile(lambda x, s: x * s, backend="tpu")
    x = torch.arange(4.0, device=TPU)
    for s in (1.0, 2.0, 3.0):
        torch.testing.assert_close(scale(x, torch.tensor(s)).cpu(), torch.arange(4.0) * s)

    def assign(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.copy_(b)
        return a + 1

    compiled = torch.compile(assign, backend="tpu")
    a = torch.zeros(5, device=TPU)
    for k in range(3):
        out = compiled(a, torch.full((5,), float(k), device=TPU))
        torch.testing.assert_close(a.cpu(), torch.full((5,), float(k)))
        torch.testing.assert_close(out.cpu(), torch.full((5,), float(k + 1)))


def test_a_compiled_adamw_step_keeps_its_state_on_tpu_and_replays() -> None:
    # Dynamo traces optimizer steps as capturable; the step counters must then be device
    # tensors (as on CUDA), or the optimizer's graph takes CPU tensors and is recorded op by
    # op on every call.
    def make() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step_of(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> Any:
        def step() -> torch.Tensor:
            optimizer.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            optimizer.step()
            return loss

        return step

    torch._dynamo.reset()
    x = torch.randn(5, 8)
    cpu_model, cpu_optimizer = make()
    cpu_step = step_of(cpu_model, cpu_optimizer, x)
    tpu_model, tpu_optimizer = make()
    tpu_model.to(TPU)
    tpu_step = torch.compile(step_of(tpu_model, tpu_optimizer, x.to(TPU)), backend="tpu")
    for _ in range(2):  # record
        torch.testing.assert_close(tpu_step().cpu(), cpu_step(), rtol=1e-4, atol=1e-5)
    torch.tpu.synchronize()
    before = torch_tpu.metrics()
    for _ in range(3):
        torch.testing.assert_close(tpu_step().cpu(), cpu_step(), rtol=1e-4, atol=1e-5)
    after = torch_tpu.metrics()
    # Per step: the forward, backward and optimizer graphs replayed (a lookup each), plus the
    # loss's read-back; not the optimizer's ~100 ops dispatched again.
    assert after["cache_hits"] - before["cache_hits"] <= 3 * 6
    assert all(state["step"].device.type == "tpu" for state in tpu_optimizer.state.values())
    for got, want in zip(tpu_model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


def test_why_a_graph_is_not_replayed_is_reported() -> None:
    def read_back(a: torch.Tensor) -> tuple[torch.Tensor]:
        return (a * float(a.sum()),)  # a host read inside the graph

    replay = _C._GraphReplay(read_back)
    a = torch.ones(3, device=TPU)
    for _ in range(2):
        (out,) = replay(a)
        torch.testing.assert_close(out.cpu(), torch.full((3,), 3.0))
    assert replay.replays == 0
    assert replay.unreplayable_reasons == ["the graph reads a value back to the host"]

    scaled = _C._GraphReplay(lambda a, s: (a * s,))
    for _ in range(2):
        (out,) = scaled(a, torch.tensor(2.0))
        torch.testing.assert_close(out.cpu(), torch.full((3,), 2.0))
    assert scaled.replays == 0
    assert scaled.unreplayable_reasons == [
        "argument 1 is a cpu tensor (an optimizer's step counter on the CPU, say)"
    ]
