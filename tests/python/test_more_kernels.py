"""Activations, losses, special functions, integer ops, selections, binning, patches, pooling,
transposed convolutions and rectangular LU against CPU, forward and backward."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

DEVICE = "tpu"


def both(fn: Callable[..., object], *inputs: torch.Tensor, **tolerance: float) -> None:
    """fn on tpu against CPU, with every float input's gradient for random output weights."""
    cpu = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    tpu = [x.detach().to(DEVICE).requires_grad_(x.is_floating_point()) for x in inputs]
    want, got = fn(*cpu), fn(*tpu)
    wants = list(want) if isinstance(want, (tuple, list)) else [want]
    gots = list(got) if isinstance(got, (tuple, list)) else [got]
    for g, w in zip(gots, wants, strict=True):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tolerance)  # type: ignore[arg-type]
    differentiable = [(g, w) for g, w in zip(gots, wants, strict=True) if w.requires_grad]
    if not differentiable:
        return
    torch.manual_seed(1)
    weights = [torch.randn(w.shape) for _, w in differentiable]
    sum((w * k).sum() for (_, w), k in zip(differentiable, weights, strict=True)).backward()
    sum(
        (g * k.to(DEVICE)).sum() for (g, _), k in zip(differentiable, weights, strict=True)
    ).backward()
    for xc, xt in zip(cpu, tpu, strict=True):
        if xc.grad is not None:
            assert xt.grad is not None
            torch.testing.assert_close(xt.grad.cpu(), xc.grad, equal_nan=True, **tolerance)  # type: ignore[arg-type]


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(*shape)


@pytest.mark.parametrize(
    "fn",
    [
        F.hardswish,
        F.hardsigmoid,
        lambda x: F.hardshrink(x, 0.4),
        lambda x: F.softshrink(x, 0.4),
        lambda x: F.glu(x, -1),
        lambda x: F.prelu(x, torch.tensor([0.1, 0.2, 0.3, 0.4], device=x.device)),
        lambda x: torch.logit(torch.sigmoid(x), eps=0.05),
        torch.sinc,
        torch.special.entr,
    ],
)
def test_activations_and_gradients(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    x = randn(3, 4) * 4
    x[0, 0], x[0, 1] = 3.0, -3.0  # hardswish/hardsigmoid break points
    both(fn, x)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_losses(reduction: str) -> None:
    x, y = randn(5, 3), randn(5, 3, seed=1)
    both(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5), x, y)
    both(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.7), x, y)
    p, t = torch.sigmoid(x), torch.rand(5, 3)
    w = torch.rand(5, 3)
    both(lambda a, b: F.binary_cross_entropy(a, b, w.to(a.device), reduction=reduction), p, t)


@pytest.mark.parametrize(
    "op",
    [
        torch.i0,
        torch.special.i0e,
        torch.special.i1,
        torch.special.i1e,
        torch.special.modified_bessel_k0,
        torch.special.modified_bessel_k1,
        torch.special.scaled_modified_bessel_k1,
        torch.special.bessel_j0,
        torch.special.bessel_j1,
        torch.special.bessel_y0,
        torch.special.bessel_y1,
        torch.special.spherical_bessel_j0,
    ],
)
def test_bessel_functions_across_both_branches(op: Callable[[torch.Tensor], torch.Tensor]) -> None:
    # Both sides of every series/asymptotic switch point, zeros, negatives and infinities. (In
    # float64 the device's series are closer to scipy than CPU's Cephes fits are: j0(6) is
    # 0.1506452572509970 by scipy, ...2572 here, ...2003 on CPU; float32 results agree.)
    x = torch.cat(
        [
            torch.linspace(-30, 30, 601),
            torch.tensor([0.0, 1e-6, 7.99, 8.01, 11.99, 12.01, 14.99, 15.01, float("inf")]),
            torch.tensor([-float("inf"), float("nan")]),
        ]
    )
    want = op(x)
    got = op(x.to(DEVICE)).cpu()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize(
    "op",
    [
        torch.special.chebyshev_polynomial_t,
        torch.special.chebyshev_polynomial_u,
        torch.special.chebyshev_polynomial_v,
        torch.special.chebyshev_polynomial_w,
        torch.special.shifted_chebyshev_polynomial_t,
        torch.special.hermite_polynomial_h,
        torch.special.hermite_polynomial_he,
        torch.special.laguerre_polynomial_l,
        torch.special.legendre_polynomial_p,
    ],
)
def test_orthogonal_polynomials_with_mixed_degrees(op: Callable[..., torch.Tensor]) -> None:
    # Degrees differ per element (the device loop runs to the largest): negatives, 0, 1, high
    # degrees inside (-1, 1) (CPU's closed forms), the interval ends and NaN degrees.
    x = torch.tensor([0.3, -0.7, 1.0, -1.0, 0.0, 1.5, -2.0, 0.5, 0.9, 0.25], dtype=torch.float64)
    n = torch.tensor([3.0, 12.0, 5.0, 7.0, 4.0, 6.0, 2.0, -1.0, float("nan"), 0.0])
    want = op(x, n.double())
    got = op(x.to(DEVICE), n.double().to(DEVICE)).cpu()
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


