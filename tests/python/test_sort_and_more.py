"""sort, argsort, topk, roll, logaddexp(2) and xlogy against CPU, forward and backward."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

DEVICE = "tpu"


def check_forward_and_backward(
    fn: Callable[[torch.Tensor], torch.Tensor],
    shape: tuple[int, ...],
    grad_tolerance: float | None = None,
) -> None:
    """fn on tpu against CPU: the output, and the input's gradient for random output weights."""
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    xt = x.detach().to(DEVICE).requires_grad_()
    want, got = fn(x), fn(xt)
    torch.testing.assert_close(got.cpu(), want)
    weights = torch.randn(want.shape)
    (want * weights).sum().backward()
    (got * weights.to(DEVICE)).sum().backward()
    assert x.grad is not None and xt.grad is not None
    tolerance = {} if grad_tolerance is None else {"atol": grad_tolerance, "rtol": grad_tolerance}
    torch.testing.assert_close(xt.grad.cpu(), x.grad, **tolerance)  # type: ignore[arg-type]


def with_specials(*shape: int) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    x.view(-1)[1] = float("nan")
    x.view(-1)[2] = x.view(-1)[3]  # a tie
    x.view(-1)[4] = float("inf")
    return x


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_values_and_indices(descending: bool, dim: int) -> None:
    x = with_specials(5, 6)
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    got = torch.sort(x.to(DEVICE), dim=dim, descending=descending, stable=True)
    torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
    assert torch.equal(got.indices.cpu(), want.indices)
    assert torch.equal(torch.argsort(x.to(DEVICE), dim=dim).cpu(), torch.argsort(x, dim=dim))


def test_sort_integers_and_out() -> None:
    x = torch.randint(-5, 5, (4, 7))
    values = torch.empty(4, 7, dtype=torch.int64, device=DEVICE)
    indices = torch.empty(4, 7, dtype=torch.int64, device=DEVICE)
    torch.sort(x.to(DEVICE), dim=1, stable=True, out=(values, indices))
    want = torch.sort(x, dim=1, stable=True)
    assert torch.equal(values.cpu(), want.values) and torch.equal(indices.cpu(), want.indices)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_and_its_gradient(largest: bool) -> None:
    x = torch.randn(4, 9)
    xt = x.to(DEVICE).requires_grad_()
    x.requires_grad_()
    want = torch.topk(x, 3, dim=1, largest=largest)
    got = torch.topk(xt, 3, dim=1, largest=largest)
    torch.testing.assert_close(got.values.cpu(), want.values)
    assert torch.equal(got.indices.cpu(), want.indices)
    weights = torch.randn(4, 3)
    (want.values * weights).sum().backward()
    (got.values * weights.to(DEVICE)).sum().backward()
    assert xt.grad is not None and x.grad is not None
    torch.testing.assert_close(xt.grad.cpu(), x.grad)


def test_topk_rejects_k_larger_than_the_dimension() -> None:
    with pytest.raises(RuntimeError, match="selected index k out of range"):  # as CPU raises
        torch.topk(torch.randn(3, device=DEVICE), 4)


@pytest.mark.parametrize(
    ("shifts", "dims"), [((1,), (0,)), ((-1, 2), (1, 2)), ((5,), ()), ((7,), (2,))]
)
def test_roll(shifts: tuple[int, ...], dims: tuple[int, ...]) -> None:
    x = torch.arange(24.0).reshape(2, 3, 4)
    assert torch.equal(torch.roll(x.to(DEVICE), shifts, dims).cpu(), torch.roll(x, shifts, dims))


@pytest.mark.parametrize("op", [torch.logaddexp, torch.logaddexp2, torch.xlogy])
def test_binary_log_ops_with_special_values(op: object) -> None:
    a = torch.randn(6, 5) * 3
    b = torch.randn(6, 5).abs() * 3
    a[0, 0], b[0, 0] = float("inf"), float("inf")
    a[0, 1], b[0, 1] = float("-inf"), float("-inf")
    a[1, 0], b[1, 0] = 0.0, float("nan")
    a[1, 1], b[1, 1] = 0.0, 0.0
    got = op(a.to(DEVICE), b.to(DEVICE))  # type: ignore[operator]
    torch.testing.assert_close(got.cpu(), op(a, b), equal_nan=True)  # type: ignore[operator]


