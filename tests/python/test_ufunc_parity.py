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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("op", ["sinh", "cosh", "asinh", "acosh", "atanh"])
def test_real_hyperbolics_where_exp_or_square_overflows(
    mode: str, op: str, dtype: torch.dtype
) -> None:
    # sinh/cosh were e^|x| / 2 computed as e^|x| (inf from 88.7 in float32 where the result is
    # finite to 89.4, from 709.8 in float64); asinh/acosh squared x (inf past 1.8e19 in float32;
    # in float16 the threshold itself was inf, NaN for every large x); acosh(-49) in float16 was
    # log(0) = -inf instead of NaN; atanh near 0 lost digits through log((1 + x) / (1 - x)).
    fn = getattr(torch, op)
    big = torch.finfo(dtype).max
    values = [0.0, -0.0, 1e-6, -3e-4, 0.5, -0.99, 1.0, 1.5, 2.0, 20.0, -21.0, 88.9, 89.3, -89.3]
    values += [709.0, 1e5, 3e8, -4e19, big, -big, -49.0, INF, -INF, NAN]
    x = torch.tensor(values, dtype=torch.float64).clamp(-big, big).to(dtype)
    tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 2e-6, torch.float64: 1e-13}
    torch.testing.assert_close(
        fn(x.to(TPU)).cpu(), fn(x), rtol=tol[dtype], atol=1e-30, equal_nan=True
    )


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("op", ["sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh"])
def test_complex_hyperbolic_and_inverse_at_edges(mode: str, op: str, dtype: torch.dtype) -> None:
    # Large real parts (sinh/cosh were NaN: e^z overflowed, then inf times 0), points next to the
    # branch points +-1 and +-i (asinh's real part was 0 for 1e-20 + i, 1e-10 on CPU), infinities
    # (asin/acos/atan/atanh gave NaN where C99 gives pi/4 + i inf and the like), zeros' signs.
    fn = getattr(torch, op)
    parts = [(89.0, 1.0), (-89.5, 2.0), (100.0, 0.1), (1e4, 1e-3), (-200.0, 3.0), (20.5, -0.0)]
    parts += [(1e-20, 1.0), (1.0, 1e-20), (-1.0, 1e-12), (1e-5, -0.9), (0.0, -2.0), (-0.0, -2.0)]
    parts += [(1e-3, 1e-3), (0.5, 0.5), (1e9, 1.0), (-1e9, -1e9), (0.0, 0.0), (-0.0, -0.0)]
    parts += [(INF, INF), (INF, -INF), (-INF, INF), (INF, 0.0), (INF, 1.0), (-INF, -2.0)]
    parts += [(0.0, INF), (1.0, -INF), (-0.5, INF), (NAN, NAN)]
    x = torch.tensor([complex(a, b) for a, b in parts], dtype=dtype)
    # CPU's own complex128 acos is off in the 8th digit near 1 and at 1e9 + i (1.00000008e-10
    # for acos(1 + 1e-20i), whose real part is 1e-10).
    rtol = 3e-6 if dtype == torch.complex64 else 2e-7
    tol = {"rtol": rtol, "atol": 1e-30 if dtype == torch.complex64 else 1e-300}
    actual, expected = fn(x.to(TPU)).cpu(), fn(x)
    torch.testing.assert_close(actual.real, expected.real, equal_nan=True, **tol)
    torch.testing.assert_close(actual.imag, expected.imag, equal_nan=True, **tol)
    # Signs of zero parts aside (CPU's complex128 acos(0) is pi/2 + 0i, C99's pi/2 - 0i).
    for a, e in ((actual.real, expected.real), (actual.imag, expected.imag)):
        signed = e.isfinite() & (e != 0)
        assert torch.equal(a[signed].signbit(), e[signed].signbit())


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