def test_zeta_and_high_order_polygamma() -> None:
    x = torch.tensor([2.0, 3.5, 1.0, 0.5, 4.0, 2.0, 3.0], dtype=torch.float64)
    q = torch.tensor([1.0, 0.25, 2.0, 1.0, -2.5, -3.0, 7.0], dtype=torch.float64)
    torch.testing.assert_close(
        torch.special.zeta(x.to(DEVICE), q.to(DEVICE)).cpu(),
        torch.special.zeta(x, q),
        equal_nan=True,
    )
    y = torch.linspace(-3.7, 6, 50, dtype=torch.float64)
    for order in (5, 6):
        torch.testing.assert_close(
            torch.polygamma(order, y.to(DEVICE)).cpu(),
            torch.polygamma(order, y),
            rtol=1e-7,
            atol=1e-7,
        )


def test_integer_ops() -> None:
    a = torch.tensor([12, -18, 0, 7, 1071, -5, 0, 2**40], dtype=torch.int64)
    b = torch.tensor([8, 24, 0, 0, 462, -15, 3, 6], dtype=torch.int64)
    for op in (torch.gcd, torch.lcm):
        assert torch.equal(op(a.to(DEVICE), b.to(DEVICE)).cpu(), op(a, b))
    shifts = torch.tensor([0, 1, 63, 64, -1, 5, 70, 3], dtype=torch.int64)
    for op in (torch.bitwise_left_shift, torch.bitwise_right_shift):
        assert torch.equal(op(a.to(DEVICE), shifts.to(DEVICE)).cpu(), op(a, shifts))
    with pytest.raises(RuntimeError, match="integer"):
        torch.gcd(torch.ones(2, device=DEVICE), torch.ones(2, device=DEVICE))


def test_float_bit_functions() -> None:
    x = torch.tensor([1.0, -2.5, 0.0, -0.0, 3e-39, float("inf"), float("nan"), 1e30])
    y = torch.tensor([2.0, -3.0, -1.0, 1.0, 0.0, 0.0, 1.0, -1e30])
    for got, want in zip(torch.frexp(x.to(DEVICE)), torch.frexp(x), strict=True):
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    torch.testing.assert_close(
        torch.nextafter(x.to(DEVICE), y.to(DEVICE)).cpu(), torch.nextafter(x, y), equal_nan=True
    )
    assert torch.equal(torch.signbit(x.to(DEVICE)).cpu(), torch.signbit(x))
    both(torch.hypot, randn(4, 3), randn(4, 3, seed=2))
    steps, values = torch.tensor([0.0, 1.5, -2.0, float("nan")]), torch.tensor([0.5, 0.5, 0.5, 0.5])
    torch.testing.assert_close(
        torch.heaviside(steps.to(DEVICE), values.to(DEVICE)).cpu(),
        torch.heaviside(steps, values),
        equal_nan=True,
    )
    a, b = randn(20) * 10, randn(20, seed=3)
    a[:3], b[:3] = torch.tensor([7.0, -7.0, 0.3]), torch.tensor([0.1, 0.1, 0.1])
    torch.testing.assert_close(
        torch.floor_divide(a.to(DEVICE), b.to(DEVICE)).cpu(), torch.floor_divide(a, b)
    )


@pytest.mark.parametrize("dim", [0, 1])
def test_selections(dim: int) -> None:
    x = randn(6, 7)
    x[2, 3] = float("nan")
    both(lambda t: torch.median(t, dim=dim), x)
    both(lambda t: torch.nanmedian(t, dim=dim), x)
    both(lambda t: torch.kthvalue(t, 3, dim=dim), x)
    both(torch.median, randn(9))
    both(torch.nanmedian, x)
    ints = torch.tensor([[1, 3, 3, 2, 1], [4, 4, 0, 0, 5]])
    for got, want in zip(torch.mode(ints.to(DEVICE), 1), torch.mode(ints, 1), strict=True):
        assert torch.equal(got.cpu(), want)
    both(lambda t: torch.aminmax(t, dim=dim), randn(4, 5))
    both(lambda t: torch.logcumsumexp(t, dim), randn(5, 6) * 30)


