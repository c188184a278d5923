"""Operator families on tpu against PyTorch's own CPU results (forward, views, backward, optim).

Inputs are made on the CPU and copied to tpu, so every comparison sees identical data. Shapes
are reused across tests to keep the number of distinct compiles small.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import (
    TPU,
    assert_close_to_cpu,
    assert_grads_close_to_cpu,
    assert_same,
)

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64]
NUMERIC = FLOATS + INTS
ALL = NUMERIC + [torch.bool]

# Looser (atol, rtol) for results that accumulate: matmul, reductions, norms, losses.
ACC_TOL: dict[torch.dtype, dict[str, float]] = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.float16: {"atol": 1e-2, "rtol": 1e-2},
    torch.bfloat16: {"atol": 5e-2, "rtol": 2e-2},
}

ids = str  # pytest ids: "torch.float32" etc.


def make(
    shape: tuple[int, ...], dtype: torch.dtype = torch.float32, *, positive: bool = False
) -> torch.Tensor:
    """A CPU tensor of `dtype` with values that are safe for most ops (no zeros when positive)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape).bool()
    if dtype.is_floating_point:
        base = torch.rand(shape) + 0.5 if positive else torch.randn(shape)
        return base.to(dtype)
    if positive:
        return torch.randint(1, 9, shape, dtype=dtype)
    return torch.randint(-8, 9, shape, dtype=dtype)