def test_complex64_pow_is_as_close_to_exact_as_cpus() -> None:
    # PyTorch's test_scalar_support__refs_pow_*_complex64 compares tpu with CPU at 1.3e-6, but
    # z ** w = exp(w log z) of complex64 is ~5e-6 off the exact value on both, rounded apart;
    # what must hold is that tpu is as close to the complex128 result as CPU is.
    torch.manual_seed(0)
    base = torch.randn(20000, dtype=torch.complex64) * 5
    exponent = torch.tensor(8.511582374572754 + 8.863569259643555j, dtype=torch.complex64)
    exact = torch.pow(base.to(torch.complex128), exponent.to(torch.complex128))

    def error(result: torch.Tensor) -> float:
        return ((result.to(torch.complex128) - exact).abs() / exact.abs()).max().item()

    on_cpu = error(torch.pow(base, exponent))
    on_tpu = error(torch.pow(base.to(TPU), exponent.to(TPU)).cpu())
    assert on_tpu <= 1.5 * on_cpu, (on_tpu, on_cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_products_keep_python_scalars_in_float32(
    mode: str, dtype: torch.dtype
) -> None:
    # float16 x.mul(1e5) was x * inf (the scalar rounded to float16 first), x.div(1e5) zero; CPU
    # computes in float32 and rounds once (PyTorch's test_divmul_scalar).
    x = torch.tensor([100.0, 1e-5, 3.0, -2.5, 0.0], dtype=dtype)
    for fn in (
        lambda a: a.div(1e5),
        lambda a: a.mul(1e5),
        lambda a: 1e5 * a,
        lambda a: a * a,
        lambda a: a / 3,
        lambda a: torch.pow(a.abs(), 2.5),
        lambda a: torch.atan2(a, a * 2 + 1),
    ):
        assert_same(fn(x.to(TPU)), fn(x))


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [
        (torch.int64, -(2**63), 2**63 - 1),  # a range past 2^63 failed to compile
        (torch.int64, -(2**62), 2**62 + 5),
        (torch.int64, -(2**63), None),  # no upper bound: refused
        (torch.int8, -5, None),
        (torch.bool, 0, None),
        (torch.float16, 0, None),
        (torch.float32, 0, None),
        (torch.int16, -9, 9),
    ],
)
def test_random_integers_span_cpus_range(
    mode: str, dtype: torch.dtype, low: int, high: int | None
) -> None:
    # random_(from, to) draws from [from, to); without `to` up to the dtype's largest integer,
    # or 2^digits for a float type (CPU's bounds). PyTorch's make_tensor draws int64 over
    # nearly the whole range (test_div_rounding_modes failed in random_).
    cpu = torch.empty(100000, dtype=dtype).random_(low, high)
    tpu = torch.empty(100000, dtype=dtype, device=TPU).random_(low, high).cpu()
    lowest, highest = cpu.min().item(), cpu.max().item()
    if high is not None:
        bound = high - 1
    elif dtype.is_floating_point:
        bound = {torch.float16: 2**11, torch.float32: 2**24}[dtype]  # 2^digits
    else:
        bound = 1 if dtype == torch.bool else torch.iinfo(dtype).max
    assert low <= lowest and highest <= bound
    assert low <= tpu.min().item() and tpu.max().item() <= bound
    span = float(bound) - float(low)
    # Both ends of the range are reached alike (within 1% of its span).
    assert float(tpu.min().item()) - float(lowest) <= 0.01 * span + 1
    assert float(highest) - float(tpu.max().item()) <= 0.01 * span + 1


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.bool])
def test_integer_tensor_to_negative_integer_power_raises(mode: str, dtype: torch.dtype) -> None:
    # CPU refuses; tpu answered (the exponent is a runtime input, so the check runs per call).
    t = torch.tensor([2, 3], dtype=dtype)
    for exponent in (2, -1, -3):
        if exponent < 0:
            with pytest.raises(RuntimeError, match=r"^Integers to negative integer powers"):
                torch.pow(t, exponent)
            with pytest.raises(RuntimeError, match=r"^Integers to negative integer powers"):
                torch.pow(t.to(TPU), exponent)
        else:
            assert_same(torch.pow(t.to(TPU), exponent), torch.pow(t, exponent))
    assert_same(torch.pow(t.to(TPU), -1.5), torch.pow(t, -1.5))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_powers_use_every_exponent_bit(mode: str, dtype: torch.dtype) -> None:
    # The plugin's integer power read only the exponent's low bits: int64 2 ** 64 gave 1,
    # 190 ** 129 gave 190, uint8 3 ** 200 gave 0 (CPU: 0, 0, 161). Negative exponents give CPU's
    # 1, +-1 or 0.
    g = torch.Generator().manual_seed(0)
    info = torch.iinfo(dtype)
    base = torch.randint(max(info.min, -200), min(info.max, 200) + 1, (400,), generator=g)
    exponent = torch.randint(max(info.min, -9), min(info.max, 300) + 1, (400,), generator=g)
    base = torch.cat([base, torch.tensor([2, 2, 190, 1, 0, 3])]).to(dtype)
    exponent = torch.cat([exponent, torch.tensor([64 % (info.max + 1), 65, 129, 7, 0, 200])])
    exponent = exponent.clamp(info.min, info.max).to(dtype)
    if dtype != torch.uint8:
        base[-1], exponent[-1] = -1, -3
    assert_same(torch.pow(base.to(TPU), exponent.to(TPU)), torch.pow(base, exponent))
    assert_same(torch.pow(base.to(TPU), 5), torch.pow(base, 5))
    assert_same(torch.pow(3, exponent.abs().to(TPU)), torch.pow(3, exponent.abs()))