def test_reductions_and_indexing() -> None:
    both(torch.trace, randn(4, 6))
    assert torch.equal(
        torch.count_nonzero(torch.tensor([[0, 1], [2, 0]], device=DEVICE), dim=0).cpu(),
        torch.tensor([1, 1]),
    )
    both(lambda t: torch.renorm(t, 2, 0, 1.0), randn(4, 5) * 3)
    index = torch.tensor([[0, -1], [5, 3]])
    both(lambda t: torch.take(t, index.to(t.device)), randn(2, 3))
    src = torch.tensor([1.0, 2.0, 3.0])
    put_index = torch.tensor([0, 4, 0])
    both(lambda t, s: t.put(put_index.to(t.device), s, accumulate=True), randn(2, 3), src)


def test_searchsorted_bucketize_histc() -> None:
    seq = torch.tensor([[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 8.0]])
    values = torch.tensor([[3.0, 0.0, 9.0], [4.0, float("nan"), 6.5]])
    for right in (False, True):
        assert torch.equal(
            torch.searchsorted(seq.to(DEVICE), values.to(DEVICE), right=right).cpu(),
            torch.searchsorted(seq, values, right=right),
        )
    sorter = torch.tensor([1, 3, 0, 2])
    unsorted = torch.tensor([5.0, 1.0, 7.0, 3.0])
    assert torch.equal(
        torch.searchsorted(
            unsorted.to(DEVICE), values[0].to(DEVICE), sorter=sorter.to(DEVICE)
        ).cpu(),
        torch.searchsorted(unsorted, values[0], sorter=sorter),
    )
    boundaries = torch.tensor([0.0, 1.0, 2.5])
    x = randn(10) * 2
    assert torch.equal(
        torch.bucketize(x.to(DEVICE), boundaries.to(DEVICE)).cpu(), torch.bucketize(x, boundaries)
    )
    torch.testing.assert_close(torch.histc(x.to(DEVICE), bins=7).cpu(), torch.histc(x, bins=7))
    torch.testing.assert_close(torch.histc(x.to(DEVICE), 4, -1, 1).cpu(), torch.histc(x, 4, -1, 1))


def test_im2col_col2im_and_channel_shuffle() -> None:
    x = randn(2, 3, 7, 6)
    both(lambda t: F.unfold(t, (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)), x)
    cols = randn(2, 3 * 2 * 2, 10)
    both(lambda t: F.fold(t, (4, 5), (2, 2), padding=(1, 0), stride=(1, 2)), cols)
    both(lambda t: F.channel_shuffle(t, 3), randn(2, 6, 3))


@pytest.mark.parametrize("padding", [(-1, 2), (2, -1), (-2, -1)])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_negative_padding(padding: tuple[int, int], mode: str) -> None:
    both(lambda t: F.pad(t, padding, mode=mode), randn(2, 3, 5))
    if mode == "replicate":
        # Cropping everything still replicates from CPU's clamped positions.
        both(lambda t: F.pad(t, (-4, 5), mode=mode), randn(1, 2, 4))


@pytest.mark.parametrize(
    "conv, shape, weight_shape, options",
    [
        (
            F.conv_transpose1d,
            (2, 4, 7),
            (4, 3, 3),
            {"stride": 2, "padding": 1, "output_padding": 1},
        ),
        (
            F.conv_transpose2d,
            (1, 4, 5, 4),
            (4, 2, 3, 2),
            {"stride": (2, 1), "groups": 2, "dilation": (1, 2)},
        ),
        (F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 3, 2, 2, 2), {"stride": 2}),
    ],
)
def test_transposed_convolutions(
    conv: Callable[..., torch.Tensor],
    shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    options: dict[str, object],
) -> None:
    bias = randn(weight_shape[1] * int(options.get("groups", 1)), seed=4)  # type: ignore[call-overload]
    both(
        lambda x, w, b: conv(x, w, b, **options), randn(*shape), randn(*weight_shape, seed=3), bias
    )


