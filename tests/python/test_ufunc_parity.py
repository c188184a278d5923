"""What PyTorch's test_unary_ufuncs.py and test_binary_ufuncs.py found tpu answering differently
from CPU (issue 47, point 3): CPU is the oracle. Each case runs in Strict and DeferAndFuse mode.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from conftest import TPU

import torch_tpu

INF, NAN = math.inf, math.nan


@pytest.fixture(params=["strict", "defer_and_fuse"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.eager_mode(request.param):
        yield request.param


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_exp_at_infinite_real_parts(mode: str, dtype: torch.dtype) -> None:
    # exp(+-inf + i(inf or NaN)): C99 (CPU) gives inf + iNaN and 0 + 0i; XLA's e^a (cos b +
    # i sin b) gave NaN + iNaN.
    parts = [(INF, 0.0), (0.0, INF), (INF, INF), (INF, NAN), (NAN, INF), (-INF, INF)]
    parts += [(-INF, NAN), (-INF, 0.0), (INF, 1.0), (-INF, 1.0), (0.5, -2.0), (-INF, -INF)]
    x = torch.tensor([complex(a, b) for a, b in parts], dtype=dtype)
    assert_same(torch.exp(x.to(TPU)), torch.exp(x))
    assert_same(x.to(TPU).exp_(), x.clone().exp_())


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("op", ["atan", "asinh"])
def test_complex_atan_asinh(mode: str, op: str, dtype: torch.dtype) -> None:
    # They refused complex operands; small, unit-sized, large and negative-real values.
    fn = getattr(torch, op)
    x = torch.randn(64, dtype=dtype) * torch.logspace(-4, 6, 64)
    x = torch.cat([x, torch.tensor([0.5 + 2j, -3 - 0.25j, 1e-7j, -2e9 + 1j, 2j, -1j + 1e-3])])
    x = x.to(dtype)
    tol = (
        {"rtol": 2e-6, "atol": 1e-6} if dtype == torch.complex64 else {"rtol": 1e-12, "atol": 1e-12}
    )
    torch.testing.assert_close(fn(x.to(TPU)).cpu(), fn(x), **tol)


def test_xlogy_of_bool_x_keeps_nan(mode: str) -> None:
    # x * log(y) with a bool x: a NaN y gave 0 (the product became a select).
    y = torch.tensor([-1.0, 0.0, 1.0, 2.0, INF, -INF, NAN])
    for x in (torch.zeros(7, dtype=torch.bool), torch.tensor([True, False] * 3 + [False])):
        assert_same(torch.xlogy(x.to(TPU), y.to(TPU)), torch.xlogy(x, y))
        assert_same(torch.special.xlog1py(x.to(TPU), y.to(TPU)), torch.special.xlog1py(x, y))


@pytest.mark.parametrize("out_dtype", [torch.int16, torch.int64, torch.float16])
def test_integer_remainder_into_out_of_another_dtype(mode: str, out_dtype: torch.dtype) -> None:
    # An out= of another dtype asked CPU for its refusal on zero-filled stand-ins, and CPU's
    # integer remainder by zero raised ZeroDivisionError for a call with no zero divisor.
    a = torch.tensor([3, -4, 5, 7], dtype=torch.int16)
    b = torch.tensor([2, 3, -7, 7], dtype=torch.int32)
    for op in (torch.remainder, torch.fmod):
        want = op(a, b, out=torch.empty(4, dtype=out_dtype))
        got = op(a.to(TPU), b.to(TPU), out=torch.empty(4, dtype=out_dtype, device=TPU))
        assert_same(got, want)


def test_real_results_into_complex_out(mode: str) -> None:
    # hypot and shifts have no complex operands, but a complex out= takes their real result.
    x, y = torch.tensor([3.0, -1.5, 0.0]), torch.tensor([4.0, 2.0, -0.5])
    i, j = torch.tensor([1, 2, 3], dtype=torch.int16), torch.tensor([3, 1, 0], dtype=torch.int32)
    for op, a, b in ((torch.hypot, x, y), (torch.bitwise_left_shift, i, j)):
        want = op(a, b, out=torch.empty(3, dtype=torch.complex64))
        got = op(a.to(TPU), b.to(TPU), out=torch.empty(3, dtype=torch.complex64, device=TPU))
        assert_same(got, want)


@pytest.mark.parametrize("op", ["add", "true_divide", "rsub", "mul"])
def test_python_number_and_cpu_scalar_tensor_key_apart(mode: str, op: str) -> None:
    # int64 + 1.5 is float32 and int64 + tensor(2.5, dtype=float64) float64: both reach the op
    # as a 0-d CPU double, and the second reused the first's executable (float32).
    fn = getattr(torch, op)
    x = torch.tensor([1, 2, 3, 4, 7])
    for other in (1.5, torch.tensor(2.5), torch.tensor(2.5, dtype=torch.float64), 3):
        got, want = fn(x.to(TPU), other), fn(x, other)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)  # XLA may divide by a reciprocal: 1 ulp


def test_python_float_with_complex128_stays_float64(mode: str) -> None:
    # A Python float met a complex128 tensor as a float32 constant (only float64 tensors kept
    # float64 scalars): pi * z, as _refs.sinc computes, was 1e-7 off in relative terms.
    z = torch.randn(256, dtype=torch.complex128) * 10
    torch.testing.assert_close((z.to(TPU) * math.pi).cpu(), z * math.pi, rtol=1e-15, atol=0)
    torch.testing.assert_close((z.to(TPU) + 0.1).cpu(), z + 0.1, rtol=1e-15, atol=0)