def test_complex_python_scalar_keys_apart_from_an_int(mode: str) -> None:
    # A complex Python scalar was keyed as an int: pow(x, 0) then pow(x, 1j) reused the real
    # executable and raised "value cannot be converted to type float" (PyTorch's test_pow).
    x = torch.rand(5) + 0.5
    for exponent in (0, -2.5j, 2, 1.0 + 1.0j, 0j):
        actual, expected = torch.pow(x.to(TPU), exponent), torch.pow(x, exponent)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual.cpu(), expected)  # within complex64's rounding
        assert_same(x.to(TPU) * exponent, x * exponent)


def assert_parts_match(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    # Each part: NaN where CPU's is, else within rtol (infinities equal), the sign bit of zeros
    # and infinities as CPU's.
    for a, e in ((actual.real, expected.real), (actual.imag, expected.imag)):
        torch.testing.assert_close(a, e, rtol=rtol, atol=0, equal_nan=True)
        numbers = ~e.isnan()
        assert torch.equal(a[numbers].signbit(), e[numbers].signbit()), (a, e)


SPECIAL_PARTS = [0.0, -0.0, 1.0, INF, -INF, NAN]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize(
    "op",
    ["asin", "acos", "atan", "asinh", "acosh", "atanh", "sinh", "cosh", "tanh", "exp", "log"]
    + ["sqrt", "exp2", "log2", "log10", "rsqrt"],
)
def test_complex_functions_at_special_parts(mode: str, op: str, dtype: torch.dtype) -> None:
    # Every pair of {0, -0, 1, inf, -inf, NaN} as real and imaginary parts: C99 (CPU) keeps a
    # part where the other is NaN (acos(0 + i NaN) = pi/2 + i NaN, atanh(0 + i NaN) = 0 + i NaN,
    # sqrt(NaN + i inf) = inf + i inf, log(NaN + i inf) = inf + i NaN) and zeros' signs
    # (exp(1 - 0i) = e - 0i, tanh(-0 - 0i) = -0 - 0i); tpu gave NaN + i NaN or +0 there.
    # exp2 is e^(z log 2), log2 and log10 log z over a real, rsqrt 1 / sqrt z by CPU's (Smith's)
    # division: 1 / (inf + i inf) is NaN + i NaN there, as in NumPy.
    fn = getattr(torch, op)
    x = torch.tensor([complex(a, b) for a in SPECIAL_PARTS for b in SPECIAL_PARTS], dtype=dtype)
    rtol = 1e-6 if dtype == torch.complex64 else 1e-14
    assert_parts_match(fn(x.to(TPU)).cpu(), fn(x), rtol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_pow_at_special_and_extremal_values(mode: str, dtype: torch.dtype) -> None:
    # z ** w is glibc's cpow on CPU, exp(w log z) with C99's multiplication (an infinite factor
    # recovered from NaN + i NaN): XLA's power gave NaN + i NaN for 0 ** (1 + i) (CPU: 0) and
    # for most infinite parts; 0 ** 0 is NaN on CPU (log 0 = -inf, times 0).
    parts = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, INF, -INF, NAN]
    values = torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)
    base, exponent = values.repeat_interleave(len(values)), values.repeat(len(values))
    expected = torch.pow(base, exponent)
    assert_parts_match(torch.pow(base.to(TPU), exponent.to(TPU)).cpu(), expected, 1e-5)
    # float_power computes in complex128.
    expected = torch.float_power(base, exponent)
    assert_parts_match(torch.float_power(base.to(TPU), exponent.to(TPU)).cpu(), expected, 1e-12)