def test_three_dimensional_and_adaptive_max_pooling() -> None:
    x = randn(2, 3, 6, 5, 7)
    both(lambda t: F.max_pool3d(t, (2, 3, 2), stride=(2, 1, 2), padding=(1, 1, 0)), x)
    both(lambda t: F.max_pool3d(t, 2, ceil_mode=True, return_indices=True)[0], x)
    both(lambda t: F.avg_pool3d(t, 3, stride=2, padding=1), x)
    both(lambda t: F.avg_pool3d(t, (2, 2, 3), count_include_pad=False, ceil_mode=True), x)
    both(lambda t: F.adaptive_max_pool2d(t, (3, 4), return_indices=True), randn(2, 7, 9))
    both(lambda t: F.adaptive_max_pool1d(t, 4), randn(2, 3, 10))
    both(lambda t: F.adaptive_max_pool3d(t, (2, 3, 2)), x)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 4)])
def test_rectangular_lu_and_unpack(shape: tuple[int, ...]) -> None:
    a = randn(*shape)
    both(torch.linalg.lu, a)
    lu, pivots = torch.linalg.lu_factor(a)
    got = torch.lu_unpack(lu.to(DEVICE), pivots.to(DEVICE))
    for g, w in zip(got, torch.lu_unpack(lu, pivots), strict=True):
        torch.testing.assert_close(g.cpu(), w)


def test_lu_solve_from_the_right() -> None:
    a, rhs = randn(4, 4), randn(3, 4, seed=5)
    lu, pivots = torch.linalg.lu_factor(a)
    for adjoint in (False, True):
        torch.testing.assert_close(
            torch.linalg.lu_solve(
                lu.to(DEVICE), pivots.to(DEVICE), rhs.to(DEVICE), left=False, adjoint=adjoint
            ).cpu(),
            torch.linalg.lu_solve(lu, pivots, rhs, left=False, adjoint=adjoint),
        )


def test_group_norm_and_unfold_backward() -> None:
    both(
        lambda x, w, b: F.group_norm(x, 2, w, b),
        randn(2, 4, 3, 5),
        randn(4, seed=1),
        randn(4, seed=2),
    )
    both(lambda x: x.unfold(1, 3, 2), randn(2, 8, 3))


def test_unique_and_bincount_round_trip_to_the_host() -> None:
    x = torch.tensor([3, 1, 3, 2, 1, 1])
    for got, want in zip(
        torch.unique(x.to(DEVICE), return_inverse=True, return_counts=True),
        torch.unique(x, return_inverse=True, return_counts=True),
        strict=True,
    ):
        assert torch.equal(got.cpu(), want)
    assert torch.equal(torch.unique_consecutive(x.to(DEVICE)).cpu(), torch.unique_consecutive(x))
    weights = torch.rand(6)
    torch.testing.assert_close(
        torch.bincount(x.to(DEVICE), weights.to(DEVICE), minlength=6).cpu(),
        torch.bincount(x, weights, minlength=6),
    )


def test_samplers_have_the_right_moments() -> None:
    torch.manual_seed(0)
    n = 200_000
    x = torch.empty(n, device=DEVICE)
    assert abs(x.exponential_(2.0).mean().item() - 0.5) < 0.01
    geometric = x.geometric_(0.25).cpu()
    assert geometric.min().item() >= 1 and abs(geometric.mean().item() - 4.0) < 0.05
    assert abs(x.log_normal_(0.0, 0.5).log().mean().item()) < 0.01
    assert abs(x.cauchy_(1.0, 2.0).median().item() - 1.0) < 0.05
    mean = torch.full((n,), 3.0, device=DEVICE)
    draws = torch.normal(mean, torch.full((n,), 2.0, device=DEVICE)).cpu()
    assert abs(draws.mean().item() - 3.0) < 0.02 and abs(draws.std().item() - 2.0) < 0.02


def test_no_backend_kernel_hides_a_composite_derivative() -> None:
    # A PrivateUse1 kernel for a CompositeImplicitAutograd op would bypass its decomposition's
    # derivative (logdet lost its gradient that way). Only these non-differentiable or
    # backward-only ops may have one.
    allowed = {
        "aten::_has_compatible_shallow_copy_type",
        "aten::isfinite",
        "aten::mish_backward",
        "aten::silu_backward",
    }
    shadowing = {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
        and torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
        and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
    }
    assert shadowing <= allowed, sorted(shadowing - allowed)


