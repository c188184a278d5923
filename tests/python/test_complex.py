"""Complex tensors on tpu against CPU: storage round trips, the views between complex and real
tensors (and Tensor.view(dtype)), lazy conjugation, arithmetic, torch.fft and its gradients,
and clear errors for ops that do not take complex tensors yet."""

from __future__ import annotations

import pytest
import torch

DEVICE = "tpu"
CLOSE = {"atol": 1e-4, "rtol": 1e-4}


def tpu(x: torch.Tensor) -> torch.Tensor:
    return x.to(DEVICE)


def randc(*shape: int, dtype: torch.dtype = torch.complex64) -> torch.Tensor:
    torch.manual_seed(sum(shape) + len(shape))
    return torch.randn(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_round_trip_and_arithmetic(dtype: torch.dtype) -> None:
    a, b = randc(3, 5, dtype=dtype), randc(5, dtype=dtype)
    a_t, b_t = tpu(a), tpu(b)
    assert a_t.dtype == dtype
    torch.testing.assert_close(a_t.cpu(), a, rtol=0, atol=0)
    want = (a * b + a) / (b - 2.5) - a.exp() * 1j
    torch.testing.assert_close(((a_t * b_t + a_t) / (b_t - 2.5) - a_t.exp() * 1j).cpu(), want)
    torch.testing.assert_close(a_t.sum(dim=0).cpu(), a.sum(dim=0))
    torch.testing.assert_close(a_t.cumsum(dim=1).cpu(), a.cumsum(dim=1))
    torch.testing.assert_close(
        torch.rsub(a_t, b_t, alpha=2 - 1j).cpu(), torch.rsub(a, b, alpha=2 - 1j)
    )
    torch.testing.assert_close(torch.rsub(a_t, 2.5 + 1j).cpu(), torch.rsub(a, 2.5 + 1j))
    torch.testing.assert_close((a_t**2).cpu(), a**2, **CLOSE)
    torch.testing.assert_close(a_t.pow(b_t).cpu(), a.pow(b), **CLOSE)
    torch.testing.assert_close(a_t.abs().cpu(), a.abs())
    torch.testing.assert_close(a_t.sgn().cpu(), a.sgn())
    assert a_t.abs().dtype == a.abs().dtype


def test_real_to_complex_parts_and_polar() -> None:
    torch.manual_seed(1)
    re, im = torch.randn(4, 3), torch.randn(4, 3)
    z = torch.complex(re, im)
    torch.testing.assert_close(torch.complex(tpu(re), tpu(im)).cpu(), z)
    torch.testing.assert_close(torch.polar(tpu(re.abs()), tpu(im)).cpu(), torch.polar(re.abs(), im))
    z_t = tpu(z)
    torch.testing.assert_close(z_t.real.cpu(), re)
    torch.testing.assert_close(z_t.imag.cpu(), im)
    # float -> complex conversion keeps a zero imaginary part
    torch.testing.assert_close(tpu(re).to(torch.complex64).cpu(), re.to(torch.complex64))


def test_view_as_real_aliases_the_complex_storage() -> None:
    z = randc(2, 3)
    z_t = tpu(z)
    r_t = torch.view_as_real(z_t)
    r_t[..., 1] = 7.0  # writes through the real view
    z[...] = torch.complex(z.real, torch.full_like(z.real, 7.0))
    torch.testing.assert_close(z_t.cpu(), z)
    z_t.mul_(2)  # and the real view sees writes to the complex tensor
    torch.testing.assert_close(r_t.cpu(), torch.view_as_real(z * 2))
    back = torch.view_as_complex(r_t)
    torch.testing.assert_close(back.cpu(), z * 2)


def rotate_pairs(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """RoPE as TorchTitan writes it: pairs of a computed activation seen as complex numbers."""
    pairs = torch.view_as_complex((x * 2).reshape(*x.shape[:-1], -1, 2))
    return (torch.view_as_real(pairs * freqs).flatten(-2) * 0.5 + 1).sum(0)


@pytest.mark.parametrize("mode", ["defer_and_fuse", "compiled"])
def test_a_pending_value_read_as_complex_stays_in_the_graph(mode: str) -> None:
    # view_as_complex of a value the pending graph has not written out yet, and view_as_real
    # of the product: each read through the other dtype is an op of the same graph, so the
    # whole computation is one execution (it used to run the graph at each reinterpretation).
    import torch_tpu

    x, freqs = torch.randn(4, 8), randc(4, 4)
    want = rotate_pairs(x, freqs)
    fn = torch.compile(rotate_pairs, backend="tpu") if mode == "compiled" else rotate_pairs
    previous = torch_tpu.get_eager_mode()
    torch_tpu.set_eager_mode("defer_and_fuse" if mode == "defer_and_fuse" else previous)
    try:
        for _ in range(3):  # compiled: recorded, then replayed
            x_t, f_t = tpu(x), tpu(freqs)
            torch.tpu.synchronize()
            before = torch_tpu.metrics()["executions"]
            got = fn(x_t, f_t).cpu()
            assert torch_tpu.metrics()["executions"] - before == 1
            torch.testing.assert_close(got, want, **CLOSE)
    finally:
        torch_tpu.set_eager_mode(previous)


@pytest.mark.parametrize("view_dtype", [torch.int32, torch.uint8, torch.int16, torch.bool])
def test_tensor_view_dtype_reinterprets_bits(view_dtype: torch.dtype) -> None:
    x = torch.tensor([0.0, 1.0, -2.5, 3.0e-39, float("inf"), 1.0])
    if view_dtype == torch.bool:
        x = torch.tensor([0, 1, 0, 1], dtype=torch.uint8)
    torch.testing.assert_close(tpu(x).view(view_dtype).cpu(), x.view(view_dtype), rtol=0, atol=0)
    # a write through the reinterpreted view lands in the original's bytes
    y = x.clone()
    y_t = tpu(y)
    y_t.view(view_dtype)[0] = 1
    y.view(view_dtype)[0] = 1
    torch.testing.assert_close(y_t.cpu(), y, rtol=0, atol=0, equal_nan=True)


def test_lazy_conjugation_is_applied_everywhere() -> None:
    z, w = randc(3, 4), randc(3, 4) * 2
    z_t = tpu(z)
    torch.testing.assert_close(z_t.conj().cpu(), z.conj())
    torch.testing.assert_close((z_t.conj() * tpu(w)).cpu(), z.conj() * w)
    torch.testing.assert_close(z_t.conj().imag.cpu(), z.conj().imag)  # negative bit
    # copies into a conjugated destination, from the device and from the host
    dst = torch.empty(3, 4, dtype=torch.complex64, device=DEVICE).conj()
    dst.copy_(tpu(w))
    torch.testing.assert_close(dst.cpu(), w)
    torch.testing.assert_close(dst.conj().resolve_conj().cpu(), w.conj())
    dst.copy_(z)
    torch.testing.assert_close(dst.cpu(), z)
    torch.testing.assert_close(tpu(z.conj()).cpu(), z.conj())


def test_matrix_products_with_conjugated_operands() -> None:
    a, b = randc(3, 4), randc(4, 5)
    torch.testing.assert_close((tpu(a) @ tpu(b)).cpu(), a @ b, **CLOSE)
    torch.testing.assert_close((tpu(a) @ tpu(a).mH).cpu(), a @ a.mH, **CLOSE)
    batch, other = randc(2, 3, 4), randc(2, 4, 2)
    torch.testing.assert_close(torch.bmm(tpu(batch), tpu(other)).cpu(), batch @ other, **CLOSE)


FFT_CASES = [
    ("fft", (8,), {}),
    ("fft", (3, 10), {"dim": 0, "norm": "ortho"}),
    ("ifft", (3, 7), {"n": 9}),
    ("fftn", (2, 3, 4, 5), {}),  # four dims: transformed in two groups
    ("ifftn", (4, 6), {"norm": "forward"}),
    ("fft2", (2, 4, 6), {"dim": (0, 2)}),
    ("rfft", (3, 9), {}),
    ("rfft2", (5, 6), {"norm": "ortho"}),
    ("rfftn", (2, 3, 4, 4), {}),
    ("irfft", (4, 5), {}),
    ("irfft", (4, 5), {"n": 11}),
    ("irfftn", (3, 4, 5), {"norm": "ortho"}),
    ("hfft", (6,), {"n": 9}),
    ("ihfft", (7,), {}),
]


@pytest.mark.parametrize(("name", "shape", "kwargs"), FFT_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fft_matches_cpu(
    name: str, shape: tuple[int, ...], kwargs: dict, dtype: torch.dtype
) -> None:
    fn = getattr(torch.fft, name)
    real_input = name.startswith(("rfft", "ihfft"))
    x = torch.randn(*shape, dtype=dtype)
    if not real_input:
        x = torch.complex(x, torch.randn(*shape, dtype=dtype))
    want = fn(x, **kwargs)
    got = fn(tpu(x), **kwargs)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, **CLOSE)


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fft2", "hfft"])
def test_fft_gradients_match_cpu(name: str) -> None:
    fn = getattr(torch.fft, name)
    torch.manual_seed(3)
    base = torch.randn(4, 6)
    if name in ("irfft", "hfft"):
        base = torch.complex(base, torch.randn(4, 6))

    def grad_on(device: str) -> torch.Tensor:
        x = base.to(device).requires_grad_()
        y = fn(x)
        parts = torch.view_as_real(y) if y.is_complex() else y
        weight = torch.linspace(-1, 1, parts.numel(), device=device).view(parts.shape)
        (parts * weight).sum().backward()
        return x.grad

    torch.testing.assert_close(grad_on(DEVICE).cpu(), grad_on("cpu"), **CLOSE)


def test_ops_without_complex_kernels_raise_type_error() -> None:
    z_t = tpu(randc(4))
    with pytest.raises(TypeError, match="nan_to_num does not support complex tensors"):
        torch.nan_to_num(z_t)
    with pytest.raises(RuntimeError, match="In-place abs is not supported for complex"):
        z_t.abs_()
    torch.testing.assert_close(z_t.cpu(), randc(4))  # nothing was written
    with pytest.raises(TypeError, match="is not supported on the tpu device"):
        torch.zeros(2, dtype=torch.float8_e8m0fnu, device=DEVICE)


def with_special_parts() -> torch.Tensor:
    nan, inf = float("nan"), float("inf")
    return torch.tensor(
        [1 + 2j, complex(nan, 1), complex(1, nan), complex(inf, 0), complex(0, -inf), 0j, 1 + 2j]
    )


def test_comparisons_and_classification_match_cpu() -> None:
    a = with_special_parts()
    b = torch.roll(a, 1)
    for fn in (torch.eq, torch.ne):
        assert torch.equal(fn(tpu(a), tpu(b)).cpu(), fn(a, b))
        assert torch.equal(fn(tpu(a), tpu(a)).cpu(), fn(a, a))
    assert torch.equal((tpu(a) == (1 + 2j)).cpu(), a == (1 + 2j))
    for fn in (torch.isnan, torch.isinf, torch.isfinite):
        assert torch.equal(fn(tpu(a)).cpu(), fn(a)), fn
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.lt(tpu(a), tpu(b))  # CPU has no order on complex numbers either


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_statistics_and_products_match_cpu(dtype: torch.dtype) -> None:
    x = randc(4, 5, dtype=dtype)
    x_t = tpu(x)
    for fn in (
        lambda t: t.mean(),
        lambda t: t.mean(dim=1, keepdim=True),
        lambda t: t.var(),
        lambda t: t.var(dim=0, correction=0),
        lambda t: t.std(dim=1),
        lambda t: torch.stack(torch.var_mean(t, dim=1)),
        lambda t: torch.std_mean(t, dim=0)[0],
        lambda t: t[:, :3].prod(),
        lambda t: t.prod(dim=1),
    ):
        got, want = fn(x_t), fn(x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, **CLOSE)


def test_assert_close_and_isclose_on_device() -> None:
    # torch.testing and the test suites compare complex tensors with eq, isclose and isfinite
    # on the tensors' own device.
    a = randc(6)
    torch.testing.assert_close(tpu(a), tpu(a.clone()))
    assert torch.equal(torch.isclose(tpu(a), tpu(a + 1e-9)).cpu(), torch.isclose(a, a + 1e-9))
    with pytest.raises(AssertionError):
        torch.testing.assert_close(tpu(a), tpu(a + 1j))


def test_normal_fills_both_parts() -> None:
    torch.manual_seed(0)
    z = torch.empty(20000, dtype=torch.complex64, device=DEVICE).normal_(mean=1.0, std=2.0)
    parts = torch.view_as_real(z.cpu())
    # As CPU: each part is normal(mean, std / sqrt(2)).
    torch.testing.assert_close(parts.mean(0), torch.tensor([1.0, 1.0]), atol=0.05, rtol=0)
    torch.testing.assert_close(parts.std(0), torch.full((2,), 2.0 / 2**0.5), atol=0.05, rtol=0)


def test_masked_fill_and_uniform() -> None:
    z = randc(5)
    mask = torch.tensor([True, False, True, False, False])
    got = tpu(z).masked_fill_(tpu(mask), 1 - 2j)
    torch.testing.assert_close(got.cpu(), z.masked_fill(mask, 1 - 2j))
    u = torch.empty(20000, dtype=torch.complex64, device=DEVICE).uniform_(2.0, 4.0)
    parts = torch.view_as_real(u.cpu())
    assert parts.min() >= 2.0 and parts.max() < 4.0  # both parts drawn, as CPU draws them
    torch.testing.assert_close(parts.mean(0), torch.tensor([3.0, 3.0]), atol=0.05, rtol=0)


# Data movement: gathers, scatters, index ops, masks, rolls and triangles move complex elements
# as they are (RoPE gathers complex frequencies by position).
MOVES = {
    "gather": lambda t, d: torch.gather(t, 1, torch.tensor([[0, 2, 1, 4, 3]] * 4, device=d)),
    "scatter": lambda t, d: torch.zeros_like(t).scatter(
        1, torch.tensor([[4, 0, 1, 2, 3]] * 4, device=d), t
    ),
    "scatter_add": lambda t, d: torch.zeros_like(t).scatter_add(
        1, torch.zeros(4, 5, dtype=torch.long, device=d), t
    ),
    "index_select": lambda t, d: t.index_select(0, torch.tensor([3, 0, 2], device=d)),
    "index_copy": lambda t, d: t.index_copy(0, torch.tensor([3, 0, 2], device=d), t[:3] * 2),
    "index_fill": lambda t, d: t.index_fill(0, torch.tensor([1], device=d), 1 + 2j),
    "index_add": lambda t, d: t.index_add(0, torch.tensor([3, 3, 2], device=d), t[:3], alpha=2),
    "take": lambda t, d: t.take(torch.tensor([19, 0, 7], device=d)),
    "roll": lambda t, d: t.roll(2, 1),
    "masked_select": lambda t, d: t.masked_select(t.real > 0),
    "masked_scatter": lambda t, d: t.masked_scatter(t.real > 0, t * 3),
    "repeat": lambda t, d: t.repeat(2, 1),
    "tril": lambda t, d: t.tril(),
    "triu": lambda t, d: t.triu(1),
}


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("name", sorted(MOVES))
def test_data_movement_matches_cpu(name: str, dtype: torch.dtype) -> None:
    z = randc(4, 5, dtype=dtype)
    expected = MOVES[name](z, torch.device("cpu"))
    assert torch.equal(MOVES[name](tpu(z), torch.device(DEVICE)).cpu(), expected)


def test_formulas_fixed_after_the_complex_sweep_match_cpu() -> None:
    """vdot conjugates its first operand, angle and trace keep complex semantics (a real angle,
    a complex sum), and tanh/sigmoid gradients use the conjugate derivative, as on CPU."""
    a, b = randc(6), randc(2, 3).flatten()
    torch.testing.assert_close(torch.vdot(tpu(a), tpu(b)).cpu(), torch.vdot(a, b))
    torch.testing.assert_close(torch.angle(tpu(a)).cpu(), torch.angle(a))
    m = randc(4).reshape(2, 2)
    torch.testing.assert_close(torch.trace(tpu(m)).cpu(), torch.trace(m))
    for fn in (torch.tanh, torch.sigmoid):
        x = randc(5).requires_grad_()
        x_t = tpu(x.detach()).requires_grad_()
        fn(x).abs().sum().backward()
        fn(x_t).abs().sum().backward()
        assert x_t.grad is not None and x.grad is not None
        torch.testing.assert_close(x_t.grad.cpu(), x.grad)