def test_complex64_pow_takes_glibcs_float_steps(mode: str) -> None:
    # glibc's cpowf rounds log z, w log z and e^x, cos y, sin y to float on the way, which
    # w log z amplifies (CPU is 5e-6 off the exact value here): tpu takes the same steps and
    # lands within float rounding of CPU where XLA's power was 8e-6 away. Results near an
    # overflow, where e^x cos y stays finite, are scaled as glibc does.
    g = torch.Generator().manual_seed(0)
    base = torch.complex(
        torch.rand(4000, generator=g) * 18 - 9, torch.rand(4000, generator=g) * 18 - 9
    )
    exponent = torch.complex(
        torch.rand(4000, generator=g) * 18 - 9, torch.rand(4000, generator=g) * 18 - 9
    )
    expected = torch.pow(base, exponent)
    actual = torch.pow(base.to(TPU), exponent.to(TPU)).cpu()
    close = torch.isclose(actual, expected, rtol=1.3e-6, atol=1e-5, equal_nan=True)
    assert close.float().mean().item() > 0.98
    torch.testing.assert_close(actual, expected, rtol=2e-5, atol=1e-5, equal_nan=True)
    z = torch.tensor([1e20j, -1e20j, 3e38 + 1j], dtype=torch.complex64)
    torch.testing.assert_close(torch.pow(z.to(TPU), 2.0 + 0j).cpu(), torch.pow(z, 2.0 + 0j))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_pow_scalar_shortcuts(mode: str, dtype: torch.dtype) -> None:
    # CPU computes z ** 2 as z z, z ** 0.5 as sqrt z, z ** -1 as 1 / z (and so on): their
    # results, not exp(w log z)'s, at those exponents; the exponent is a runtime input.
    z = torch.tensor([1.5 + 2j, -3 - 0.25j, 1e-3j, 0j, 4 + 0j, -1 + 0j], dtype=dtype)
    for exponent in (0, 1, 0.5, -0.5, -1, 2, 3, -2, 2.5, 1j, 2 + 0j):
        got, want = torch.pow(z.to(TPU), exponent).cpu(), torch.pow(z, exponent)
        rtol = 1e-6 if dtype == torch.complex64 else 1e-14
        torch.testing.assert_close(got, want, rtol=rtol, atol=1e-30, equal_nan=True)


def test_fmod_of_half_by_a_python_float_rounds_the_divisor(mode: str) -> None:
    # CPU rounds 2.3 to float16 (2.30078) before dividing; tpu kept it in float32.
    x = torch.linspace(-9, 9, 101).to(torch.float16)
    for divisor in (2.3, 3, -1.7):
        assert_same(torch.fmod(x.to(TPU), divisor), torch.fmod(x, divisor))
        assert_same(torch.remainder(x.to(TPU), divisor), torch.remainder(x, divisor))