def test_cdist_pdist_and_their_gradients() -> None:
    for p in (0.0, 1.0, 1.5, 2.0, 3.0, float("inf")):
        both(lambda a, b, p=p: torch.cdist(a, b, p=p), randn(2, 4, 3), randn(1, 5, 3, seed=1))
        if p > 0:
            both(lambda a, p=p: F.pdist(a, p=p), randn(5, 3, seed=2))


def test_nonzero_static_multinomial_and_embedding_max_norm() -> None:
    x = torch.tensor([[0, 3, 0], [4, 0, 5]])
    for size in (2, 3, 5):
        assert torch.equal(
            torch.nonzero_static(x.to(DEVICE), size=size, fill_value=-7).cpu(),
            torch.nonzero_static(x, size=size, fill_value=-7),
        )
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.5, 0.5, 0.0]], device=DEVICE)
    draws = torch.multinomial(probs, 20000, replacement=True).cpu()
    frequencies = torch.stack([torch.bincount(row, minlength=4) / 20000 for row in draws])
    torch.testing.assert_close(frequencies, probs.cpu(), atol=0.02, rtol=0)
    unique = torch.multinomial(probs, 2).cpu()
    assert (unique[:, 0] != unique[:, 1]).all() and (probs.cpu().gather(1, unique) > 0).all()
    weight = randn(6, 3) * 3
    indices = torch.tensor([1, 4, 1])
    want = F.embedding(indices, weight.clone(), max_norm=1.0)
    got = F.embedding(indices.to(DEVICE), weight.to(DEVICE), max_norm=1.0)
    torch.testing.assert_close(got.cpu(), want)


def test_batch_norm_training_updates_running_statistics() -> None:
    cpu = torch.nn.BatchNorm2d(3)
    tpu = torch.nn.BatchNorm2d(3).to(DEVICE)
    x = randn(4, 3, 5, 5)
    both(lambda t: (cpu if t.device.type == "cpu" else tpu)(t), x)
    torch.testing.assert_close(tpu.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(tpu.running_var.cpu(), cpu.running_var)


def test_error_function_family() -> None:
    x = torch.cat(
        [torch.linspace(-8, 8, 161), torch.tensor([-30.0, 30.0, float("inf"), float("nan")])]
    )
    for op in (torch.special.erfcx, torch.special.log_ndtr):
        torch.testing.assert_close(
            op(x.to(DEVICE)).cpu(), op(x), rtol=1e-5, atol=1e-6, equal_nan=True
        )
    p = torch.cat([torch.rand(500), torch.tensor([0.0, 1.0, 0.5, 1e-30, 1e-10, -0.1, 1.1])])
    torch.testing.assert_close(
        torch.special.ndtri(p.to(DEVICE)).cpu(),
        torch.special.ndtri(p),
        rtol=1e-5,
        atol=1e-6,
        equal_nan=True,
    )
    both(torch.erfinv, torch.rand(20) * 1.8 - 0.9)


def test_incomplete_gamma_with_cpu_edges() -> None:
    a = torch.tensor([0.5, 1, 2, 5, 10, 30, 100, 0.1, 3, 0, 0, -1, float("inf"), float("inf")])
    x = torch.tensor([0.3, 1, 5, 4, 12, 25, 110, 0.01, 0, 1, 0, 1, 1, float("inf")])
    a = torch.cat([a, torch.tensor([2.0, float("nan"), 1e-3, 50]), torch.rand(200) * 20])
    x = torch.cat([x, torch.tensor([float("inf"), 1, 2, 0.5]), torch.rand(200) * 20])
    for op in (torch.igamma, torch.igammac):
        torch.testing.assert_close(
            op(a.to(DEVICE), x.to(DEVICE)).cpu(), op(a, x), rtol=1e-5, atol=1e-6, equal_nan=True
        )
    # The gradient with respect to x (the only one ATen defines).
    xs = (torch.rand(10) * 5 + 0.1).requires_grad_(True)
    xs_t = xs.detach().to(DEVICE).requires_grad_(True)
    torch.igamma(a[:10].abs() + 0.5, xs).sum().backward()
    torch.igamma((a[:10].abs() + 0.5).to(DEVICE), xs_t).sum().backward()
    torch.testing.assert_close(xs_t.grad.cpu(), xs.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_margin_losses_and_gradients(reduction: str) -> None:
    torch.manual_seed(9)
    x = torch.randn(4, 5)
    target = torch.tensor([0, 4, 2, 2])
    weight = torch.rand(5)
    labels = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, -1, 0], [-1, 2, 3, 4, 0], [0, 1, 2, 3, 4]])
    cases = [
        (F.multi_margin_loss, (target,), {"p": 1, "margin": 0.7}),
        (F.multi_margin_loss, (target,), {"p": 2, "weight": weight}),
        (F.multilabel_margin_loss, (labels,), {}),
    ]
    for fn, args, kwargs in cases:
        for rows in (x, x[1]):
            extra = tuple(a if rows.dim() == 2 else a[1] for a in args)
            leaf = rows.clone().requires_grad_(True)
            leaf_t = rows.to(DEVICE).requires_grad_(True)
            want = fn(leaf, *extra, reduction=reduction, **kwargs)
            moved = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in kwargs.items()}
            got = fn(leaf_t, *(a.to(DEVICE) for a in extra), reduction=reduction, **moved)
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
            weights = torch.linspace(-1, 1, want.numel()).view(want.shape)
            (want * weights).sum().backward()
            (got * weights.to(DEVICE)).sum().backward()
            torch.testing.assert_close(leaf_t.grad.cpu(), leaf.grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="only p == 1 and p == 2 supported"):
        torch.ops.aten.multi_margin_loss(x.to(DEVICE), target.to(DEVICE), 3, 1.0, None, 1)


