"""torch.segment_reduce on tpu against CPU: every reduction, lengths and offsets, an inner axis,
lengths that do not cover the axis (unsafe), the initial value, and CPU's gradient rules for
ties and zeros."""

from __future__ import annotations

import pytest
import torch
from conftest import TPU, assert_grads_close_to_cpu, assert_same

REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


def segment_reduce(data: torch.Tensor, reduce: str, **kwargs: object) -> torch.Tensor:
    moved = {k: v.to(data.device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    return torch.segment_reduce(data, reduce, **moved)  # type: ignore[arg-type]


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 2.0])
def test_lengths_along_the_first_axis(reduce: str, initial: float | None) -> None:
    torch.manual_seed(0)
    data = torch.randn(10, 3, requires_grad=True)
    lengths = torch.tensor([1, 2, 0, 7])  # an empty segment: identity, initial, or NaN for mean
    assert_same(
        segment_reduce(data.detach().to(TPU), reduce, lengths=lengths, initial=initial),
        segment_reduce(data.detach(), reduce, lengths=lengths, initial=initial),
    )
    if initial is not None:  # CPU's backward needs a finite output for every segment
        assert_grads_close_to_cpu(
            lambda x: segment_reduce(x, reduce, lengths=lengths, initial=initial), data
        )


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_offsets_on_an_inner_axis_with_per_row_lengths(reduce: str) -> None:
    torch.manual_seed(1)
    data = torch.randn(3, 5, 2, requires_grad=True)
    lengths = torch.tensor([[2, 0, 3], [0, 1, 4], [5, 0, 0]])
    offsets = torch.cat([torch.zeros(3, 1, dtype=torch.long), lengths.cumsum(1)], 1)
    assert_grads_close_to_cpu(
        lambda x: segment_reduce(x, reduce, offsets=offsets, axis=1, initial=1.0), data
    )


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_unsafe_lengths_short_of_the_axis_leave_the_rest_out(reduce: str) -> None:
    torch.manual_seed(2)
    data = torch.randn(10, 2, 2, requires_grad=True)
    lengths = torch.tensor([1, 2, 0, 6, 0])  # sums to 9: the last row belongs to no segment
    assert_grads_close_to_cpu(
        lambda x: segment_reduce(x, reduce, lengths=lengths, unsafe=True, initial=2.0), data
    )


@pytest.mark.parametrize("reduce", ["max", "min", "prod"])
def test_ties_and_zeros_get_cpu_gradients(reduce: str) -> None:
    # Tied maxima share a positive gradient (a negative one is not divided, as on CPU); a zero's
    # product gradient is the product of the others, two zeros give each other zero.
    data = torch.tensor([3.0, 3.0, 1.0, 0.0, 0.0, 2.0, 0.0, 5.0, 1.0], requires_grad=True)
    lengths = torch.tensor([3, 3, 3])
    assert_grads_close_to_cpu(
        lambda x: segment_reduce(x, reduce, lengths=lengths, initial=1.0), data
    )


def test_bad_segmentations_raise_like_cpu() -> None:
    data = torch.randn(5, device=TPU)
    with pytest.raises(RuntimeError, match="sum to data.size"):
        segment_reduce(data, "sum", lengths=torch.tensor([1, 1]))
    with pytest.raises(RuntimeError, match="negative"):
        segment_reduce(data, "sum", lengths=torch.tensor([-1, 6]))
    with pytest.raises(RuntimeError, match="reduce argument must be"):
        segment_reduce(data, "median", lengths=torch.tensor([5]))
    with pytest.raises(RuntimeError, match="last dimension of lengths"):
        segment_reduce(data, "sum", lengths=torch.tensor([[5]]))