def test_xlogy_of_integers_into_complex_out(mode: str) -> None:
    # xlogy's out= overloads are named OutTensor and OutScalar_Self: a complex out= was taken
    # for a complex input and refused.
    x = torch.tensor([1, 0, 3, 2], dtype=torch.int16)
    y = torch.tensor([2, 5, 1, 7], dtype=torch.int32)
    want = torch.xlogy(x, y, out=torch.empty(4, dtype=torch.complex64))
    got = torch.xlogy(x.to(TPU), y.to(TPU), out=torch.empty(4, dtype=torch.complex64, device=TPU))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want)  # XLA's log: 1 ulp from glibc's at times


def test_gather_with_a_zero_dim_index(mode: str) -> None:
    # CPU takes a 0-d index as one of size 1 (result 0-d); tpu refused it (PyTorch's
    # test_scalar_check).
    one_d = torch.tensor([2.5, -1.0, 4.0])
    for source in (one_d, one_d[:1], torch.tensor(3.0)):
        for index in (torch.tensor(0), torch.tensor([0])):
            assert_same(
                torch.gather(source.to(TPU), 0, index.to(TPU)), torch.gather(source, 0, index)
            )


def test_elementwise_outputs_keep_size_one_dims_strides(mode: str) -> None:
    # TensorIterator orders an output's dims as its inputs' are, size-1 dims included: the
    # strides of those change nothing read, so they were not keyed, and every permutation of
    # [1, 1, 4, 6] reused the first one's layout (PyTorch's test_strides_propagation); an
    # ambiguous [10, 3, 1, 1] plus a bias took channels-last strides from an earlier call
    # (test_memory_format_propagation_rules).
    from itertools import permutations

    base = torch.randn(1, 1, 4, 12)
    on_tpu = base.to(TPU)[:, :, :, ::2]
    for p in permutations(range(4)):
        x, x_tpu = base[:, :, :, ::2].permute(p), on_tpu.permute(p)
        assert x_tpu.stride() == x.stride()
        y = torch.randn(x.size(-1))
        for op in (torch.add, torch.eq):
            want = op(x, y)
            got = op(x_tpu, y.to(TPU))
            assert got.stride() == want.stride(), (p, got.stride(), want.stride())
            assert_same(got, want)
        assert torch.exp(x_tpu).stride() == torch.exp(x).stride()
    bias = torch.rand(3, 1, 1)
    # Host copies of two lengths in one size bucket put the next (30 elements) in it too: ops
    # at the bucket must keep the layout as well (an earlier test on the worker did this).
    for n in (17, 19):
        torch.empty(n, device=TPU).copy_(torch.rand(n))
    for memory_format in (torch.channels_last, torch.contiguous_format):
        ambiguous = torch.rand(10, 3, 1, 1).to(memory_format=memory_format)
        on_tpu = torch.empty_like(ambiguous, device=TPU).copy_(ambiguous)
        assert on_tpu.stride() == ambiguous.stride()
        for got, want in (
            (on_tpu + bias.to(TPU), ambiguous + bias),
            (bias.to(TPU) + on_tpu, bias + ambiguous),
            (on_tpu * 5, ambiguous * 5),
        ):
            assert got.stride() == want.stride() == ambiguous.stride()
    # A size-1 dim's stride keys by its order among the strides, not its value: views of one
    # storage whose size-1 dim steps 4 to 32 elements share one executable.
    storage = torch.arange(64.0)
    on_tpu = storage.to(TPU)
    compiles = torch_tpu.metrics()["compiles"]
    for step in (4, 8, 16, 32):
        view = on_tpu.as_strided((1, 4), (step, 1), 8)
        assert_same(view * 2, storage.as_strided((1, 4), (step, 1), 8) * 2)
    if mode == "strict":
        assert torch_tpu.metrics()["compiles"] - compiles <= 1


