"""Calls where tpu once answered differently from CPU or refused (issue 47): CPU is the oracle.

Each case runs in Strict mode and in DeferAndFuse mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from conftest import TPU

import torch_tpu

UNSIGNED = [torch.uint8, torch.uint16, torch.uint32, torch.uint64]


@pytest.fixture(params=["strict", "defer_and_fuse"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.eager_mode(request.param):
        yield request.param


def outcome(fn: Callable[[str], torch.Tensor], device: str) -> torch.Tensor | str:
    """`fn`'s result on `device` (on the CPU), or its exception's class and message."""
    try:
        return fn(device).cpu()
    except Exception as error:  # noqa: BLE001 - the exception is what is compared
        return f"{type(error).__name__}: {error}"


def assert_matches_cpu(fn: Callable[[str], torch.Tensor]) -> None:
    expected, actual = outcome(fn, "cpu"), outcome(fn, TPU)
    if isinstance(expected, str) or isinstance(actual, str):
        assert actual == expected
        return
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("dtype", UNSIGNED)
@pytest.mark.parametrize("op", ["abs", "sign", "sgn", "softsign", "gcd", "abs_", "sign_"])
def test_unsigned_abs_sign_gcd(mode: str, dtype: torch.dtype, op: str) -> None:
    # stablehlo's abs and sign take no unsigned operands; CPU refuses uint16..uint64 itself.
    x = torch.tensor([0, 3, 200, 7, 255]).to(dtype)
    y = torch.tensor([0, 6, 50, 14, 5]).to(dtype)
    calls: dict[str, Callable[[str], torch.Tensor]] = {
        "abs": lambda d: torch.abs(x.to(d)),
        "sign": lambda d: torch.sign(x.to(d)),
        "sgn": lambda d: torch.sgn(x.to(d)),
        "softsign": lambda d: F.softsign(x.to(d)),
        "gcd": lambda d: torch.gcd(x.to(d), y.to(d)),
        "abs_": lambda d: x.to(d).abs_(),
        "sign_": lambda d: x.to(d).sign_(),
    }
    assert_matches_cpu(calls[op])


@pytest.mark.parametrize(
    ("scalar", "dtype"),
    [(5, torch.float32), (-5, torch.float32), (2.5, torch.float64), (10, torch.int64)],
)
def test_remainder_scalar_tensor(mode: str, scalar: float, dtype: torch.dtype) -> None:
    other = torch.tensor([1.5, -2.0, 3.0, -4.5, 7.0]).to(dtype)
    other[other == 0] = 1
    assert_matches_cpu(lambda d: torch.remainder(scalar, other.to(d)))

    def into_out(d: str) -> torch.Tensor:
        out = torch.empty(0, dtype=torch.result_type(scalar, other), device=d)
        torch.remainder(scalar, other.to(d), out=out)
        return out

    assert_matches_cpu(into_out)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("mask_shape", [(2, 3), (3,), ()])
def test_masked_select_out(mode: str, out_dtype: torch.dtype, mask_shape: tuple[int, ...]) -> None:
    x = torch.arange(6.0).reshape(2, 3)
    mask = (torch.arange(6).reshape(2, 3) % 2 == 0)[(0,) * (2 - len(mask_shape))]

    def select(d: str) -> torch.Tensor:
        out = torch.empty(0, dtype=out_dtype, device=d)
        result = torch.masked_select(x.to(d), mask.to(d), out=out)
        assert result is out
        return out

    assert_matches_cpu(select)


@pytest.mark.parametrize(
    "perm",
    [(0, 2, 1), (2, 0, 1), (1, 2, 0), (2, 1, 0), (0, 1, 2)],
    ids=lambda p: "".join(map(str, p)),
)
@pytest.mark.parametrize("out_numel", [0, 3])
def test_resized_out_takes_inputs_layout(mode: str, perm: tuple[int, ...], out_numel: int) -> None:
    x = torch.randn(2, 3, 4).permute(perm)
    for fn in (lambda a, out: torch.add(a, 1, out=out), lambda a, out: torch.abs(a, out=out)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resizing an out= with elements is deprecated
            expected = fn(x, torch.empty(out_numel))
            actual = fn(x.to(TPU), torch.empty(out_numel, device=TPU))
        assert actual.stride() == expected.stride()
        assert torch.equal(actual.cpu(), expected)
    # A broadcast of a channels-last tensor with a contiguous one: TensorIterator's order.
    a = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    b = torch.randn(3, 1, 1)
    expected = torch.mul(a, b, out=torch.empty(0))
    actual = torch.mul(a.to(TPU), b.to(TPU), out=torch.empty(0, device=TPU))
    assert actual.stride() == expected.stride()
    assert torch.equal(actual.cpu(), expected)
