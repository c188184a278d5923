"""torch's _foreach_* ops (multi-tensor optimizer updates, gradient clipping) on tpu: each call
runs as one executable in Strict mode, not one per tensor, with CPU's values. (DeferAndFuse fuses
them with the ops around them instead; these counts are Strict's, so the tests pin that mode.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

import torch_tpu

TPU = torch.device("tpu")

CALLS: dict[str, Callable[[list[torch.Tensor], list[torch.Tensor]], object]] = {
    "add_scalar": lambda xs, ys: torch._foreach_add_(xs, 0.5),
    "add_list_alpha": lambda xs, ys: torch._foreach_add_(xs, ys, alpha=-2.0),
    "add_scalar_list": lambda xs, ys: torch._foreach_add_(xs, [float(i) for i in range(len(xs))]),
    "mul_tensor": lambda xs, ys: torch._foreach_mul_(xs, ys[0][0]),
    "addcmul": lambda xs, ys: torch._foreach_addcmul_(xs, ys, ys, value=0.1),
    "lerp": lambda xs, ys: torch._foreach_lerp_(xs, ys, 0.3),
    "norm": lambda xs, ys: torch._foreach_norm(xs),
    "sqrt_of_abs": lambda xs, ys: torch._foreach_sqrt(torch._foreach_abs(xs)),
    "maximum": lambda xs, ys: torch._foreach_maximum(xs, ys),
    "copy_then_zero": lambda xs, ys: (torch._foreach_copy_(xs, ys), torch._foreach_zero_(ys)),
}


def tensors(device: torch.device | str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    shapes = [(3,), (4, 5), (2, 3, 2), (7,), (1,), (6, 2)]
    xs = [torch.randn(s, generator=g).to(device) for s in shapes]
    ys = [torch.randn(s, generator=g).to(device) for s in shapes]
    return xs, ys


@pytest.fixture(autouse=True)
def strict_mode() -> Iterator[None]:
    with torch_tpu.eager_mode("strict"):
        yield


@pytest.mark.parametrize("name", list(CALLS))
def test_each_call_is_one_execution_with_cpu_values(name: str) -> None:
    xs, ys = tensors("cpu")
    expected = CALLS[name](xs, ys)
    txs, tys = tensors(TPU)
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    got = CALLS[name](txs, tys)
    torch.tpu.synchronize()
    executions = torch_tpu.metrics()["executions"]
    # One per foreach call, however many tensors.
    assert executions == (2 if name in ("sqrt_of_abs", "copy_then_zero") else 1), executions
    flat = torch.utils._pytree.tree_leaves
    for g, e in zip(flat((got, txs, tys)), flat((expected, xs, ys)), strict=True):
        torch.testing.assert_close(g.cpu(), e)


def test_foreach_adamw_with_clipping_trains_as_on_cpu() -> None:
    torch.manual_seed(0)
    reference = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    model.load_state_dict(reference.state_dict())
    model.to(TPU)
    optimizers = [
        torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True) for m in (reference, model)
    ]
    x = torch.randn(8, 16)
    for step in range(3):
        for m, optimizer, device in zip((reference, model), optimizers, ("cpu", TPU), strict=True):
            if device == TPU:
                torch.tpu.synchronize()
                torch_tpu.reset_metrics()
            optimizer.zero_grad()
            m(x.to(device)).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            optimizer.step()
        torch.tpu.synchronize()
        metrics = torch_tpu.metrics()
        if step > 0:
            assert metrics["compiles"] == 0, metrics  # the same executables every step
        # 8 parameters: per-tensor foreach ops alone would be over 100 executions a step.
        assert metrics["executions"] < 60, metrics
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=1e-5, rtol=1e-5)
