"""Checks from PyTorch's own test_indexing.py that tpu once failed, kept here: each call is
made on CPU and on tpu, and tpu must give CPU's result or CPU's exception and message."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

TPU = torch.device("tpu")


def same_error(call: Callable[[torch.device], object]) -> None:
    """call(device) raises on CPU; on tpu it must raise the same class with the same message,
    before any sync point."""
    with pytest.raises(Exception) as on_cpu:
        call(torch.device("cpu"))
    with pytest.raises(type(on_cpu.value)) as on_tpu:
        call(TPU)
    assert str(on_tpu.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]


def test_index_tensors_that_do_not_broadcast() -> None:
    same_error(lambda d: torch.zeros(5, 5, device=d)[[0, 1], [0, 1, 2]])

    def assign(d: torch.device) -> None:
        torch.zeros(5, 5, device=d)[[0, 1], [0, 1, 2]] = 0

    same_error(assign)


@pytest.mark.parametrize("values", [[], [1, 2, 3]])
def test_values_that_do_not_fit_the_indexing_result(values: list[int]) -> None:
    def assign(d: torch.device) -> None:
        a = torch.arange(4, device=d)
        a[a > -1] = torch.tensor(values, dtype=torch.int64).to(d)

    same_error(assign)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_values_of_another_dtype_are_refused(accumulate: bool) -> None:
    def assign(d: torch.device) -> None:
        a = torch.ones(5, 2, dtype=torch.float64, device=d)
        values = torch.zeros(5, dtype=torch.int32, device=d)
        a.index_put_((torch.arange(5, device=d), torch.tensor([1], device=d)), values, accumulate)

    same_error(assign)

    def subscript(d: torch.device) -> None:
        torch.ones(5, 2, dtype=torch.float64, device=d)[:, [1]] = torch.zeros(5, 1, device=d).int()

    same_error(subscript)


def test_indexing_an_empty_dimension() -> None:
    same_error(lambda d: torch.empty(10, 0, device=d)[:, [0, 1]])
    assert torch.empty(10, 0, device=TPU)[[1, 2]].shape == (2, 0)


def test_host_index_tensors_are_checked_at_once() -> None:
    for bad in (10, -11):
        same_error(lambda d, bad=bad: torch.zeros(10, device=d)[torch.tensor([0, bad])])
    x = torch.arange(10.0)
    index = torch.tensor([3, -1])
    torch.testing.assert_close(x.to(TPU)[index].cpu(), x[index])


def test_uint8_masks_warn_once_per_use_as_on_cpu() -> None:
    def warnings_of(device: torch.device) -> int:
        y = torch.ones(10, 10, device=device)
        mask = torch.zeros(10, dtype=torch.uint8, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y.index_put_((mask,), y[mask], accumulate=True)
            y.index_put_((mask.logical_not().to(torch.uint8),), y[:, :1] + 1, accumulate=True)
        assert torch.equal(y.cpu(), torch.full((10, 10), 3.0))
        return sum("torch.uint8 is now deprecated" in str(w.message) for w in caught)

    assert warnings_of(TPU) == warnings_of(torch.device("cpu")) == 3

    def fill_with_a_uint8_mask(device: torch.device) -> None:
        y = torch.ones(3, device=device)
        y.index_put_((torch.ones(3, dtype=torch.uint8, device=device),), torch.tensor(2.0))

    same_error(fill_with_a_uint8_mask)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_advanced_indexing(dtype: torch.dtype) -> None:
    src = torch.randn(3, 2, 4, dtype=dtype)
    values = torch.randn(3, 2, 4, dtype=dtype)
    index = torch.tensor([0, 2, 0])
    mask = src.real > 0
    expected = src.clone().index_put_((index,), values, accumulate=True)
    got = src.to(TPU).index_put_((index.to(TPU),), values.to(TPU), accumulate=True)
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(src.to(TPU)[index.to(TPU)].cpu(), src[index])
    torch.testing.assert_close(src.to(TPU)[mask.to(TPU)].cpu(), src[mask])