def test_equal() -> None:
    x = torch.randn(4, 5)
    t = x.to(DEVICE)
    assert torch.equal(t, t.clone())
    assert not torch.equal(t, t + 1e-3)
    assert not torch.equal(t, t[:2])
    x[0, 0] = float("nan")
    assert torch.equal(x.to(DEVICE), x.to(DEVICE)) == torch.equal(x, x)


@pytest.mark.parametrize(
    "args", [(2,), (1,), (float("inf"),), (3, (1,), True), (0.5, (0, 1)), (None, (0,))]
)
def test_norm_overloads(args: tuple[object, ...]) -> None:
    x = torch.randn(4, 5)
    torch.testing.assert_close(torch.norm(x.to(DEVICE), *args).cpu(), torch.norm(x, *args))


def test_nansum_vdot_and_round_decimals() -> None:
    x = torch.randn(4, 5)
    x[0, 0] = float("nan")
    t = x.to(DEVICE)
    torch.testing.assert_close(torch.nansum(t, 1).cpu(), torch.nansum(x, 1))
    torch.testing.assert_close(torch.nansum(t).cpu(), torch.nansum(x))
    torch.testing.assert_close(torch.vdot(t[1], t[2]).cpu(), torch.vdot(x[1], x[2]))
    y = torch.randn(1000) * 100
    for decimals in (-2, -1, 0, 1, 2, 3):
        got = torch.round(y.to(DEVICE), decimals=decimals).cpu()
        assert torch.equal(got, torch.round(y, decimals=decimals)), decimals


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize(
    ("shape", "pad"),
    [
        ((2, 3, 7), (2, 3)),
        ((3, 7), (3, 1)),
        ((2, 3, 5, 6), (1, 2, 3, 0)),
        ((1, 2, 4, 5, 6), (1, 1, 2, 0, 3, 2)),
    ],
)
def test_reflection_and_replication_padding(
    mode: str, shape: tuple[int, ...], pad: tuple[int, ...]
) -> None:
    check_forward_and_backward(lambda x: torch.nn.functional.pad(x, pad, mode=mode), shape)


def test_reflection_padding_larger_than_the_input_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        torch.nn.functional.pad(torch.randn(1, 2, 3, device=DEVICE), (3, 0), mode="reflect")


def test_copysign_fmax_fmin_frac() -> None:
    a = torch.tensor([1.0, -2.0, 3.0, float("nan"), 0.0, 5.5, -7.25])
    b = torch.tensor([-0.0, 1.0, float("nan"), 2.0, -1.0, -3.0, 2.0])
    for op in (torch.copysign, torch.fmax, torch.fmin):
        got = op(a.to(DEVICE), b.to(DEVICE)).cpu()
        torch.testing.assert_close(got, op(a, b), equal_nan=True)
    torch.testing.assert_close(torch.frac(a.to(DEVICE)).cpu(), torch.frac(a), equal_nan=True)


def test_logsigmoid_and_gradient() -> None:
    x = (torch.randn(50) * 10).requires_grad_()
    xt = x.detach().to(DEVICE).requires_grad_()
    want = torch.nn.functional.logsigmoid(x)
    got = torch.nn.functional.logsigmoid(xt)
    want.sum().backward()
    got.sum().backward()
    assert x.grad is not None and xt.grad is not None
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(xt.grad.cpu(), x.grad)


def test_addbmm_and_cross() -> None:
    m, b1, b2 = torch.randn(3, 5), torch.randn(4, 3, 2), torch.randn(4, 2, 5)
    got = torch.addbmm(m.to(DEVICE), b1.to(DEVICE), b2.to(DEVICE), beta=0.5, alpha=2)
    torch.testing.assert_close(got.cpu(), torch.addbmm(m, b1, b2, beta=0.5, alpha=2))
    u, v = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(
        torch.linalg.cross(u.to(DEVICE), v.to(DEVICE)).cpu(), torch.linalg.cross(u, v)
    )
    with pytest.raises(RuntimeError, match="must have length 3"):
        torch.linalg.cross(torch.randn(2, 4, device=DEVICE), torch.randn(2, 4, device=DEVICE))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", [torch.lgamma, torch.digamma])
def test_lgamma_and_digamma(op: object, dtype: torch.dtype) -> None:
    specials = [0.0, -1.0, -2.0, 1e-6, 1e10, float("inf"), float("-inf"), float("nan"), 0.5, 2.0]
    x = torch.cat([torch.linspace(-10, 10, 2001), torch.tensor(specials)]).to(dtype)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-8
    got = op(x.to(DEVICE)).cpu()  # type: ignore[operator]
    want = op(x)  # type: ignore[operator]
    torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance, equal_nan=True)