def test_half_tensor_to_a_complex_power_is_complex32(mode: str) -> None:
    # CPU has no complex32 pow and refuses float16 ** 1j; CUDA computes it, and PyTorch's
    # test_pow expects every device but CPU to: tpu computes it in complex64 and rounds.
    x = torch.linspace(0.5, 1.5, 17).to(torch.float16)
    with pytest.raises(RuntimeError, match="ComplexHalf"):
        torch.pow(x, 1j)
    for exponent in (1j, 2.5j, -1.0 - 1.5j):
        got = torch.pow(x.to(TPU), exponent)
        assert got.dtype == torch.complex32
        want = torch.pow(x.to(torch.float32), exponent)
        torch.testing.assert_close(got.cpu().to(torch.complex64), want, rtol=2e-3, atol=1e-3)
    got = torch.pow(1.0 + 1.0j, x.to(TPU))
    want = torch.pow(1.0 + 1.0j, x.to(torch.float32))
    torch.testing.assert_close(got.cpu().to(torch.complex64), want, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_digamma_and_lgamma_near_poles_and_signed_zeros(mode: str, dtype: torch.dtype) -> None:
    # PyTorch's test_digamma: reflection through pi x lost x's fraction past |x| ~ 1000
    # (digamma(-1931.99999994) off by 14.2); digamma(-0.0) is +inf on CPU (-inf here before).
    x = torch.tensor(
        [
            -0.999999994,
            -1.999999994,
            -2.0000000111,
            -100.99999994,
            1.11e-7,
            -1931.99999994,
            -1.11e-7,
            0.0,
            -0.0,
            -1.0,
            -2.0,
            -931.0,
            -1931.25,
            -1e6 - 0.5,
            0.5,
            1 / 3,
            3.5,
            10.0,
            1e17,
            math.inf,
        ],
        dtype=dtype,
    )
    rtol = 1e-7 if dtype == torch.float64 else 1.3e-6
    for op in (torch.digamma, torch.lgamma):
        want = op(x)
        got = op(x.to(TPU)).cpu()
        torch.testing.assert_close(got, want, rtol=rtol, atol=1e-7, equal_nan=True)
        assert torch.equal(got.signbit(), want.signbit()), op


def test_error_functions_keep_their_tails(mode: str) -> None:
    # erf and erfc were float32's rational approximation in every dtype, erfc as 1 - erf:
    # float64 erfc(3) was off by 0.4% and erfc(6) was 0 (CPU 2.2e-17), float32 erfc(5) 0 (CPU
    # 1.5e-12); log_ndtr(9) was 0 (CPU -1.1e-19). Relative to CPU's libm values now.
    x = torch.tensor(
        [
            -40.0,
            -6.0,
            -3.5,
            -2.0001,
            -2.0,
            -1.0,
            -0.5,
            -0.0,
            0.0,
            1e-8,
            0.1,
            1.0,
            1.9999,
            2.0,
            3.0,
            5.0,
            6.0,
            9.0,
            26.0,
            math.inf,
            -math.inf,
            math.nan,
        ],
        dtype=torch.float64,
    )
    ops = (torch.erf, torch.erfc, torch.special.ndtr, torch.special.log_ndtr, torch.special.erfcx)
    for op in ops:
        # (exp(-x^2) itself carries x^2 ulps: 7e-14 at 26.)
        torch.testing.assert_close(op(x.to(TPU)).cpu(), op(x), rtol=1e-12, atol=0, equal_nan=True)
    x32 = x[x.abs() < 9].to(torch.float32)
    torch.testing.assert_close(
        torch.erfc(x32.to(TPU)).cpu(), torch.erfc(x32), rtol=2e-7, atol=0, equal_nan=True
    )


def test_complex_abs_follows_c99_with_nan_parts(mode: str) -> None:
    # The plugin's complex abs dropped a NaN part (|1 + NaN i| came out sqrt 2) and gave NaN
    # for |NaN + inf i|, which is inf.
    values = [0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]
    for dtype in (torch.complex64, torch.complex128):
        z = torch.tensor([complex(a, b) for a in values for b in values], dtype=dtype)
        torch.testing.assert_close(torch.abs(z.to(TPU)).cpu(), torch.abs(z), equal_nan=True)
        torch.testing.assert_close(torch.sgn(z.to(TPU)).cpu(), torch.sgn(z), equal_nan=True)


def test_abs_and_angle_of_complex_into_complex_out(mode: str) -> None:
    # CPU writes a complex input's real |z| and angle into a complex out=; the Meta kernels
    # (Python references) refused it.
    z = torch.tensor([1 + 2j, -3 - 1j, 0j])
    for op in (torch.abs, torch.angle):
        want = op(z, out=torch.empty_like(z))
        for out in (torch.empty_like(z, device=TPU), torch.empty(0, dtype=z.dtype, device=TPU)):
            op(z.to(TPU), out=out)
            assert_same(out, want)


def test_complex_sigmoid_where_exp_overflows(mode: str) -> None:
    # CPU computes 1 / (1 + e^-z) with Smith's division: NaN where e^-z is inf - i inf, 0 where
    # one part stays finite; the plugin's logistic gave 0 for both.
    z = torch.tensor([-100 + 1j, -1000 + 5j, -89 + 0.5j, 100 + 3j, -50 - 50j, 0.5 - 2j])
    for dtype in (torch.complex64, torch.complex128):
        torch.testing.assert_close(
            torch.sigmoid(z.to(dtype).to(TPU)).cpu(), torch.sigmoid(z.to(dtype)), equal_nan=True
        )


def test_bessel_i_overflows_where_cpu_does(mode: str) -> None:
    # CPU and SciPy take e^x whole (inf from 709.8 on, though I_0 fits to 713.9); at float64's
    # largest x, sqrt(2 pi x) overflowed and made I_0 0 x inf = NaN.
    info = torch.finfo(torch.float64)
    x = torch.tensor(
        [-1e7, -713.0, -700.0, 10.0, 709.0, 710.0, 713.0, info.max, info.min, info.tiny],
        dtype=torch.float64,
    )
    for op in (torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e):
        torch.testing.assert_close(op(x.to(TPU)).cpu(), op(x), equal_nan=True)


def test_a_resized_out_warns_once(mode: str) -> None:
    # The Meta rehearsal of a cache miss (a Python reference) warned through Python's warnings
    # too: the first call warned twice (PyTorch's test_out_resize_warning).
    import warnings

    a, b = torch.arange(3.0).to(TPU), torch.ones(3).to(TPU)
    for op, inputs in ((torch.exp, (a,)), (torch.sub, (a, b)), (torch.mul, (a[:2, None], b))):
        for _ in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                op(*inputs, out=torch.empty(2, device=TPU))
            assert len(caught) == 1, (op, [str(w.message) for w in caught])


def test_heaviside_refuses_a_complex_out_as_cpu(mode: str) -> None:
    # CPU's kernel checks the result's dtype too; the Meta kernel checks only the operands.
    real = torch.tensor([0.0, -1.0, 2.0])
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for complex"):
        torch.heaviside(real, real, out=torch.empty(3, dtype=torch.complex64))
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for complex"):
        torch.heaviside(
            real.to(TPU), real.to(TPU), out=torch.empty(3, dtype=torch.complex64, device=TPU)
        )


def test_lcm_overflow_wraps_as_cpu(mode: str) -> None:
    # CPU promotes types narrower than int before |x / gcd * y|, so an overflowing lcm's absolute
    # value is taken before it wraps: int16 lcm(20000, 3) is -5536 (it came back 5536).
    for dtype in (torch.int8, torch.int16, torch.uint8):
        info = torch.iinfo(dtype)
        generator = torch.Generator().manual_seed(0)
        x = torch.randint(info.min, info.max, (512,), dtype=dtype, generator=generator)
        y = torch.randint(info.min, info.max, (512,), dtype=dtype, generator=generator)
        assert torch.equal(torch.lcm(x.to(TPU), y.to(TPU)).cpu(), torch.lcm(x, y))