def test_repeat_interleave_with_tensor_repeats() -> None:
    x = torch.randn(4, 3)
    repeats = torch.tensor([2, 0, 1, 3])
    got = torch.repeat_interleave(x.to(DEVICE), repeats.to(DEVICE), dim=0)
    torch.testing.assert_close(got.cpu(), torch.repeat_interleave(x, repeats, dim=0))
    got = torch.repeat_interleave(repeats.to(DEVICE))
    assert torch.equal(got.cpu(), torch.repeat_interleave(repeats))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_modes_and_gradients(mode: str) -> None:
    torch.manual_seed(10)
    weight = torch.randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    offsets = torch.tensor([0, 4, 4, 7])  # the second bag is empty
    cases: list[dict[str, object]] = [
        {},
        {"padding_idx": 2},
        # The last offset ends the last bag (the documented contract: the size of indices).
        {"include_last_offset": True, "offsets": torch.tensor([0, 4, 4, 7, 10])},
    ]
    if mode == "sum":
        cases.append({"per_sample_weights": torch.rand(10)})
    for case in cases:
        kwargs = dict(case)
        bag_offsets: torch.Tensor = kwargs.pop("offsets", offsets)  # type: ignore[assignment]
        leaf = weight.clone().requires_grad_(True)
        leaf_t = weight.to(DEVICE).requires_grad_(True)
        want = F.embedding_bag(indices, leaf, bag_offsets, mode=mode, **kwargs)  # type: ignore[arg-type]
        moved = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in kwargs.items()}
        got = F.embedding_bag(
            indices.to(DEVICE),
            leaf_t,
            bag_offsets.to(DEVICE),
            mode=mode,
            **moved,  # type: ignore[arg-type]
        )
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        weights = torch.linspace(-1, 1, want.numel()).view(want.shape)
        (want * weights).sum().backward()
        (got * weights.to(DEVICE)).sum().backward()
        torch.testing.assert_close(leaf_t.grad.cpu(), leaf.grad, rtol=1e-5, atol=1e-6)
    # scale_grad_by_freq: each row's gradient over its index's count in the batch. CPU's
    # embedding_bag divides by misplaced counts, so the reference is F.embedding's gradient
    # (which scales correctly) reduced per bag by hand.
    if mode != "max":
        leaf = weight.clone().requires_grad_(True)
        rows = F.embedding(indices, leaf, scale_grad_by_freq=True)
        bounds = [*offsets.tolist(), len(indices)]
        want = torch.stack(
            [
                rows[a:b].sum(0) / (max(b - a, 1) if mode == "mean" else 1)
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
            ]
        )
        leaf_t = weight.to(DEVICE).requires_grad_(True)
        got = F.embedding_bag(
            indices.to(DEVICE), leaf_t, offsets.to(DEVICE), mode=mode, scale_grad_by_freq=True
        )
        torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-6)
        weights = torch.linspace(-1, 1, want.numel()).view(want.shape)
        (want * weights).sum().backward()
        (got * weights.to(DEVICE)).sum().backward()
        torch.testing.assert_close(leaf_t.grad.cpu(), leaf.grad, rtol=1e-5, atol=1e-6)
    # 2-d input: one bag per row.
    bags = torch.tensor([[1, 2, 3], [4, 4, 0]])
    torch.testing.assert_close(
        F.embedding_bag(bags.to(DEVICE), weight.to(DEVICE), mode=mode).cpu(),
        F.embedding_bag(bags, weight, mode=mode),
    )


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_2d_matches_cpu(mode: str, padding_mode: str, align_corners: bool) -> None:
    torch.manual_seed(7)
    x = torch.randn(2, 3, 5, 6)
    grid = torch.rand(2, 4, 7, 2) * 2.6 - 1.3  # partly outside [-1, 1]
    kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}

    def run(device: str) -> tuple[torch.Tensor, ...]:
        xs = x.to(device).requires_grad_()
        gs = grid.to(device).requires_grad_()
        out = torch.nn.functional.grid_sample(xs, gs, **kwargs)
        weight = torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)
        x_grad, grid_grad = torch.autograd.grad((out * weight).sum(), [xs, gs])
        return out.detach().cpu(), x_grad.cpu(), grid_grad.cpu()

    for got, want in zip(run("tpu"), run("cpu"), strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
def test_grid_sample_3d_matches_cpu(mode: str, padding_mode: str) -> None:
    torch.manual_seed(8)
    x = torch.randn(1, 2, 3, 4, 5)
    grid = torch.rand(1, 2, 3, 4, 3) * 2.4 - 1.2
    kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": False}
    want = torch.nn.functional.grid_sample(x, grid, **kwargs)
    got = torch.nn.functional.grid_sample(x.to("tpu"), grid.to("tpu"), **kwargs)
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="bicubic"):
        torch.nn.functional.grid_sample(x.to("tpu"), grid.to("tpu"), mode="bicubic")