def test_lgamma_gradient_and_polygamma_order_zero() -> None:
    x = torch.linspace(0.1, 5, 40, requires_grad=True)
    xt = x.detach().to(DEVICE).requires_grad_()
    torch.lgamma(x).sum().backward()
    torch.lgamma(xt).sum().backward()
    assert x.grad is not None and xt.grad is not None
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(
        torch.polygamma(0, xt.detach()).cpu(), torch.polygamma(0, x.detach())
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4, 5, 7])
def test_polygamma(order: int, dtype: torch.dtype) -> None:
    specials = [0.0, -1.0, 0.5, 1.0, 1e-3, 100.0, 1e4, float("inf"), float("nan")]
    x = torch.cat([torch.linspace(-5.3, 10, 1001), torch.tensor(specials)]).to(dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 1e-6
    got = torch.polygamma(order, x.to(DEVICE)).cpu()
    want = torch.polygamma(order, x)
    torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance, equal_nan=True)


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce: str, include_self: bool) -> None:
    torch.manual_seed(0)
    x, source, index = torch.randn(5, 4), torch.randn(3, 4), torch.tensor([0, 4, 0])
    got = x.to(DEVICE).index_reduce(
        0, index.to(DEVICE), source.to(DEVICE), reduce, include_self=include_self
    )
    torch.testing.assert_close(
        got.cpu(), x.index_reduce(0, index, source, reduce, include_self=include_self)
    )


@pytest.mark.parametrize(
    ("shape", "options"),
    [
        ((2, 3, 7), {"size": 12, "mode": "nearest"}),
        ((2, 3, 7), {"scale_factor": 1.7, "mode": "nearest"}),
        ((2, 3, 5, 6), {"size": (9, 4), "mode": "nearest"}),
        ((2, 3, 5, 6), {"size": (9, 4), "mode": "nearest-exact"}),
        ((1, 2, 3, 4, 5), {"size": (5, 7, 3), "mode": "nearest"}),
        ((2, 3, 7), {"size": 12, "mode": "linear", "align_corners": False}),
        ((2, 3, 7), {"size": 12, "mode": "linear", "align_corners": True}),
        ((2, 3, 5, 6), {"size": (9, 4), "mode": "bilinear", "align_corners": False}),
        ((2, 3, 5, 6), {"scale_factor": 2.5, "mode": "bilinear", "align_corners": False}),
        ((2, 3, 5, 6), {"size": (9, 13), "mode": "bilinear", "align_corners": True}),
        ((1, 2, 3, 4, 5), {"size": (5, 7, 3), "mode": "trilinear", "align_corners": False}),
        ((2, 3, 7, 9), {"size": (14, 5), "mode": "bicubic", "align_corners": False}),
        ((2, 3, 7, 9), {"size": (3, 20), "mode": "bicubic", "align_corners": True}),
        ((2, 3, 7, 9), {"scale_factor": 1.7, "mode": "bicubic"}),
        ((2, 3, 7, 9), {"size": (3, 4), "mode": "bilinear", "antialias": True}),
        ((2, 3, 7, 9), {"size": (14, 4), "mode": "bilinear", "antialias": True}),
        ((2, 3, 17, 9), {"size": (5, 9), "mode": "bicubic", "antialias": True}),
        ((2, 3, 17, 9), {"scale_factor": 0.3, "mode": "bicubic", "antialias": True}),
        (
            (2, 3, 17, 9),
            {"size": (4, 3), "mode": "bilinear", "antialias": True, "align_corners": True},
        ),
    ],
)
def test_interpolate_and_gradient(shape: tuple[int, ...], options: dict[str, object]) -> None:
    check_forward_and_backward(
        lambda x: torch.nn.functional.interpolate(x, **options),  # type: ignore[arg-type]
        shape,
        grad_tolerance=1e-4,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"size": (6, 7, 5), "mode": "trilinear"},
        {"size": (11, 5), "mode": "bicubic"},
    ],
)
def test_bfloat16_interpolation_rounds_like_cpu(options: dict[str, object]) -> None:
    # CPU interpolates every axis in float and rounds to bfloat16 once.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6) if options["mode"] == "trilinear" else torch.randn(2, 3, 7, 9)
    x = x.bfloat16()
    want = torch.nn.functional.interpolate(x, **options)  # type: ignore[arg-type]
    got = torch.nn.functional.interpolate(x.to(DEVICE), **options)  # type: ignore[arg-type]
    torch.testing.assert_close(got.cpu(), want, atol=2e-2, rtol=2e-2)


