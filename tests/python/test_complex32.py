"""complex32 (torch.chalf) on tpu, against CPU: XLA has no such element type, so tpu computes it
as complex64 and stores two float16 parts, in torch's layout. Where CPU has a kernel the results
must be equal; where it has none (CUDA computes them), against CPU's complex64 result rounded to
complex32."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torch_tpu

TPU = torch.device("tpu")
pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")


def sample() -> torch.Tensor:
    return torch.tensor([1 + 2j, -3.5 + 0.25j, 1e-3 - 7j, 0j, 60000 + 1j], dtype=torch.chalf)


def other() -> torch.Tensor:
    return torch.tensor([2 - 1j, 0.5j, -4 + 0.125j, 3 + 3j, -1 - 1j], dtype=torch.chalf)


def same(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.device.type == "tpu" and got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


def test_values_keep_torch_layout_through_the_device_and_views() -> None:
    x = sample()
    on_device = x.to(TPU)
    same(on_device, x)
    # The float16 view shares the storage: (real, imaginary) pairs, as on CPU.
    pairs = torch.view_as_real(on_device)
    assert pairs.dtype == torch.float16 and pairs.untyped_storage().data_ptr() == (
        on_device.untyped_storage().data_ptr()
    )
    same(pairs, torch.view_as_real(x))
    same(on_device.real, x.real)
    same(on_device.imag, x.imag)
    # A write through the float16 view is seen through the complex32 tensor.
    pairs[:, 1].fill_(2.0)
    expected = x.clone()
    torch.view_as_real(expected)[:, 1].fill_(2.0)
    same(on_device, expected)
    # And back: float16 pairs viewed as complex32.
    same(torch.view_as_complex(torch.view_as_real(x).to(TPU)), x)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_ops_cpu_computes_give_cpu_results(mode: str) -> None:
    x, y = sample(), other()
    ops: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "add": torch.add,
        "sub": lambda a, b: a - 2 * b,
        "mul": torch.mul,
        "mul by complex": lambda a, b: a * complex(0.5, -3),
        "overflow": lambda a, b: a * 100000,
        "neg": lambda a, b: -a,
        "conj": lambda a, b: a.conj().resolve_conj(),
        "abs": lambda a, b: a.abs(),
        "eq": torch.eq,
        "ne": lambda a, b: a != a,
        "cat": lambda a, b: torch.cat([a, b]),
        "index": lambda a, b: a[[4, 0, 2]],
        "where": lambda a, b: torch.where(a.real > 0, a, b),
        "fill": lambda a, b: a.clone().fill_(1 - 2j),
        "to complex64": lambda a, b: a.to(torch.complex64),
        "from complex64": lambda a, b: a.to(torch.complex64).mul(1.0001).to(torch.chalf),
        "from parts": lambda a, b: torch.complex(a.real, b.imag),
    }
    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        for name, op in ops.items():
            expected = op(x, y)
            got = op(x.to(TPU), y.to(TPU))
            assert got.dtype == expected.dtype, name
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


def test_promotion_with_every_dtype_matches_cpu() -> None:
    chalf = torch.tensor(5.5 - 1j, dtype=torch.chalf)
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    ):
        operand = torch.tensor(3, dtype=dtype)
        for expected, got in (
            (chalf * operand, chalf.to(TPU) * operand.to(TPU)),
            (operand + chalf, operand.to(TPU) + chalf.to(TPU)),
            # A 1-d tensor of `dtype` with the 0-d complex32 one: complex, of its own width.
            (
                torch.ones(2, dtype=dtype) * chalf,
                torch.ones(2, dtype=dtype, device=TPU) * chalf.to(TPU),
            ),
        ):
            assert got.dtype == expected.dtype, dtype
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_ops_cpu_lacks_match_complex64_rounded() -> None:
    x = sample()[:4]
    y = other()[:4]
    ops: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "div": torch.div,
        "exp": lambda a, b: (a / 8).exp(),
        "sum": lambda a, b: a.sum(),
        "matmul": lambda a, b: a.reshape(4, 1) @ b.reshape(1, 4),
    }
    for name, op in ops.items():
        expected = op(x.to(torch.complex64), y.to(torch.complex64)).to(torch.chalf)
        got = op(x.to(TPU), y.to(TPU))
        assert got.dtype == torch.chalf, name
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-3, atol=1e-3)


def test_samplers_draw_both_halves_as_cpu() -> None:
    # normal_ and uniform_ fill both parts of the real view, as on CPU (normal_ with std/sqrt(2)
    # per part); they failed to compile for complex32 (f16 parts, f32 arithmetic).
    torch.manual_seed(0)
    count = 20000
    for fill, mean, std in (
        (lambda t: t.normal_(1.0, 2.0), 1.0, 2.0 / 2**0.5),
        (lambda t: t.uniform_(-1.0, 3.0), 1.0, 4.0 / 12**0.5),
    ):
        on_device = fill(torch.empty(count, dtype=torch.chalf, device=TPU))
        on_cpu = fill(torch.empty(count, dtype=torch.chalf))
        for got in (on_device.cpu(), on_cpu):
            parts = torch.view_as_real(got).float()
            torch.testing.assert_close(parts.mean(0), torch.full((2,), mean), atol=0.06, rtol=0)
            torch.testing.assert_close(parts.std(0), torch.full((2,), std), atol=0.06, rtol=0)