def test_rrelu_draws_slopes_in_training_and_uses_their_mean_in_evaluation() -> None:
    x = randn(2000)
    both(lambda t: F.rrelu(t, 0.1, 0.3, training=False), x)
    xt = x.to(DEVICE).requires_grad_()
    out = F.rrelu(xt, 0.1, 0.3, training=True)
    out.backward(torch.ones_like(out))
    got, grad = out.detach().cpu(), xt.grad.cpu()  # type: ignore[union-attr]
    negative = x <= 0
    slopes = got[negative] / x[negative]
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6
    assert slopes.std() > 0.03  # drawn per element, not one slope
    torch.testing.assert_close(got[~negative], x[~negative], rtol=0, atol=0)
    # The backward multiplies by the slope each element was given.
    torch.testing.assert_close(grad[negative], slopes)
    assert (grad[~negative] == 1).all()
    inplace = x.to(DEVICE)
    F.rrelu_(inplace, 0.2, 0.2, training=True)
    torch.testing.assert_close(inplace.cpu(), F.leaky_relu(x, 0.2))
    with pytest.raises(RuntimeError, match="Lower bound should be less than or equal"):
        F.rrelu(x.to(DEVICE), 0.5, 0.1, training=True)


@pytest.mark.parametrize(
    ("shape", "kernel", "output_size"),
    [
        ((2, 3, 11, 9), (3, 2), (5, 4)),
        ((2, 3, 11, 9), (2, 2), (10, 8)),  # windows overlap
        ((3, 11, 9), (3, 3), (1, 1)),  # unbatched, one window
        ((2, 3, 7, 8, 9), (2, 3, 2), (4, 5, 6)),
        ((3, 7, 8, 9), (1, 2, 3), (6, 3, 2)),
    ],
)
def test_fractional_max_pool_with_given_samples_matches_cpu(
    shape: tuple[int, ...], kernel: tuple[int, ...], output_size: tuple[int, ...]
) -> None:
    dims = len(kernel)
    pool = F.fractional_max_pool2d if dims == 2 else F.fractional_max_pool3d
    torch.manual_seed(3)
    samples = torch.rand(shape[0] if len(shape) == dims + 2 else 1, shape[-dims - 1], dims)

    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return pool(  # type: ignore[operator]
            x,
            kernel,
            output_size=output_size,
            return_indices=True,
            _random_samples=samples.to(x.device),
        )

    x = randn(*shape)
    x.view(-1)[5] = x.view(-1)[6]  # a tie: the first maximum is reported
    both(run, x, rtol=0, atol=0)