def distinct(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Distinct values (no ties), exactly representable in every dtype; for max/argmax/sort."""
    n = math.prod(shape)
    return (torch.randperm(n) - n // 2).reshape(shape).to(dtype)


def acc_tol(dtype: torch.dtype) -> dict[str, float]:
    return ACC_TOL.get(dtype, {})


# --------------------------------------------------------------------------------------------
# Copies between devices and dtypes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_copy_roundtrip(dtype: torch.dtype, tpu: torch.device) -> None:
    x = make((4, 6), dtype)
    t = x.to(tpu)
    assert t.device.type == "tpu" and t.dtype == dtype and t.shape == x.shape
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t.to("cpu", copy=True), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=ids)
def test_copy_non_blocking(dtype: torch.dtype, tpu: torch.device) -> None:
    x = make((4, 6), dtype)
    t = x.to(tpu, non_blocking=True)
    y = (t * 2).to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(y, x * 2)
    src = x.clone()
    t2 = src.to(tpu, non_blocking=True)
    src.zero_()  # the copy must already own its data (or have been waited for)
    assert torch.equal(t2.cpu(), x)


@pytest.mark.parametrize("src", ALL, ids=ids)
@pytest.mark.parametrize("dst", ALL, ids=ids)
def test_tpu_dtype_conversion(src: torch.dtype, dst: torch.dtype, tpu: torch.device) -> None:
    x = (torch.randn(4, 6) * 5).to(src)  # in range for every integer type
    assert_close_to_cpu(lambda a: a.to(dst), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=ids)
def test_copy_into_tpu_with_conversion(dtype: torch.dtype, tpu: torch.device) -> None:
    src = make((4, 6), torch.int64)
    dst = torch.zeros(4, 6, dtype=dtype)
    dst_tpu = dst.to(tpu)
    dst_tpu.copy_(src)  # cpu -> tpu with a dtype change
    dst.copy_(src)
    assert_same(dst_tpu, dst)
    other = make((4, 6), torch.float32).to(tpu)
    dst_tpu.copy_(other)  # tpu -> tpu with a dtype change
    dst.copy_(other.cpu())
    assert_same(dst_tpu, dst)
    back = torch.empty(4, 6, dtype=torch.float64)
    back.copy_(dst_tpu)  # tpu -> cpu with a dtype change
    assert torch.equal(back, dst.double())


def test_copy_between_views(tpu: torch.device) -> None:
    def fn(a: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        a[:, 1].copy_(col)  # strided destination
        a[2:].copy_(row)  # broadcast source
        a.t()[0].copy_(a[:, 5])  # overlapping aliases of the same storage
        return a

    assert_close_to_cpu(fn, make((4, 6)), make((6,)), make((4,)))


def test_copy_cpu_into_tpu_view(tpu: torch.device) -> None:
    a = make((4, 6))
    t = a.to(tpu)
    col = make((4,))
    t[:, 2] = col  # cpu source, strided tpu destination
    a[:, 2] = col
    assert_same(t, a)


def test_clone_and_contiguous(tpu: torch.device) -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = a.t().contiguous()
        d = a[:, ::2].clone()
        assert c.is_contiguous() and d.is_contiguous()
        a.add_(1)  # clones do not alias
        return c, d

    assert_close_to_cpu(fn, make((4, 6)))


# --------------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_empty(dtype: torch.dtype, tpu: torch.device) -> None:
    e = torch.empty(4, 6, dtype=dtype, device=tpu)
    assert e.shape == (4, 6) and e.dtype == dtype and e.device.type == "tpu"
    assert e.stride() == (6, 1)
    s = torch.empty_strided((4, 6), (1, 4), dtype=dtype, device=tpu)
    assert s.stride() == (1, 4)
    like = torch.empty_like(s)
    assert like.device.type == "tpu" and like.shape == s.shape
    assert torch.empty(0, device=tpu).numel() == 0


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_zeros_ones_full(dtype: torch.dtype, tpu: torch.device) -> None:
    value = True if dtype == torch.bool else 3
    assert_same(torch.zeros(4, 6, dtype=dtype, device=tpu), torch.zeros(4, 6, dtype=dtype))
    assert_same(torch.ones(4, 6, dtype=dtype, device=tpu), torch.ones(4, 6, dtype=dtype))
    assert_same(
        torch.full((4, 6), value, dtype=dtype, device=tpu), torch.full((4, 6), value, dtype=dtype)
    )


def test_full_infers_dtype(tpu: torch.device) -> None:
    assert_same(torch.full((2, 3), 1.5, device=tpu), torch.full((2, 3), 1.5))
    assert_same(torch.full((2, 3), 7, device=tpu), torch.full((2, 3), 7))
    assert_same(torch.full((2, 3), False, device=tpu), torch.full((2, 3), False))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
def test_like_factories(dtype: torch.dtype, tpu: torch.device) -> None:
    x = make((4, 6), dtype)
    t = x.to(tpu)
    for fn in (torch.zeros_like, torch.ones_like):
        out = fn(t)
        assert out.device.type == "tpu"
        assert_same(out, fn(x))
    assert_same(torch.full_like(t, 2), torch.full_like(x, 2))
    assert_same(torch.zeros_like(t, dtype=torch.float32), torch.zeros_like(x, dtype=torch.float32))


def test_arange(tpu: torch.device) -> None:
    assert_same(torch.arange(10, device=tpu), torch.arange(10))
    assert_same(torch.arange(2, 20, 3, device=tpu), torch.arange(2, 20, 3))
    assert_same(torch.arange(0, 1, 0.125, device=tpu), torch.arange(0, 1, 0.125))
    assert_same(
        torch.arange(10, dtype=torch.float32, device=tpu), torch.arange(10, dtype=torch.float32)
    )
    assert_same(
        torch.arange(-3, 3, dtype=torch.bfloat16, device=tpu),
        torch.arange(-3, 3, dtype=torch.bfloat16),
    )


def test_linspace(tpu: torch.device) -> None:
    assert_same(torch.linspace(0, 1, 7, device=tpu), torch.linspace(0, 1, 7))
    assert_same(torch.linspace(-2, 5, 24, device=tpu), torch.linspace(-2, 5, 24))
    assert_same(torch.linspace(3, 3, 1, device=tpu), torch.linspace(3, 3, 1))


@pytest.mark.parametrize(
    "dtype",
    [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.int64],
    ids=ids,
)
def test_linspace_is_bit_exact(dtype: torch.dtype, tpu: torch.device) -> None:
    # CPU rounds float16/bfloat16 at each operation (XLA kept float32 between the product and
    # the sum), fuses the product and sum in float32/float64 (a value near 0 was 20 ulps off),
    # and divides by steps - 1 (XLA multiplied by a constant's rounded reciprocal).
    for start, end, steps in ((-3.3, 5.9, 100), (-2, 5, 24), (3, -11.2, 101)):
        want = torch.linspace(start, end, steps, dtype=dtype)
        got = torch.linspace(start, end, steps, dtype=dtype, device=tpu).cpu()
        assert torch.equal(got, want), (start, end, steps, (got != want).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=ids)
def test_logspace(dtype: torch.dtype, tpu: torch.device) -> None:
    # It had no lowering at all (PyTorch's test_igamma_common builds its inputs with it).
    for args in ((0, 3, 7), (-2.5, 2.5, 10, 2.0), (1, 1, 1), (0, 10, 11, 2), (0.1, 0.2, 0)):
        want = torch.logspace(*args, dtype=dtype)
        assert_same(torch.logspace(*args, dtype=dtype, device=tpu), want)
        out = torch.empty(0, dtype=dtype, device=tpu)
        torch.logspace(*args, dtype=dtype, out=out)
        assert_same(out, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=ids)
def test_eye(dtype: torch.dtype, tpu: torch.device) -> None:
    assert_same(torch.eye(4, dtype=dtype, device=tpu), torch.eye(4, dtype=dtype))
    assert_same(torch.eye(4, 6, dtype=dtype, device=tpu), torch.eye(4, 6, dtype=dtype))


def test_kaiser_window(tpu: torch.device) -> None:
    # It reached an internal assert (CPU's kernel is a dispatch stub with no tpu entry). Each
    # overload once (periodic or not, a beta), then other dtypes and the edge lengths.
    cases = [((8,), torch.float32), ((9, False), torch.float64), ((9, True, 5.0), torch.bfloat16)]
    cases += [((1,), torch.float32), ((0,), torch.float32)]
    for args, dtype in cases:
        assert_same(
            torch.kaiser_window(*args, dtype=dtype, device=tpu),
            torch.kaiser_window(*args, dtype=dtype),
        )
    out = torch.empty(0, device=tpu)
    torch.ops.aten.kaiser_window.beta_out(6, False, 3.0, out=out)
    assert_same(out, torch.kaiser_window(6, False, 3.0))
    with pytest.raises(RuntimeError, match="kaiser_window expects floating point dtypes"):
        torch.kaiser_window(5, dtype=torch.int64, device=tpu)
    with pytest.raises(RuntimeError, match="requires non-negative window_length"):
        torch.kaiser_window(-1, device=tpu)


def test_triu_and_tril_indices(tpu: torch.device) -> None:
    # They had no kernel (NotImplementedError). Shapes where the triangle is a trapezoid of rows
    # only, full rows only, both, empty, and one wide enough that the row is a float64 root.
    import torch_tpu

    cases = [(4, 3, 0), (3, 5, 1), (5, 3, -2), (4, 4, -9), (2, 6, 7), (0, 3, 0), (2000, 1500, -3)]
    uploads = torch_tpu.metrics()["uploads"]
    for args in cases:
        for fn in (torch.triu_indices, torch.tril_indices):
            assert_same(fn(*args, device=tpu), fn(*args))
    assert torch_tpu.metrics()["uploads"] == uploads  # computed on the device, not uploaded
    assert_same(
        torch.tril_indices(3, 4, 1, dtype=torch.int32, device=tpu),
        torch.tril_indices(3, 4, 1, dtype=torch.int32),
    )
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.triu_indices(3, 3, dtype=torch.float32, device=tpu)
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device=tpu)


def test_tensor_constructor(tpu: torch.device) -> None:
    assert_same(torch.tensor([1.5, -2.0], device=tpu), torch.tensor([1.5, -2.0]))
    assert_same(torch.tensor([[1, 2], [3, 4]], device=tpu), torch.tensor([[1, 2], [3, 4]]))
    assert torch.tensor(3.0, device=tpu).item() == 3.0
    assert torch.tensor([True, False], device=tpu).tolist() == [True, False]


# --------------------------------------------------------------------------------------------
# Views: metadata, reads, writes through aliases
# --------------------------------------------------------------------------------------------

VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda a: a.view(3, 8),
    "view_flat": lambda a: a.view(-1),
    "reshape": lambda a: a.reshape(2, 12),
    "as_strided": lambda a: a.as_strided((3, 3), (6, 2), 1),
    "transpose": lambda a: a.transpose(0, 1),
    "permute": lambda a: a.view(2, 2, 6).permute(2, 0, 1),
    "slice": lambda a: a[1:3],
    "slice_step": lambda a: a[1:, ::2],
    "select": lambda a: a[2],
    "select_col": lambda a: a[:, 3],
    "narrow": lambda a: a.narrow(1, 2, 3),
    "squeeze": lambda a: a.view(1, 4, 1, 6).squeeze(),
    "unsqueeze": lambda a: a.unsqueeze(1),
    "unfold": lambda a: a[0].unfold(0, 2, 2),
    "diagonal": lambda a: a.diagonal(),
    "diagonal_offset": lambda a: a.diagonal(offset=1),
    "t": lambda a: a.t(),
    "chain": lambda a: a.t()[1:5].narrow(1, 1, 2),
    "slice_col_step": lambda a: a[:, 1::3],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_metadata(name: str, tpu: torch.device) -> None:
    a = make((4, 6))
    t = a.to(tpu)
    v_cpu, v_tpu = VIEWS[name](a), VIEWS[name](t)
    assert v_tpu.device.type == "tpu"
    assert v_tpu.shape == v_cpu.shape
    assert v_tpu.stride() == v_cpu.stride()
    assert v_tpu.storage_offset() == v_cpu.storage_offset()
    assert v_tpu.is_contiguous() == v_cpu.is_contiguous()
    assert v_tpu._is_view() == v_cpu._is_view()
    if v_cpu._is_view():
        assert v_tpu._base is t
    assert v_tpu.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    offset_bytes = v_cpu.data_ptr() - a.data_ptr()
    assert v_tpu.data_ptr() - t.data_ptr() == offset_bytes


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_read(name: str) -> None:
    assert_close_to_cpu(lambda a: VIEWS[name](a) * 1, make((4, 6)))
    assert_close_to_cpu(lambda a: VIEWS[name](a).clone(), make((4, 6)))


@pytest.mark.parametrize("name", list(VIEWS))
def test_inplace_through_view(name: str) -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        v = VIEWS[name](a)
        v.mul_(2).add_(1)
        return v

    assert_close_to_cpu(fn, make((4, 6)))  # also compares `a`, the base, after the write


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_slice_add_aliasing(dtype: torch.dtype) -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = a[1:, ::2]
        if dtype == torch.bool:
            b.logical_not_()
        else:
            b.add_(1)
        return a, b

    assert_close_to_cpu(fn, make((4, 6), dtype))


def test_transpose_mul_aliasing(tpu: torch.device) -> None:
    a = make((4, 6))
    t = a.to(tpu)
    t.t().mul_(2)
    a.t().mul_(2)
    assert_same(t, a)


def test_base_write_visible_in_views(tpu: torch.device) -> None:
    a = make((4, 6))
    t = a.to(tpu)
    views_cpu = [a[1], a[:, 2], a.t(), a.view(24)[5:9]]
    views_tpu = [t[1], t[:, 2], t.t(), t.view(24)[5:9]]
    t.add_(10)
    a.add_(10)
    t[2, 3] = -1.0
    a[2, 3] = -1.0
    t.view(24)[7].fill_(5)
    a.view(24)[7].fill_(5)
    for got, want in zip(views_tpu, views_cpu, strict=True):
        assert_same(got, want)


def test_view_of_view_writes_reach_every_alias() -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v1 = a[1:]
        v2 = v1[:, 2:5]
        v3 = a.t()
        v2.sub_(3)
        v3[4].zero_()
        v1[0, 0] = 9.0
        return a, v1, v2, v3

    assert_close_to_cpu(fn, make((4, 6)))


def test_version_counter(tpu: torch.device) -> None:
    for dev in ("cpu", tpu):
        a = make((4, 6)).to(dev)
        v = a[1]
        assert v._version == a._version
        before = a._version
        v.add_(1)
        assert a._version == v._version == before + 1
        a.mul_(2)
        assert v._version == before + 2
        a[0] = 1.0
        assert v._version == before + 3


def test_out_argument_into_view() -> None:
    def fn(a: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.add(x, y, out=a[:, ::2])
        torch.mul(x, y, out=a[:, 1::2])
        return a

    assert_close_to_cpu(fn, make((4, 6)), make((4, 3)), make((4, 3)))


def test_expand(tpu: torch.device) -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = a[:1].expand(3, 6)
        assert e.stride() == (0, 1)
        return e + 0, a[:, :1].expand(4, 5).contiguous()

    assert_close_to_cpu(fn, make((4, 6)))
    t = make((4, 6)).to(tpu)
    assert t[:1].expand(3, 6).stride() == (0, 1)
    assert t[:1].expand(3, 6)._base is t


def test_resize_and_set(tpu: torch.device) -> None:
    t = torch.empty(0, device=tpu)
    t.resize_(4, 6)
    assert t.shape == (4, 6)
    t.copy_(torch.ones(4, 6))
    assert torch.equal(t.cpu(), torch.ones(4, 6))
    s = torch.empty(0, device=tpu)
    s.set_(t.untyped_storage(), 6, (3, 6), (6, 1))
    assert torch.equal(s.cpu(), torch.ones(3, 6))
    s.fill_(2.0)
    assert t.cpu()[1:].eq(2).all() and t.cpu()[0].eq(1).all()


# --------------------------------------------------------------------------------------------
# Elementwise math, comparisons, where, masked_fill, clamp
# --------------------------------------------------------------------------------------------

UNARY: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
    # name: (fn, needs positive input)
    "abs": (torch.abs, False),
    "neg": (torch.neg, False),
    "exp": (torch.exp, False),
    "exp2": (torch.exp2, False),
    "expm1": (torch.expm1, False),
    "log": (torch.log, True),
    "log2": (torch.log2, True),
    "log10": (torch.log10, True),
    "log1p": (torch.log1p, True),
    "sqrt": (torch.sqrt, True),
    "rsqrt": (torch.rsqrt, True),
    "reciprocal": (torch.reciprocal, True),
    "sin": (torch.sin, False),
    "cos": (torch.cos, False),
    "tan": (torch.tan, False),
    "tanh": (torch.tanh, False),
    "sigmoid": (torch.sigmoid, False),
    "erf": (torch.erf, False),
    "floor": (torch.floor, False),
    "ceil": (torch.ceil, False),
    "round": (torch.round, False),
    "trunc": (torch.trunc, False),
    "sign": (torch.sign, False),
    "relu": (torch.relu, False),
    "square": (torch.square, False),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name: str, dtype: torch.dtype) -> None:
    fn, positive = UNARY[name]
    x = make((4, 6), dtype, positive=positive) * (1 if positive else 2)
    assert_close_to_cpu(fn, x)


@pytest.mark.parametrize("name", ["exp", "sin", "sqrt", "neg", "floor", "sigmoid"])
def test_unary_inplace(name: str) -> None:
    fn, positive = UNARY[name]
    method = getattr(torch.Tensor, name + "_")
    assert_close_to_cpu(lambda a: method(a), make((4, 6), positive=positive))


@pytest.mark.parametrize("dtype", INTS, ids=ids)
@pytest.mark.parametrize("name", ["abs", "neg", "sign", "square"])
def test_unary_int(name: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(UNARY[name][0], make((4, 6), dtype))


@pytest.mark.parametrize("dtype", INTS + [torch.float32], ids=ids)
def test_unary_int_to_float(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype, positive=True)
    assert_close_to_cpu(lambda a: (a.sqrt(), a.exp(), a.sin(), a.sigmoid()), x)


BINARY: dict[str, Callable[[Any, Any], torch.Tensor]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "trunc_divide": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
}


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name: str, dtype: torch.dtype) -> None:
    divides = name in ("div", "remainder", "fmod", "floor_divide", "trunc_divide")
    a = make((4, 6), dtype) * 3 if dtype.is_floating_point else make((4, 6), dtype)
    b = make((4, 6), dtype, positive=divides)
    if divides:
        b = b * torch.where(torch.rand(4, 6) > 0.5, 1, -1).to(dtype)  # both signs, no zeros
    tol = {"atol": 1e-2, "rtol": 1e-2} if divides and dtype == torch.float16 else {}
    assert_close_to_cpu(BINARY[name], a, b, **tol)
    # Broadcasting against a row and a column.
    assert_close_to_cpu(BINARY[name], a, b[0], **tol)
    assert_close_to_cpu(BINARY[name], a[:, :1], b, **tol)


def test_binary_float32_special_values() -> None:
    a = torch.tensor([1.0, -1.0, 0.0, float("inf"), float("nan"), 2.0])
    b = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, float("nan")])
    assert_close_to_cpu(lambda x, y: (x / y, torch.maximum(x, y), torch.minimum(x, y)), a, b)
    assert_close_to_cpu(lambda x: (x.isnan(), torch.nan_to_num(x)), a)


def test_pow() -> None:
    base = make((4, 6), positive=True)
    exponent = make((4, 6))
    assert_close_to_cpu(torch.pow, base, exponent)
    assert_close_to_cpu(lambda x: x**2, make((4, 6)))
    assert_close_to_cpu(lambda x: x**0.5, base)
    assert_close_to_cpu(lambda x: 2.0**x, exponent)
    ints = make((4, 6), torch.int64)
    assert_close_to_cpu(lambda x: x**3, ints)
    assert_close_to_cpu(lambda x, y: torch.pow(x, y), ints, make((4, 6), torch.int64).abs())


def test_atan2() -> None:
    assert_close_to_cpu(torch.atan2, make((4, 6)), make((4, 6)))


@pytest.mark.parametrize("scalar", [2, 2.5, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=ids)
def test_binary_with_python_scalar(dtype: torch.dtype, scalar: float) -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a + scalar, scalar - a, a * scalar, a / 4, scalar * a

    assert_close_to_cpu(fn, make((4, 6), dtype))


def test_type_promotion() -> None:
    f32, i32, i64 = make((4, 6)), make((4, 6), torch.int32), make((4, 6), torch.int64)
    bf16, f16, b = (
        make((4, 6), torch.bfloat16),
        make((4, 6), torch.float16),
        make((4, 6), torch.bool),
    )
    cases: list[tuple[torch.Tensor, torch.Tensor]] = [
        (i32, f32),
        (i32, i64),
        (b, i32),
        (b, f32),
        (bf16, f32),
        (f16, bf16),
        (i64, bf16),
    ]
    for x, y in cases:
        assert_close_to_cpu(torch.add, x, y, atol=1e-2, rtol=1e-2)
        assert_close_to_cpu(torch.mul, x, y, atol=1e-2, rtol=1e-2)
    # Zero-dim tensors take part in promotion like scalars.
    assert_close_to_cpu(torch.add, i32, torch.tensor(2.5))
    assert_close_to_cpu(torch.mul, bf16, torch.tensor(3.0, dtype=torch.float64))
    assert_close_to_cpu(lambda x: x / 3, i64)  # true division gives float


def test_inplace_binary_and_aliasing_operands() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(b)
        a.mul_(a)  # self as operand
        a.sub_(a.t().t(), alpha=0.5)
        a[:, :3].div_(a[:, 3:])  # operands are disjoint aliases of the same storage
        a.addcmul_(b, b, value=0.5)
        a.addcdiv_(b, b.abs() + 1, value=2)
        a.lerp_(b, 0.25)
        return a

    assert_close_to_cpu(fn, make((4, 6)), make((4, 6)))


CMP = {
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("name", list(CMP))
def test_comparison(name: str, dtype: torch.dtype) -> None:
    a = make((4, 6), dtype).round() if dtype.is_floating_point else make((4, 6), dtype)
    b = make((4, 6), dtype).round() if dtype.is_floating_point else make((4, 6), dtype)
    assert_close_to_cpu(CMP[name], a, b)
    assert_close_to_cpu(CMP[name], a, b[1])
    if dtype != torch.bool:
        assert_close_to_cpu(lambda x: CMP[name](x, 0), a)


def test_logical_and_bitwise() -> None:
    p, q = make((4, 6), torch.bool), make((4, 6), torch.bool)
    i, j = make((4, 6), torch.int32), make((4, 6), torch.int32)
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        assert_close_to_cpu(fn, p, q)
        assert_close_to_cpu(fn, i, make((4, 6)))
    assert_close_to_cpu(torch.logical_not, i)
    for fn in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        assert_close_to_cpu(fn, i, j)
        assert_close_to_cpu(fn, p, q)
    assert_close_to_cpu(lambda x: (~x, x & 6, x | 1, x ^ 3), i)
    assert_close_to_cpu(lambda x: ~x, p)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_where(dtype: torch.dtype) -> None:
    cond = make((4, 6), torch.bool)
    assert_close_to_cpu(torch.where, cond, make((4, 6), dtype), make((4, 6), dtype))
    assert_close_to_cpu(torch.where, cond[0], make((4, 6), dtype), make((1, 6), dtype))
    if dtype != torch.bool:
        assert_close_to_cpu(lambda c, x: torch.where(c, x, 0), cond, make((4, 6), dtype))
        assert_close_to_cpu(lambda c, x: torch.where(c, 2, x), cond, make((4, 6), dtype))


def test_where_promotes() -> None:
    cond = make((4, 6), torch.bool)
    assert_close_to_cpu(torch.where, cond, make((4, 6), torch.int32), make((4, 6)))
    assert_close_to_cpu(lambda c, x: torch.where(c, x, 1.5), cond, make((4, 6), torch.int64))


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_masked_fill(dtype: torch.dtype) -> None:
    value = False if dtype == torch.bool else 5
    mask = make((4, 6), torch.bool)
    assert_close_to_cpu(lambda x, m: x.masked_fill(m, value), make((4, 6), dtype), mask)
    assert_close_to_cpu(lambda x, m: x.masked_fill_(m[0], value), make((4, 6), dtype), mask)
    assert_close_to_cpu(
        lambda x, m: x.masked_fill(m, torch.tensor(value, dtype=dtype)), make((4, 6), dtype), mask
    )


def test_masked_fill_neg_inf_for_attention() -> None:
    mask = torch.ones(4, 4, dtype=torch.bool).triu(1)
    assert_close_to_cpu(
        lambda s, m: s.masked_fill(m, float("-inf")).softmax(-1), make((4, 4)), mask
    )


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
def test_clamp(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype) * 3
    assert_close_to_cpu(lambda a: a.clamp(-2, 2), x)
    assert_close_to_cpu(lambda a: a.clamp(min=0), x)
    assert_close_to_cpu(lambda a: a.clamp(max=1), x)
    assert_close_to_cpu(lambda a: a.clamp_(-1, 1), x)
    lo, hi = make((4, 6), dtype) - 1, make((4, 6), dtype).abs() + 1
    assert_close_to_cpu(lambda a, b, c: a.clamp(b, c), x, lo, hi)
    assert_close_to_cpu(lambda a, b: torch.clamp_min(a, b[0]), x, lo)


# --------------------------------------------------------------------------------------------
# Matrix products
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_mm(dtype: torch.dtype) -> None:
    a, b = make((8, 16), dtype), make((16, 4), dtype)
    assert_close_to_cpu(torch.mm, a, b, **acc_tol(dtype))
    assert_close_to_cpu(lambda x, y: x @ y, a, b, **acc_tol(dtype))
    assert_close_to_cpu(lambda x, y: x.t().t() @ y.t().contiguous().t(), a, b, **acc_tol(dtype))
    assert_close_to_cpu(lambda x, y: y.t() @ x.t(), a, b, **acc_tol(dtype))


def test_mm_int() -> None:
    assert_close_to_cpu(torch.mm, make((8, 16), torch.int64), make((16, 4), torch.int64))


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_bmm(dtype: torch.dtype) -> None:
    assert_close_to_cpu(
        torch.bmm, make((3, 8, 16), dtype), make((3, 16, 4), dtype), **acc_tol(dtype)
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_addmm_baddbmm(dtype: torch.dtype) -> None:
    tol = acc_tol(dtype)
    bias, a, b = make((4,), dtype), make((8, 16), dtype), make((16, 4), dtype)
    assert_close_to_cpu(torch.addmm, bias, a, b, **tol)
    assert_close_to_cpu(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2), bias, a, b, **tol)
    assert_close_to_cpu(lambda c, x, y: c.addmm_(x, y), make((8, 4), dtype), a, b, **tol)
    c3, a3, b3 = make((3, 8, 4), dtype), make((3, 8, 16), dtype), make((3, 16, 4), dtype)
    assert_close_to_cpu(torch.baddbmm, c3, a3, b3, **tol)
    assert_close_to_cpu(
        lambda c, x, y: torch.baddbmm(c, x, y, beta=0, alpha=0.5), c3, a3, b3, **tol
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_matmul_shapes(dtype: torch.dtype) -> None:
    tol = acc_tol(dtype)
    assert_close_to_cpu(torch.matmul, make((16,), dtype), make((16,), dtype), **tol)  # dot
    assert_close_to_cpu(torch.matmul, make((8, 16), dtype), make((16,), dtype), **tol)  # mv
    assert_close_to_cpu(torch.matmul, make((16,), dtype), make((16, 4), dtype), **tol)
    assert_close_to_cpu(torch.matmul, make((2, 3, 8, 16), dtype), make((16, 4), dtype), **tol)
    assert_close_to_cpu(torch.matmul, make((2, 1, 8, 16), dtype), make((3, 16, 4), dtype), **tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_linear(dtype: torch.dtype) -> None:
    tol = acc_tol(dtype)
    x, w, b = make((2, 8, 16), dtype), make((4, 16), dtype), make((4,), dtype)
    assert_close_to_cpu(F.linear, x, w, b, **tol)
    assert_close_to_cpu(F.linear, x, w, **tol)
    assert_close_to_cpu(F.linear, x[0], w, b, **tol)


# --------------------------------------------------------------------------------------------
# Reductions and normalisations along a dim (one test per variant, so a failure is precise)
# --------------------------------------------------------------------------------------------

SUMS: dict[str, Callable[[torch.Tensor], Any]] = {
    "all": torch.sum,
    "dim0": lambda a: a.sum(0),
    "dim-1_keepdim": lambda a: a.sum(-1, keepdim=True),
    "dims01": lambda a: a.sum((0, 1)),
    "dtype_arg": lambda a: a.sum(1, dtype=torch.float32),
    "strided_input": lambda a: a.t().sum(0),
}


@pytest.mark.parametrize("dtype", ALL, ids=ids)
@pytest.mark.parametrize("variant", list(SUMS))
def test_sum(variant: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(SUMS[variant], make((4, 6), dtype), **acc_tol(dtype))


MOMENTS: dict[str, Callable[[torch.Tensor], Any]] = {
    "mean_all": torch.mean,
    "mean_dim_keepdim": lambda a: a.mean(1, keepdim=True),
    "mean_dims": lambda a: a.mean((0, 1)),
    "var_all": lambda a: a.var(),
    "var_dim0": lambda a: a.var(0),
    "var_correction0_keepdim": lambda a: a.var(1, correction=0, keepdim=True),
    "std_all": lambda a: a.std(),
    "std_dim_biased": lambda a: a.std(1, unbiased=False),
    "var_mean": lambda a: torch.var_mean(a, 1),
    "std_mean_all": torch.std_mean,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("variant", list(MOMENTS))
def test_mean_var_std(variant: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(MOMENTS[variant], make((4, 6), dtype), **acc_tol(dtype))


def test_mean_of_int_dtype_arg() -> None:
    x = make((4, 6), torch.int64)
    assert_close_to_cpu(lambda a: a.mean(dtype=torch.float32), x)
    assert_close_to_cpu(lambda a: a.float().mean(0), x)


EXTREMA: dict[str, Callable[[torch.Tensor], Any]] = {
    "amax_all": torch.amax,
    "amin_all": torch.amin,
    "max_all": torch.max,
    "min_all": torch.min,
    "argmax_all": torch.argmax,
    "argmin_all": torch.argmin,
    "amax_dim": lambda a: a.amax(1),
    "amin_dim_keepdim": lambda a: a.amin(0, keepdim=True),
    "amax_dims": lambda a: a.amax((0, 1)),
    "max_dim": lambda a: a.max(1),
    "min_dim_keepdim": lambda a: a.min(0, keepdim=True),
    "argmax_dim": lambda a: a.argmax(1),
    "argmin_dim_keepdim": lambda a: a.argmin(0, keepdim=True),
}


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids)
@pytest.mark.parametrize("variant", list(EXTREMA))
def test_max_min(variant: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(EXTREMA[variant], distinct((4, 6), dtype))


def test_max_min_ties_pick_first_index() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, -1.0]])
    assert_close_to_cpu(lambda a: (a.argmax(1), a.argmin(1), a.max(1), a.min(1)), x)


def test_max_min_nan_propagates() -> None:
    x = torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, -1.0]])
    assert_close_to_cpu(lambda a: (a.amax(1), a.amin(1)), x)
    assert_close_to_cpu(lambda a: (a.max(), a.min()), x)


def test_any_all() -> None:
    b = make((4, 6), torch.bool)
    assert_close_to_cpu(lambda a: (a.any(1), a.all(0)), b)
    assert_close_to_cpu(lambda a: (a.any(), a.all()), b)
    assert_close_to_cpu(lambda a: (a.any(1), a.all()), make((4, 6), torch.int32))


def test_prod() -> None:
    x = make((4, 6), positive=True)
    assert_close_to_cpu(lambda a: a.prod(1), x, **acc_tol(torch.float32))
    assert_close_to_cpu(lambda a: a.prod(), x, **acc_tol(torch.float32))


def test_cumsum() -> None:
    x = make((4, 6))
    assert_close_to_cpu(lambda a: (a.cumsum(1), a.cumsum(0)), x, **acc_tol(torch.float32))
    assert_close_to_cpu(lambda a: a.cumsum(1), make((4, 6), torch.int32))


NORMS: dict[str, Callable[[torch.Tensor], Any]] = {
    "fro_all": torch.norm,
    "l2_dim": lambda a: a.norm(dim=1),
    "l1_dim": lambda a: a.norm(p=1, dim=0),
    "inf_all": lambda a: torch.linalg.vector_norm(a, ord=float("inf")),
    "l3_dim": lambda a: torch.linalg.vector_norm(a, ord=3, dim=1),
    "matrix_fro": lambda a: torch.linalg.matrix_norm(a),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("variant", list(NORMS))
def test_norm(variant: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(NORMS[variant], make((4, 6), dtype), **acc_tol(dtype))


SOFTMAXES: dict[str, Callable[[torch.Tensor], Any]] = {
    "softmax_last": lambda a: a.softmax(-1),
    "softmax_dim0": lambda a: a.softmax(0),
    "log_softmax_last": lambda a: F.log_softmax(a, -1),
    "log_softmax_dim0": lambda a: F.log_softmax(a, 0),
    "softmax_dtype_arg": lambda a: a.softmax(-1, dtype=torch.float32),
    "logsumexp_dim": lambda a: torch.logsumexp(a, 1),
    "logsumexp_all": lambda a: torch.logsumexp(a, (0, 1)),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("variant", list(SOFTMAXES))
def test_softmax_family(variant: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(SOFTMAXES[variant], make((4, 6), dtype) * 3, **acc_tol(dtype))


def test_softmax_large_values_are_stable() -> None:
    x = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, 0.0]])
    assert_close_to_cpu(lambda a: (a.softmax(-1), a.log_softmax(-1)), x)
    assert_close_to_cpu(lambda a: a.logsumexp(-1), x)


# --------------------------------------------------------------------------------------------
# Joining and splitting
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_cat_stack(dtype: torch.dtype) -> None:
    a, b = make((4, 6), dtype), make((2, 6), dtype)
    assert_close_to_cpu(lambda x, y: torch.cat([x, y]), a, b)
    assert_close_to_cpu(lambda x, y: torch.cat([x, y.t()[:6, :2].t()], dim=0), a, b)
    assert_close_to_cpu(lambda x, y: torch.cat([x.t(), x.t()], dim=1), a, b)
    assert_close_to_cpu(lambda x, y: torch.stack([x, x * 1]), a, b)
    assert_close_to_cpu(lambda x, y: torch.stack([x[0], y[0], y[1]], dim=1), a, b)


def test_cat_promotes_and_skips_empty() -> None:
    assert_close_to_cpu(
        lambda x, y, e: torch.cat([x, y, e]),
        make((4, 6)),
        make((2, 6), torch.int32),
        torch.empty(0),
    )
    out = torch.empty(6, 6)
    assert_close_to_cpu(lambda x, y, o: torch.cat([x, y], out=o), make((4, 6)), make((2, 6)), out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=ids)
def test_split_chunk_unbind(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype)
    assert_close_to_cpu(lambda a: a.split(2), x)
    assert_close_to_cpu(lambda a: a.split([1, 2, 3], dim=1), x)
    assert_close_to_cpu(lambda a: a.chunk(3, dim=1), x)
    assert_close_to_cpu(lambda a: a.unbind(0), x)
    assert_close_to_cpu(lambda a: torch.tensor_split(a, 3, dim=1), x)

    def write_through_split(a: torch.Tensor) -> torch.Tensor:
        for i, part in enumerate(a.split(2, dim=1)):
            part.add_(i)
        return a

    assert_close_to_cpu(write_through_split, x)


# --------------------------------------------------------------------------------------------
# Indexing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=ids)
def test_advanced_index_read(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype)
    rows = torch.tensor([3, 0, 0, -1])
    cols = torch.tensor([5, 1, 2])
    assert_close_to_cpu(lambda a, i: a[i], x, rows)
    assert_close_to_cpu(lambda a, j: a[:, j], x, cols)
    assert_close_to_cpu(lambda a, i: a[i, 2:], x, rows)
    assert_close_to_cpu(lambda a, i, j: a[i[:3], j], x, rows, cols)
    assert_close_to_cpu(lambda a, i, j: a[i.unsqueeze(1), j], x, rows, cols)
    assert_close_to_cpu(lambda a: a[[1, 2]], x)


def test_boolean_mask_index() -> None:
    x, m = make((4, 6)), make((4, 6), torch.bool)
    assert_close_to_cpu(lambda a, mask: a[mask], x, m)
    assert_close_to_cpu(lambda a, mask: a[mask[:, 0]], x, m)
    assert_close_to_cpu(lambda a, mask: torch.masked_select(a, mask), x, m)
    assert_close_to_cpu(lambda mask: mask.nonzero(), m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=ids)
def test_index_put(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype)
    rows = torch.tensor([3, 0, 1])
    dup = torch.tensor([2, 2, 0, 2])
    v = make((3, 6), dtype)

    def put(a: torch.Tensor, i: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
        a[i] = val
        a[:, i] = 7
        return a

    assert_close_to_cpu(put, x, rows, v)
    assert_close_to_cpu(
        lambda a, i, val: a.index_put_((i,), val, accumulate=True), x, dup, make((4, 6), dtype)
    )
    assert_close_to_cpu(lambda a, i, val: a.index_put((i, i + 1), val), x, rows, make((3,), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=ids)
def test_index_put_bool_mask(dtype: torch.dtype) -> None:
    # `x[mask] = value` has no data-dependent output shape (it is a masked fill).
    def put_mask(a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        a[m] = 0
        a[m[:, 0]] = 5
        return a

    assert_close_to_cpu(put_mask, make((4, 6), dtype), make((4, 6), torch.bool))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=ids)
def test_gather_scatter(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype)
    idx = torch.randint(0, 6, (4, 3))
    idx0 = torch.randint(0, 4, (2, 6))
    src = make((4, 3), dtype)
    assert_close_to_cpu(lambda a, i: a.gather(1, i), x, idx)
    assert_close_to_cpu(lambda a, i: torch.gather(a, 0, i), x, idx0)
    # Unique indices per row for scatter (duplicates make the result order-dependent).
    uniq = torch.stack([torch.randperm(6)[:3] for _ in range(4)])
    assert_close_to_cpu(lambda a, i, s: a.scatter(1, i, s), x, uniq, src)
    assert_close_to_cpu(lambda a, i, s: a.scatter_(1, i, s), x, uniq, src)
    assert_close_to_cpu(lambda a, i: a.scatter(1, i, 2), x, uniq)
    assert_close_to_cpu(lambda a, i, s: a.scatter_add(1, i, s), x, idx, src, **acc_tol(dtype))
    assert_close_to_cpu(lambda a, i, s: a.scatter_add_(1, i, s), x, idx, src, **acc_tol(dtype))


def test_scatter_reduce() -> None:
    x, idx, src = make((4, 6)), torch.randint(0, 6, (4, 3)), make((4, 3))
    for reduce in ("sum", "amax", "amin", "mean"):
        assert_close_to_cpu(lambda a, i, s, r=reduce: a.scatter_reduce(1, i, s, r), x, idx, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=ids)
def test_index_select(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype)
    assert_close_to_cpu(lambda a, i: a.index_select(0, i), x, torch.tensor([3, 1, 1]))
    assert_close_to_cpu(lambda a, i: a.index_select(1, i), x, torch.tensor([5, 0]))
    assert_close_to_cpu(lambda a, i: a.t().index_select(1, i), x, torch.tensor([2, 0]))


def test_index_add_copy_fill() -> None:
    x, idx, src = make((4, 6)), torch.tensor([0, 2, 0]), make((3, 6))
    assert_close_to_cpu(lambda a, i, s: a.index_add(0, i, s), x, idx, src)
    assert_close_to_cpu(lambda a, i, s: a.index_copy(0, i[1:], s[1:]), x, idx, src)
    assert_close_to_cpu(lambda a, i: a.index_fill(1, i, -1.0), x, idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ids)
def test_embedding(dtype: torch.dtype) -> None:
    weight = make((10, 6), dtype)
    ids_ = torch.tensor([[1, 9, 1], [0, 4, 3]])
    assert_close_to_cpu(F.embedding, ids_, weight)
    assert_close_to_cpu(lambda i, w: F.embedding(i, w, padding_idx=1), ids_, weight)


def test_print_and_repr(tpu: torch.device) -> None:
    for x in (make((4, 6)), make((4, 6), torch.int64), make((3,), torch.bool), torch.tensor(2.5)):
        t = x.to(tpu)
        text = repr(t)
        assert "device='tpu:0'" in text
        assert re.sub(r",\s*device='tpu:0'", "", text) == repr(x)
        assert str(t) == text


def test_add_alpha_is_not_taken_from_a_cached_executable(tpu: torch.device) -> None:
    # Scalars are runtime inputs: an executable cached for alpha=1 must not serve alpha=2.
    a, b = make((3, 5)), make((3, 5))
    ta, tb = a.to(tpu), b.to(tpu)
    for alpha in (1, 2, -0.5, 1):
        assert_same(torch.add(ta, tb, alpha=alpha), torch.add(a, b, alpha=alpha))
        assert_same(torch.sub(ta, tb, alpha=alpha), torch.sub(a, b, alpha=alpha))
    ia, ib = make((3, 5), torch.int32), make((3, 5), torch.int32)
    for alpha in (1, 3):
        assert_same(torch.add(ia.to(tpu), ib.to(tpu), alpha=alpha), torch.add(ia, ib, alpha=alpha))


def test_item_and_tolist(tpu: torch.device) -> None:
    x = make((4, 6))
    t = x.to(tpu)
    assert t[1, 2].item() == x[1, 2].item()
    assert t.sum().item() == pytest.approx(x.sum().item(), rel=1e-5)
    assert t.tolist() == x.tolist()
    assert int(torch.tensor(7, device=tpu)) == 7
    assert bool(t[0, 0] == x[0, 0].item())


# --------------------------------------------------------------------------------------------
# Neural-network functionals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_layer_norm(dtype: torch.dtype) -> None:
    x, w, b = make((2, 4, 16), dtype), make((16,), dtype), make((16,), dtype)
    tol = acc_tol(dtype)
    assert_close_to_cpu(lambda a, ww, bb: F.layer_norm(a, (16,), ww, bb), x, w, b, **tol)
    assert_close_to_cpu(lambda a: F.layer_norm(a, (16,)), x, **tol)
    assert_close_to_cpu(lambda a: F.layer_norm(a, (4, 16), eps=1e-3), x, **tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_rms_norm(dtype: torch.dtype) -> None:
    x, w = make((2, 4, 16), dtype), make((16,), dtype)
    tol = acc_tol(dtype)
    assert_close_to_cpu(lambda a, ww: F.rms_norm(a, (16,), ww, eps=1e-6), x, w, **tol)
    assert_close_to_cpu(lambda a: F.rms_norm(a, (16,)), x, **tol)


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
    "silu": F.silu,
    "leaky_relu": lambda a: F.leaky_relu(a, 0.1),
    "relu6": F.relu6,
    "hardtanh": lambda a: F.hardtanh(a, -1.5, 2.0),
    "elu": F.elu,
    "softplus": F.softplus,
    "mish": F.mish,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations(name: str, dtype: torch.dtype) -> None:
    assert_close_to_cpu(ACTIVATIONS[name], make((4, 6), dtype) * 3)


def test_activations_inplace() -> None:
    x = make((4, 6))
    assert_close_to_cpu(lambda a: F.relu(a, inplace=True), x)
    assert_close_to_cpu(lambda a: F.silu(a, inplace=True), x)
    assert_close_to_cpu(lambda a: F.relu(a[:, 1:], inplace=True), x)


def test_dropout_train(tpu: torch.device) -> None:
    p = 0.3
    x = torch.ones(64, 64, device=tpu)
    y = F.dropout(x, p=p, training=True)
    assert y.device.type == "tpu"
    out = y.cpu()
    zero_fraction = (out == 0).float().mean().item()
    assert abs(zero_fraction - p) < 0.05
    kept = out[out != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / (1 - p)))
    # Two draws differ; the same seed repeats the mask.
    assert not torch.equal(F.dropout(x, p=p).cpu(), out)
    torch.tpu.manual_seed(42)
    m1 = F.dropout(x, p=p).cpu()
    torch.tpu.manual_seed(42)
    torch.testing.assert_close(F.dropout(x, p=p).cpu(), m1, atol=0, rtol=0)


def test_dropout_eval_and_edge_cases(tpu: torch.device) -> None:
    x = make((4, 6)).to(tpu)
    assert torch.equal(F.dropout(x, p=0.5, training=False).cpu(), x.cpu())
    assert torch.equal(F.dropout(x, p=0.0, training=True).cpu(), x.cpu())
    assert torch.equal(F.dropout(x, p=1.0, training=True).cpu(), torch.zeros(4, 6))
    module = torch.nn.Dropout(0.5).eval()
    assert torch.equal(module(x).cpu(), x.cpu())


def test_dropout_backward(tpu: torch.device) -> None:
    p = 0.25
    x = torch.ones(32, 32, device=tpu, requires_grad=True)
    y = F.dropout(x, p=p, training=True)
    y.sum().backward()
    assert x.grad is not None
    grad, out = x.grad.cpu(), y.detach().cpu()
    torch.testing.assert_close(grad, (out != 0).float() / (1 - p))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ids)
def test_losses(dtype: torch.dtype) -> None:
    logits, target = make((8, 5), dtype), torch.randint(0, 5, (8,))
    tol = acc_tol(dtype)
    assert_close_to_cpu(F.cross_entropy, logits, target, **tol)
    assert_close_to_cpu(lambda x, t: F.cross_entropy(x, t, reduction="none"), logits, target, **tol)
    assert_close_to_cpu(lambda x, t: F.cross_entropy(x, t, reduction="sum"), logits, target, **tol)
    target_ignore = target.clone()
    target_ignore[:3] = -100
    assert_close_to_cpu(F.cross_entropy, logits, target_ignore, **tol)
    assert_close_to_cpu(
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), logits, target, **tol
    )
    assert_close_to_cpu(
        lambda x, t: F.cross_entropy(x, t.softmax(-1)), logits, make((8, 5), dtype), **tol
    )
    assert_close_to_cpu(lambda x, t: F.nll_loss(F.log_softmax(x, -1), t), logits, target, **tol)
    assert_close_to_cpu(
        lambda x, t, w: F.nll_loss(x.log_softmax(-1), t, weight=w),
        logits,
        target,
        make((5,), dtype, positive=True),
        **tol,
    )
    assert_close_to_cpu(F.mse_loss, make((8, 5), dtype), make((8, 5), dtype), **tol)
    assert_close_to_cpu(
        lambda a, b: F.mse_loss(a, b, reduction="sum"),
        make((8, 5), dtype),
        make((8, 5), dtype),
        **tol,
    )


def test_cross_entropy_3d() -> None:
    # (batch, classes, seq) as in language models that keep the class dim second.
    assert_close_to_cpu(
        F.cross_entropy, make((2, 5, 3)), torch.randint(0, 5, (2, 3)), atol=1e-5, rtol=1e-5
    )


CONV_CASES = {
    "basic": {"stride": 1, "padding": 0, "groups": 1},
    "stride2_pad1": {"stride": 2, "padding": 1, "groups": 1},
    "groups2": {"stride": 1, "padding": 1, "groups": 2},
    "depthwise": {"stride": 1, "padding": 1, "groups": 4},
    "dilation": {"stride": 1, "padding": 2, "groups": 1, "dilation": 2},
    "same": {"stride": 1, "padding": "same", "groups": 1},
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d(case: str) -> None:
    kw = CONV_CASES[case]
    groups = int(kw["groups"])  # type: ignore[arg-type]
    x = make((2, 4, 8, 8))
    w = make((6 if groups != 4 else 4, 4 // groups, 3, 3))
    b = make((w.shape[0],))
    assert_close_to_cpu(
        lambda a, ww, bb: F.conv2d(a, ww, bb, **kw), x, w, b, **acc_tol(torch.float32)
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=ids)
def test_conv2d_low_precision(dtype: torch.dtype) -> None:
    x, w = make((2, 4, 8, 8), dtype), make((6, 4, 3, 3), dtype)
    assert_close_to_cpu(lambda a, ww: F.conv2d(a, ww, padding=1), x, w, atol=0.1, rtol=0.05)


def test_conv1d() -> None:
    assert_close_to_cpu(
        lambda a, w: F.conv1d(a, w, padding=1),
        make((2, 4, 16)),
        make((6, 4, 3)),
        **acc_tol(torch.float32),
    )


def test_pooling() -> None:
    x = make((2, 4, 8, 8))
    assert_close_to_cpu(lambda a: F.max_pool2d(a, 2), x)
    assert_close_to_cpu(lambda a: F.max_pool2d(a, 3, stride=2, padding=1), x)
    assert_close_to_cpu(lambda a: F.max_pool2d(a, 2, return_indices=True), x)
    assert_close_to_cpu(lambda a: F.avg_pool2d(a, 2), x)
    assert_close_to_cpu(lambda a: F.avg_pool2d(a, 3, stride=2, padding=1), x)
    assert_close_to_cpu(
        lambda a: F.avg_pool2d(a, 3, stride=2, padding=1, count_include_pad=False), x
    )
    assert_close_to_cpu(lambda a: F.adaptive_avg_pool2d(a, 1), x)
    assert_close_to_cpu(lambda a: F.adaptive_avg_pool2d(a, (2, 4)), x)
    assert_close_to_cpu(lambda a: F.adaptive_avg_pool2d(a, 3), x)  # uneven windows


def test_batch_norm_train_updates_running_stats() -> None:
    def fn(
        x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, w: torch.Tensor, b: torch.Tensor
    ) -> torch.Tensor:
        y = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.1, eps=1e-5)
        return F.batch_norm(y * 2 + 1, mean, var, w, b, training=True, momentum=0.3)

    # check_args compares running_mean/running_var after the two updates.
    assert_close_to_cpu(
        fn,
        make((8, 4, 5, 5)),
        torch.zeros(4),
        torch.ones(4),
        make((4,)),
        make((4,)),
        **acc_tol(torch.float32),
    )


def test_batch_norm_eval_and_module() -> None:
    x = make((8, 4, 5, 5))
    assert_close_to_cpu(
        lambda a, m, v: F.batch_norm(a, m, v, training=False),
        x,
        make((4,)),
        make((4,), positive=True),
    )
    bn_cpu = torch.nn.BatchNorm2d(4)
    bn_tpu = torch.nn.BatchNorm2d(4).to(TPU)
    for _ in range(2):
        assert_same(bn_tpu(x.to(TPU)), bn_cpu(x), atol=1e-4, rtol=1e-4)
    assert bn_tpu.num_batches_tracked.device.type == "tpu"
    assert_same(bn_tpu.state_dict(), bn_cpu.state_dict(), atol=1e-5, rtol=1e-5)
    bn_cpu.eval()
    bn_tpu.eval()
    assert_same(bn_tpu(x.to(TPU)), bn_cpu(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ids)
def test_sdpa(dtype: torch.dtype) -> None:
    q, k, v = (make((2, 2, 8, 16), dtype) for _ in range(3))
    tol = acc_tol(dtype)
    assert_close_to_cpu(F.scaled_dot_product_attention, q, k, v, **tol)
    assert_close_to_cpu(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v, **tol
    )
    bool_mask = torch.rand(8, 8) > 0.3
    bool_mask[:, 0] = True  # no fully-masked rows
    assert_close_to_cpu(
        lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m),
        q,
        k,
        v,
        bool_mask,
        **tol,
    )
    float_mask = make((2, 1, 8, 8), dtype)
    assert_close_to_cpu(
        lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m, scale=0.3),
        q,
        k,
        v,
        float_mask,
        **tol,
    )


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------


def leaf(shape: tuple[int, ...], *, positive: bool = False) -> torch.Tensor:
    return make(shape, positive=positive).requires_grad_(True)


GRAD_TOL = {"atol": 1e-4, "rtol": 1e-4}

GRAD_CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "arith": (
        lambda a, b: (a * b + a / (b.abs() + 1) - b) ** 2,
        lambda: (leaf((4, 6)), leaf((6,))),
    ),
    "unary": (
        lambda a: a.exp() + a.tanh() + a.sigmoid() + a.sin() + a.abs().sqrt(),
        lambda: (leaf((4, 6)),),
    ),
    "log_pow": (lambda a: a.log() * a.pow(1.5) + a.rsqrt(), lambda: (leaf((4, 6), positive=True),)),
    "activations": (
        lambda a: (
            F.gelu(a) + F.silu(a) + F.relu(a) + F.leaky_relu(a, 0.2) + F.gelu(a, approximate="tanh")
        ),
        lambda: (leaf((4, 6)),),
    ),
    "where_clamp": (
        lambda a, b: torch.where(a > 0, a, b).clamp(-0.5, 0.5) + a.masked_fill(a < -1, 0),
        lambda: (leaf((4, 6)), leaf((4, 6))),
    ),
    "views": (
        lambda a: a[1:, ::2].t().reshape(-1) * a.view(-1)[:9] + a.diagonal().sum(),
        lambda: (leaf((4, 6)),),
    ),
    "expand": (lambda a: a.unsqueeze(0).expand(3, 4, 6) * 2, lambda: (leaf((4, 6)),)),
    "mm": (torch.mm, lambda: (leaf((8, 16)), leaf((16, 4)))),
    "bmm": (torch.bmm, lambda: (leaf((3, 8, 16)), leaf((3, 16, 4)))),
    "matmul_bcast": (torch.matmul, lambda: (leaf((2, 3, 8, 16)), leaf((16, 4)))),
    "addmm": (torch.addmm, lambda: (leaf((4,)), leaf((8, 16)), leaf((16, 4)))),
    "linear": (F.linear, lambda: (leaf((2, 8, 16)), leaf((4, 16)), leaf((4,)))),
    "sum_mean": (lambda a: a.sum(0) * a.mean(1, keepdim=True), lambda: (leaf((4, 6)),)),
    "var_std_norm": (
        lambda a: a.var(1) + a.std(1) + a.norm(dim=1) + a.norm(),
        lambda: (leaf((4, 6)),),
    ),
    "amax": (
        lambda a: a.amax(1) + a.max(0).values.sum(),
        lambda: (distinct((4, 6), torch.float32).requires_grad_(),),
    ),
    "softmax": (
        lambda a: a.softmax(-1) * a.log_softmax(0) + a.logsumexp(1, keepdim=True),
        lambda: (leaf((4, 6)),),
    ),
    "cat_stack_split": (
        lambda a, b: torch.cat([a, b]).split(3)[1] * torch.stack([a, a])[1, :3].sum(),
        lambda: (leaf((4, 6)), leaf((2, 6))),
    ),
    # Index tensors are arguments, so they travel to tpu with the data.
    "index": (
        lambda a, i: a[i] * a[:, i].sum(0, keepdim=True).t()[:3],
        lambda: (leaf((4, 6)), torch.tensor([3, 0, 0])),
    ),
    "gather_scatter_add": (
        lambda a, s, i: a.gather(1, i) + a.scatter_add(1, i, s)[:, :2],
        lambda: (leaf((4, 6)), leaf((4, 2)), torch.tensor([[0, 0], [5, 1], [2, 3], [4, 4]])),
    ),
    "index_select": (
        lambda a, i: a.index_select(1, i),
        lambda: (leaf((4, 6)), torch.tensor([4, 0, 4])),
    ),
    "embedding": (
        lambda w, i: F.embedding(i, w),
        lambda: (leaf((10, 6)), torch.tensor([[1, 9, 1], [0, 4, 3]])),
    ),
    "layer_norm": (
        lambda a, w, b: F.layer_norm(a, (16,), w, b),
        lambda: (leaf((2, 4, 16)), leaf((16,)), leaf((16,))),
    ),
    "rms_norm": (lambda a, w: F.rms_norm(a, (16,), w), lambda: (leaf((2, 4, 16)), leaf((16,)))),
    "cross_entropy": (
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
        lambda: (leaf((8, 5)), torch.tensor([0, 4, 2, 2, 1, 0, 3, 4])),
    ),
    "nll_loss": (
        lambda x, t: F.nll_loss(x.log_softmax(-1), t),
        lambda: (leaf((8, 5)), torch.tensor([0, 4, 2, 2, 1, 0, 3, 4])),
    ),
    "mse_loss": (F.mse_loss, lambda: (leaf((8, 5)), leaf((8, 5)))),
    "conv2d": (
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        lambda: (leaf((2, 4, 8, 8)), leaf((6, 4, 3, 3)), leaf((6,))),
    ),
    "conv2d_groups": (
        lambda x, w: F.conv2d(x, w, padding=1, groups=2),
        lambda: (leaf((2, 4, 8, 8)), leaf((6, 2, 3, 3))),
    ),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), lambda: (leaf((2, 4, 8, 8)),)),
    "avg_pool2d": (
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
        lambda: (leaf((2, 4, 8, 8)),),
    ),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 1), lambda: (leaf((2, 4, 8, 8)),)),
    "batch_norm": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda: (leaf((8, 4, 5, 5)), leaf((4,)), leaf((4,))),
    ),
    "sdpa": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        lambda: (leaf((2, 2, 8, 16)), leaf((2, 2, 8, 16)), leaf((2, 2, 8, 16))),
    ),
    "sdpa_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: (leaf((2, 2, 8, 16)), leaf((2, 2, 8, 16)), leaf((2, 2, 8, 16))),
    ),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_backward(name: str) -> None:
    fn, make_args = GRAD_CASES[name]
    assert_grads_close_to_cpu(fn, *make_args(), **GRAD_TOL)


def test_backward_accumulates_and_inplace_on_leaf_view(tpu: torch.device) -> None:
    w_cpu = leaf((4, 6))
    w_tpu = w_cpu.detach().to(tpu).requires_grad_()
    for w in (w_cpu, w_tpu):
        for _ in range(2):
            (w * w).sum().backward()  # grads accumulate into .grad
        with torch.no_grad():
            w[1:].mul_(0.5)  # in-place on a view of a leaf under no_grad
    assert w_tpu.grad is not None and w_cpu.grad is not None
    assert_same(w_tpu.grad, w_cpu.grad)
    assert_same(w_tpu, w_cpu)


# --------------------------------------------------------------------------------------------
# Optimizers and gradient clipping
# --------------------------------------------------------------------------------------------


def make_model_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    cpu = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    dev = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to(TPU)


def set_same_grads(cpu: torch.nn.Module, dev: torch.nn.Module, step: int) -> None:
    gen = torch.Generator().manual_seed(step)
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters(), strict=True):
        g = torch.randn(p_cpu.shape, generator=gen)
        p_cpu.grad = g.clone()
        p_dev.grad = g.to(TPU)


OPTIMIZERS: dict[str, Callable[[Any, bool], torch.optim.Optimizer]] = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.1, foreach=foreach),
    "sgd_momentum": lambda params, foreach: torch.optim.SGD(
        params, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True, foreach=foreach
    ),
    "adamw": lambda params, foreach: torch.optim.AdamW(
        params, lr=0.01, weight_decay=0.1, foreach=foreach
    ),
    "adam_amsgrad": lambda params, foreach: torch.optim.Adam(
        params, lr=0.01, amsgrad=True, foreach=foreach
    ),
}


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "foreach"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps(name: str, foreach: bool) -> None:
    cpu, dev = make_model_pair()
    opt_cpu = OPTIMIZERS[name](cpu.parameters(), foreach)
    opt_dev = OPTIMIZERS[name](dev.parameters(), foreach)
    for step in range(3):
        set_same_grads(cpu, dev, step)
        opt_cpu.step()
        opt_dev.step()
        assert_same(
            dict(dev.named_parameters()), dict(cpu.named_parameters()), atol=1e-5, rtol=1e-5
        )
    for p in dev.parameters():
        for value in opt_dev.state[p].values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                assert value.device.type == "tpu"


def test_optimizer_zero_grad_and_real_backward() -> None:
    cpu, dev = make_model_pair()
    x, y = make((5, 6)), torch.randint(0, 3, (5,))
    opt_cpu = torch.optim.AdamW(cpu.parameters(), lr=0.05)
    opt_dev = torch.optim.AdamW(dev.parameters(), lr=0.05)
    for _ in range(3):
        for model, opt, dx, dy in ((cpu, opt_cpu, x, y), (dev, opt_dev, x.to(TPU), y.to(TPU))):
            opt.zero_grad()
            F.cross_entropy(model(dx), dy).backward()
            opt.step()
    assert_same(dict(dev.named_parameters()), dict(cpu.named_parameters()), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "foreach"])
@pytest.mark.parametrize("norm_type", [2.0, float("inf")], ids=["l2", "inf"])
def test_clip_grad_norm(foreach: bool, norm_type: float) -> None:
    cpu, dev = make_model_pair()
    set_same_grads(cpu, dev, 0)
    total_cpu = torch.nn.utils.clip_grad_norm_(
        cpu.parameters(), max_norm=0.5, norm_type=norm_type, foreach=foreach
    )
    total_dev = torch.nn.utils.clip_grad_norm_(
        dev.parameters(), max_norm=0.5, norm_type=norm_type, foreach=foreach
    )
    assert total_dev.device.type == "tpu"
    assert_same(total_dev, total_cpu, atol=1e-5, rtol=1e-5)
    for p_dev, p_cpu in zip(dev.parameters(), cpu.parameters(), strict=True):
        assert p_dev.grad is not None and p_cpu.grad is not None
        assert_same(p_dev.grad, p_cpu.grad, atol=1e-6, rtol=1e-5)
    torch.nn.utils.clip_grad_value_(dev.parameters(), 0.01)
    torch.nn.utils.clip_grad_value_(cpu.parameters(), 0.01)
    for p_dev, p_cpu in zip(dev.parameters(), cpu.parameters(), strict=True):
        assert_same(p_dev.grad, p_cpu.grad)


# --------------------------------------------------------------------------------------------
# Dispatcher behaviour visible from Python
# --------------------------------------------------------------------------------------------


def test_new_scalar_value_does_not_recompile(tpu: torch.device) -> None:
    import torch_tpu

    t = make((4, 6)).to(tpu)
    t.add_(t, alpha=-0.05)  # warm the cache for these ops and this shape
    (t * 1.25 + 0.5).cpu()
    torch_tpu.reset_metrics()
    for lr in (0.1, 0.2, 0.3):
        t.add_(t, alpha=-lr)
        (t * lr + lr).cpu()
    assert torch_tpu.metrics()["compiles"] == 0


def test_calls_differing_only_in_a_built_in_argument_compute_their_own_results(
    tpu: torch.device,
) -> None:
    """Dims, flags, int lists, strings and float constants are built into an op's executable
    (they are part of its cache key): each value must get its own."""
    x, y = make((3, 5)), make((3, 5), positive=True)
    calls: list[tuple[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = [
        ("softmax dim 0", lambda a, b: torch.softmax(a, 0)),
        ("softmax dim 1", lambda a, b: torch.softmax(a, 1)),
        ("sum dim 0", lambda a, b: a.sum(0)),
        ("sum dim 1", lambda a, b: a.sum(1)),
        ("sum dims [0, 1]", lambda a, b: a.sum([0, 1])),
        ("sum dim 1 keepdim", lambda a, b: a.sum(1, keepdim=True)),
        ("gelu", lambda a, b: F.gelu(a)),
        ("gelu tanh", lambda a, b: F.gelu(a, approximate="tanh")),
        ("div floor", lambda a, b: torch.div(a * 7, b, rounding_mode="floor")),
        ("div trunc", lambda a, b: torch.div(a * 7, b, rounding_mode="trunc")),
        ("layer_norm eps 1e-5", lambda a, b: F.layer_norm(a, (5,), eps=1e-5)),
        ("layer_norm eps 4", lambda a, b: F.layer_norm(a, (5,), eps=4.0)),
    ]
    for _ in range(2):  # the second round hits each call's cached executable
        for name, call in calls:
            got = call(x.to(tpu), y.to(tpu))
            torch.testing.assert_close(got.cpu(), call(x, y), msg=name)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=ids)
def test_complex_linspace_and_logspace(dtype: torch.dtype, tpu: torch.device) -> None:
    # linspace dropped the imaginary parts of complex ends (found once the operator sweep gave
    # factories device='tpu'); logspace raises CPU's pow of a complex exponent.
    for args in ((1 + 2j, -3 + 0.5j, 9), (0, 3, 7), (1j, 1j, 1)):
        assert_same(
            torch.linspace(*args, dtype=dtype, device=tpu), torch.linspace(*args, dtype=dtype)
        )
        torch.testing.assert_close(
            torch.logspace(*args, dtype=dtype, device=tpu).cpu(), torch.logspace(*args, dtype=dtype)
        )