def test_nearest_upsampling_keeps_an_inf_where_cpu_does() -> None:
    x = torch.randn(1, 1, 4, 4)
    x[0, 0, 0, 0] = float("inf")
    got = torch.nn.functional.interpolate(x.to(DEVICE), scale_factor=2).cpu()
    torch.testing.assert_close(got, torch.nn.functional.interpolate(x, scale_factor=2))


def test_masked_scatter_and_gradients() -> None:
    torch.manual_seed(0)
    x, mask, source = torch.randn(3, 4), torch.rand(3, 4) > 0.5, torch.arange(20.0)
    got = x.to(DEVICE).masked_scatter(mask.to(DEVICE), source.to(DEVICE)).cpu()
    assert torch.equal(got, x.masked_scatter(mask, source))
    row_mask = torch.tensor([True, False, True, True])  # broadcast over rows
    got = x.to(DEVICE).masked_scatter(row_mask.to(DEVICE), source.to(DEVICE)).cpu()
    assert torch.equal(got, x.masked_scatter(row_mask, source))
    xr = x.clone().requires_grad_()
    xt = x.to(DEVICE).requires_grad_()
    src = source[:12].clone().requires_grad_()
    src_t = src.detach().to(DEVICE).requires_grad_()
    xr.masked_scatter(mask, src).sum().backward()
    xt.masked_scatter(mask.to(DEVICE), src_t).sum().backward()
    assert xr.grad is not None and xt.grad is not None and src.grad is not None
    assert src_t.grad is not None
    assert torch.equal(xt.grad.cpu(), xr.grad) and torch.equal(src_t.grad.cpu(), src.grad)
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        x.to(DEVICE).masked_scatter(mask.to(DEVICE), torch.ones(1, device=DEVICE))


def test_max_unpool_2d_and_3d() -> None:
    torch.manual_seed(0)
    pooled, indices = torch.nn.functional.max_pool2d(
        torch.randn(2, 3, 6, 8), 2, return_indices=True
    )
    values = pooled.clone().requires_grad_()
    values_t = pooled.to(DEVICE).requires_grad_()
    want = torch.nn.functional.max_unpool2d(values, indices, 2)
    got = torch.nn.functional.max_unpool2d(values_t, indices.to(DEVICE), 2)
    assert torch.equal(got.cpu(), want)
    weights = torch.randn(want.shape)
    (want * weights).sum().backward()
    (got * weights.to(DEVICE)).sum().backward()
    assert values.grad is not None and values_t.grad is not None
    assert torch.equal(values_t.grad.cpu(), values.grad)
    pooled3, indices3 = torch.nn.functional.max_pool3d(
        torch.randn(1, 2, 4, 4, 4), 2, return_indices=True
    )
    got3 = torch.nn.functional.max_unpool3d(pooled3.to(DEVICE), indices3.to(DEVICE), 2)
    assert torch.equal(got3.cpu(), torch.nn.functional.max_unpool3d(pooled3, indices3, 2))


@pytest.mark.parametrize(
    ("shape", "size"),
    [((2, 3, 5, 6, 7), (2, 3, 4)), ((3, 4, 4, 4), (1, 1, 1)), ((1, 2, 6, 6, 6), (3, 3, 3))],
)
def test_adaptive_avg_pool3d_and_gradient(shape: tuple[int, ...], size: tuple[int, ...]) -> None:
    check_forward_and_backward(lambda x: torch.nn.functional.adaptive_avg_pool3d(x, size), shape)


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("dim", [0, 1])
def test_cummax_cummin_with_ties_and_nans(op: object, dim: int) -> None:
    torch.manual_seed(0)
    x = torch.randint(0, 4, (3, 9)).float()  # many ties: the later index wins, as on CPU
    x[1, 3] = x[1, 6] = x[2, 0] = float("nan")
    want = op(x, dim)  # type: ignore[operator]
    got = op(x.to(DEVICE), dim)  # type: ignore[operator]
    torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
    assert torch.equal(got.indices.cpu(), want.indices)
    integers = torch.randint(-3, 3, (4, 7))
    got_int = op(integers.to(DEVICE), 1)  # type: ignore[operator]
    want_int = op(integers, 1)  # type: ignore[operator]
    assert torch.equal(got_int.values.cpu(), want_int.values)
    assert torch.equal(got_int.indices.cpu(), want_int.indices)