def test_fractional_max_pool_draws_windows_and_checks_sizes() -> None:
    x = randn(2, 3, 11, 9).to(DEVICE)
    out, indices = F.fractional_max_pool2d(x, 2, output_size=(5, 4), return_indices=True)
    assert out.shape == (2, 3, 5, 4)
    # Whatever windows were drawn, each output is the input at its index.
    torch.testing.assert_close(x.flatten(2).gather(2, indices.flatten(2)).view_as(out), out)
    with pytest.raises(RuntimeError, match="too large relative to input"):
        F.fractional_max_pool2d(x, 5, output_size=(10, 8))
    with pytest.raises(RuntimeError, match="too large relative to input"):
        F.fractional_max_pool3d(randn(3, 7, 8, 9).to(DEVICE), (1, 2, 3), output_size=(7, 3, 2))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int8, torch.int64, torch.bool]
)
def test_hash_tensor_xors_the_widened_bits_like_cpu(dtype: torch.dtype) -> None:
    x = (randn(4, 5) * 50).to(dtype)
    for kwargs in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        got = torch.hash_tensor(x.to(DEVICE), **kwargs)  # type: ignore[arg-type]
        want = torch.hash_tensor(x, **kwargs)  # type: ignore[arg-type]
        assert got.dtype == torch.uint64 and got.shape == want.shape
        assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="Unknown hash_tensor mode"):
        torch.hash_tensor(x.to(DEVICE), mode=1)


def test_airy_ai_matches_cpu_and_a_high_precision_reference() -> None:
    mpmath = pytest.importorskip("mpmath")
    x = torch.cat(
        [
            torch.linspace(-60, 110, 1201, dtype=torch.float64),
            torch.tensor([-6.0, 5.0, 0.0, 103.9, float("inf"), -float("inf"), float("nan")]),
        ]
    )
    got = torch.special.airy_ai(x.to(DEVICE)).cpu()
    # CPU's float64 series switch leaves up to 3e-6 near x = -2.09; the expansions here hold 1e-9.
    torch.testing.assert_close(got, torch.special.airy_ai(x), atol=5e-6, rtol=0, equal_nan=True)
    finite = x.isfinite() & (x < 103.892)
    reference = torch.tensor([float(mpmath.airyai(v)) for v in x[finite].tolist()])
    torch.testing.assert_close(got[finite], reference.double(), atol=1e-9, rtol=1e-7)
    xf = x.float()
    got_f = torch.special.airy_ai(xf.to(DEVICE)).cpu()
    torch.testing.assert_close(
        got_f, torch.special.airy_ai(xf), atol=1e-4, rtol=1e-4, equal_nan=True
    )


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_and_its_gradient(reduction: str, zero_infinity: bool) -> None:
    torch.manual_seed(0)
    steps, batch, classes = 30, 6, 8
    log_probs = torch.randn(steps, batch, classes).log_softmax(2)
    targets = torch.randint(1, classes, (batch, 12))
    input_lengths = torch.tensor([30, 30, 20, 13, 5, 30])
    # An empty target, and one too long for its input (infinite loss, zeroed on request).
    target_lengths = torch.tensor([12, 0, 9, 12, 7, 4])
    both(
        lambda lp: F.ctc_loss(
            lp,
            targets.to(lp.device),
            input_lengths.to(lp.device),
            target_lengths.to(lp.device),
            reduction=reduction,
            zero_infinity=zero_infinity,
        ),
        log_probs,
        atol=1e-4,
        rtol=1e-4,
    )


def test_ctc_loss_with_concatenated_targets_and_list_lengths() -> None:
    torch.manual_seed(1)
    log_probs = torch.randn(20, 4, 6).log_softmax(2)
    target_lengths = [3, 0, 5, 2]
    targets = torch.randint(1, 6, (sum(target_lengths),))
    both(
        lambda lp: F.ctc_loss(
            lp, targets.to(lp.device), [20, 15, 12, 2], target_lengths, reduction="sum"
        ),
        log_probs,
        atol=1e-4,
        rtol=1e-4,
    )


def test_bfloat16_transposed_convolution_rounds_once_after_the_bias() -> None:
    # A bias that nearly cancels the sum: rounding the sum to bfloat16 first would lose it.
    x = randn(2, 4, 5, 5).bfloat16()
    weight = randn(4, 3, 3, 3, seed=1).bfloat16()
    exact = F.conv_transpose2d(x.double(), weight.double(), stride=2)
    bias = (-exact.mean(dim=(0, 2, 3)) + 0.01).bfloat16()
    want = F.conv_transpose2d(x.double(), weight.double(), bias.double(), stride=2)
    got = F.conv_transpose2d(x.to(DEVICE), weight.to(DEVICE), bias.to(DEVICE), stride=2)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu().double(), want, atol=2e-2, rtol=1e-2)
