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


def _batch_norm_grads(device: str, training: bool) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (
        torch.randn(shape, dtype=torch.float64, generator=generator)
        for shape in ((4, 3, 5), (3,), (3,))
    )
    leaves = [t.to(device).requires_grad_() for t in (x, weight, bias)]
    mean = torch.zeros(3, dtype=torch.float64, device=device)
    var = torch.ones(3, dtype=torch.float64, device=device)
    y = F.batch_norm(leaves[0], mean, var, leaves[1], leaves[2], training=training)
    scale = torch.arange(y.numel(), dtype=torch.float64, device=device).reshape(y.shape)
    y.backward(scale)
    return [t.detach().cpu() for t in [y] + [leaf.grad for leaf in leaves]]  # type: ignore[misc]


@pytest.mark.parametrize("training", [True, False])
def test_float64_batch_norm_backward_precision(mode: str, training: bool) -> None:
    # The backward once computed in float32 whatever the input (errors ~1e-5).
    for actual, expected in zip(
        _batch_norm_grads(TPU, training), _batch_norm_grads("cpu", training), strict=True
    ):
        assert actual.dtype == torch.float64
        torch.testing.assert_close(actual, expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("mode_name", ["linear", "bilinear", "bicubic", "trilinear"])
def test_interpolate_precision(
    mode: str, dtype: torch.dtype, align_corners: bool, mode_name: str
) -> None:
    # Positions and weights in float64 for float64 inputs, as CPU (errors were ~1e-6).
    spatial = {"linear": (5,), "bilinear": (5, 6), "bicubic": (5, 6), "trilinear": (3, 4, 5)}
    x = torch.randn(1, 2, *spatial[mode_name], generator=torch.Generator().manual_seed(1))
    x = x.to(dtype)

    def run(device: str) -> list[torch.Tensor]:
        leaf = x.to(device).requires_grad_()
        y = F.interpolate(leaf, scale_factor=1.7, mode=mode_name, align_corners=align_corners)
        y.backward(torch.ones_like(y))
        assert leaf.grad is not None
        return [y.detach().cpu(), leaf.grad.cpu()]

    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    for actual, expected in zip(run(TPU), run("cpu"), strict=True):
        torch.testing.assert_close(actual, expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode_name", ["bilinear", "bicubic"])
def test_uint8_images_interpolate(
    mode: str, mode_name: str, align_corners: bool, antialias: bool
) -> None:
    # uint8 images were weighed in uint8 (values off by up to 242; antialiased: all zeros).
    # CPU computes them in fixed point or float by channel count and ISA, so the oracle is
    # PyTorch's own test's: the float result rounded and clipped, within 1 for bilinear, and
    # bicubic's bounds; and CPU's uint8 result within 2.
    low, high = (30, 220) if mode_name == "bicubic" else (0, 256)
    generator = torch.Generator().manual_seed(2)
    image = torch.randint(low, high, (2, 3, 40, 36), dtype=torch.uint8, generator=generator)
    for size in ((25, 17), (64, 50)):
        options = dict(size=size, mode=mode_name, align_corners=align_corners, antialias=antialias)
        actual = F.interpolate(image.to(TPU), **options).cpu()
        assert actual.dtype == torch.uint8
        reference = F.interpolate(image.float(), **options).round().clip(0, 255)
        diff = (actual.float() - reference).abs()
        if mode_name == "bilinear":
            assert diff.max() <= 1, size
        else:
            assert diff.max() < 15 and (diff > 2).float().mean() < 0.03, size
            assert diff.mean() < 0.4, size
        on_cpu = F.interpolate(image, **options)
        assert (actual.int() - on_cpu.int()).abs().max() <= 2, size


@pytest.mark.parametrize(
    ("x_dtype", "values_dtype"), [(torch.float32, torch.int64), (torch.int32, torch.float64)]
)
def test_heaviside_mixed_dtypes_message(
    mode: str, x_dtype: torch.dtype, values_dtype: torch.dtype
) -> None:
    x = torch.tensor([1, 0, -1]).to(x_dtype)
    values = torch.tensor([2, 2, 2]).to(values_dtype)
    assert_matches_cpu(lambda d: torch.heaviside(x.to(d), values.to(d)))
    assert_matches_cpu(lambda d: torch.heaviside(x.to(d), values.to(d).to(x_dtype)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("batched", [True, False])
def test_nll_loss_uint8_target(mode: str, reduction: str, batched: bool) -> None:
    # CPU takes a uint8 target; the Meta kernel (through gather) refused it.
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 4, generator=generator).log_softmax(-1)
    target = torch.randint(0, 4, (6,), dtype=torch.uint8, generator=generator)
    if not batched:
        logits, target = logits[0], target[0]

    def run(device: str) -> list[torch.Tensor]:
        leaf = logits.to(device).requires_grad_()
        loss = F.nll_loss(leaf, target.to(device), reduction=reduction, ignore_index=2)
        loss.sum().backward()
        assert leaf.grad is not None
        return [loss.detach().cpu(), leaf.grad.cpu()]

    for actual, expected in zip(run(TPU), run("cpu"), strict=True):
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_zero_nll_loss_has_cpus_sign(mode: str, reduction: str) -> None:
    # imagenet's example printed "Loss -0.0000e+00" on tpu, "0.0000e+00" on CPU: one class, so
    # log_softmax is 0. CPU's reductions subtract from a zero accumulator (+0); its unreduced
    # loss is -0. assert_close does not tell the zeros apart, so their signs are compared.
    logits = torch.tensor([[0.3], [1.5]])
    target = torch.tensor([0, 0])

    def run(device: str) -> torch.Tensor:
        return F.cross_entropy(logits.to(device), target.to(device), reduction=reduction).cpu()

    actual, expected = run(TPU), run("cpu")
    torch.testing.assert_close(actual, expected)
    assert torch.equal(torch.signbit(actual), torch.signbit(expected)), (actual, expected)


def test_legacy_storage_types() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated
        for dtype, name in ((torch.float32, "FloatStorage"), (torch.int8, "CharStorage")):
            tensor = torch.zeros(3, dtype=dtype, device=TPU)
            assert tensor.storage_type() is getattr(torch.tpu, name)
            assert isinstance(tensor.storage(), getattr(torch.tpu, name))
            assert not isinstance(tensor.cpu().storage(), getattr(torch.tpu, name))
        storage = torch.tpu.DoubleStorage(4)
        assert (storage.device.type, storage.dtype, storage.size()) == ("tpu", torch.float64, 4)


def test_untyped_storage_slice_refuses_with_its_way_out() -> None:
    tensor = torch.arange(6.0, device=TPU)
    assert tensor.untyped_storage()[4] == tensor.cpu().untyped_storage()[4]
    piece = tensor.untyped_storage()[4:12]
    with pytest.raises(NotImplementedError, match=r"tensor.view\(torch.uint8\)\[a:b\]"):
        piece[0]
    expected = tensor.cpu().untyped_storage()[4:12]
    assert tensor.view(torch.uint8)[4:12].cpu().tolist() == list(expected)


def test_in_place_leaky_relu_backward_with_negative_slope_raises(mode: str) -> None:
    for device in ("cpu", TPU):
        leaf = torch.randn(5, requires_grad=True)
        result = F.leaky_relu_(leaf.to(device).clone(), -0.1)
        with pytest.raises(RuntimeError, match="In-place leakyReLu backward"):
            result.sum().backward()
    leaf = torch.randn(5, requires_grad=True)
    F.leaky_relu_(leaf.to(TPU).clone(), 0.1).sum().backward()  # a slope >= 0 is fine


def test_deterministic_algorithms_allow_histc_and_median(mode: str) -> None:
    # Their Meta kernels raise CUDA's alerts; our programs give the same result on every run.
    values = torch.tensor([3.0, 1.0, 1.0, 2.0, 0.5])
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        counts = torch.histc(values.to(TPU), bins=4)
        assert torch.equal(counts.cpu(), torch.histc(values, bins=4))
        median = torch.median(values.to(TPU), 0)
        expected = torch.median(values, 0)
        assert median.values.item() == expected.values.item()
        assert median.indices.item() == expected.indices.item()
    finally:
        torch.use_deterministic_algorithms(was)


def test_complex_logaddexp(mode: str) -> None:
    inf, nan = float("inf"), float("nan")
    a = torch.tensor(
        [1 + 2j, -3 + 0.5j, complex(-inf, 1), complex(inf, 2), complex(nan, 0), 100 + 1j, 2 + 3j],
        dtype=torch.complex64,
    )
    b = torch.tensor(
        [0.5 - 1j, 2 + 2j, complex(-inf, 3), complex(inf, -1), 1 + 1j, 99 + 2j, 2 + 3j],
        dtype=torch.complex64,
    )
    actual = torch.logaddexp(a.to(TPU), b.to(TPU)).cpu()
    torch.testing.assert_close(actual, torch.logaddexp(a, b), equal_nan=True)
    x = torch.randn(6, dtype=torch.complex64, generator=torch.Generator().manual_seed(4))
    y = torch.randn(6, dtype=torch.complex64, generator=torch.Generator().manual_seed(5))

    def gradient(device: str) -> torch.Tensor:
        leaf = x.to(device).requires_grad_()
        torch.logaddexp(leaf, y.to(device)).abs().sum().backward()
        assert leaf.grad is not None
        return leaf.grad.cpu()

    torch.testing.assert_close(gradient(TPU), gradient("cpu"))


def _lu_of_random() -> tuple[torch.Tensor, torch.Tensor]:
    matrix = torch.randn(3, 3, generator=torch.Generator().manual_seed(6))
    lu, pivots = torch.linalg.lu_factor(matrix)
    return lu, pivots


NAN_MATRIX = torch.full((3, 3), float("nan"))
INF_MATRIX = torch.eye(3).index_fill(0, torch.tensor([1]), float("inf"))
REFUSED_CALLS: dict[str, Callable[[str], object]] = {
    # Operands of two dtypes that CPU's products will not mix.
    "mv_float_by_long": lambda d: torch.mv(
        torch.randn(3, 4, device=d), torch.ones(4, dtype=torch.long, device=d)
    ),
    "cross_float_by_long": lambda d: torch.linalg.cross(
        torch.randn(3, device=d), torch.ones(3, dtype=torch.long, device=d)
    ),
    # Values CPU checks and the device now checks too (raised at the next sync).
    "svd_of_nan": lambda d: torch.linalg.svd(NAN_MATRIX.to(d)).S,
    "svd_of_inf": lambda d: torch.linalg.svd(INF_MATRIX.to(d)).S,
    "svdvals_of_nan": lambda d: torch.linalg.svdvals(NAN_MATRIX.to(d)),
    "eigh_of_nan": lambda d: torch.linalg.eigh(NAN_MATRIX.to(d)).eigenvalues,
    "eigvalsh_of_inf": lambda d: torch.linalg.eigvalsh(INF_MATRIX.to(d)),
    "hermitian_pinv_of_nan": lambda d: torch.linalg.pinv(NAN_MATRIX.to(d), hermitian=True),
    "hermitian_matrix_rank_of_nan": lambda d: torch.linalg.matrix_rank(
        NAN_MATRIX.to(d), hermitian=True
    ),
    "matrix_rank_of_nan": lambda d: torch.linalg.matrix_rank(NAN_MATRIX.to(d)),
    "pinv_of_nan": lambda d: torch.linalg.pinv(NAN_MATRIX.to(d)),
    "binary_cross_entropy_of_nan": lambda d: F.binary_cross_entropy(
        torch.tensor([0.5, float("nan")], device=d), torch.ones(2, device=d)
    ),
    "binary_cross_entropy_above_one": lambda d: F.binary_cross_entropy(
        torch.tensor([0.5, 1.5], device=d), torch.ones(2, device=d)
    ),
    "lu_solve_pivots_out_of_range": lambda d: torch.linalg.lu_solve(
        _lu_of_random()[0].to(d),
        torch.tensor([7, 9, 3], dtype=torch.int32, device=d),
        torch.ones(3, 1, device=d),
    ),
    # Shapes and layouts.
    "masked_scatter_into_expanded": lambda d: (
        torch.zeros(1, device=d)
        .expand(3)
        .masked_scatter_(torch.tensor([True, False, True], device=d), torch.ones(3, device=d))
    ),
    "sort_0d_dim_minus_3": lambda d: torch.sort(torch.tensor(1.0, device=d), dim=-3).values,
    # Empty inputs: no index is in range of an empty dimension (this failed to compile).
    "gather_from_an_empty_dimension": lambda d: torch.gather(
        torch.zeros(0, device=d), 0, torch.tensor([2], device=d)
    ),
}


@pytest.mark.parametrize("name", list(REFUSED_CALLS))
def test_calls_cpu_refuses_raise(mode: str, name: str) -> None:
    # Each answered a value on tpu while CPU raised (the bad-input fuzz's silent acceptances).
    call = REFUSED_CALLS[name]
    with pytest.raises(Exception) as on_cpu:  # noqa: PT011 - the class is what is compared
        call("cpu")
    with pytest.raises(on_cpu.type):  # LinAlgError for what LAPACK refuses, as CPU
        result = call(TPU)
        assert isinstance(result, torch.Tensor)
        result.cpu()  # a value checked on the device raises here at the latest
    torch.tpu.synchronize()  # the failure was raised once and is not raised again
    lu, pivots = _lu_of_random()  # the same calls with good values still answer
    b = torch.ones(3, 1)
    torch.testing.assert_close(
        torch.linalg.lu_solve(lu.to(TPU), pivots.to(TPU), b.to(TPU)).cpu(),
        torch.linalg.lu_solve(lu, pivots, b),
    )


def test_singular_values_of_an_infinite_matrix_answer_as_on_cpu(mode: str) -> None:
    # CPU's LAPACK refuses an infinite matrix only where it computes U and V: its singular
    # values alone are NaN, and matrix_rank counts none of them.
    torch.testing.assert_close(
        torch.linalg.svdvals(INF_MATRIX.to(TPU)).cpu(),
        torch.linalg.svdvals(INF_MATRIX),
        equal_nan=True,
    )
    assert (
        torch.linalg.matrix_rank(INF_MATRIX.to(TPU)).item()
        == torch.linalg.matrix_rank(INF_MATRIX).item()
    )
    finite = torch.randn(3, 3, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(
        torch.linalg.eigvalsh(finite.to(TPU) + finite.T.to(TPU)).cpu(),
        torch.linalg.eigvalsh(finite + finite.T),
    )


def test_index_add_into_a_tensor_without_elements_answers_as_on_cpu(mode: str) -> None:
    # CPU's index_add into a self of several dimensions and no elements reads no index (it
    # answered where tpu reported the index out of range); with one dimension it refuses.
    for shape in [(0, 3), (2, 0)]:
        self, source = torch.zeros(shape), torch.ones(1, *shape[1:])
        index = torch.tensor([5])
        want = self.index_add(0, index, source)
        got = self.to(TPU).index_add(0, index.to(TPU), source.to(TPU))
        torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(IndexError):
        torch.zeros(0).index_add(0, torch.tensor([0]), torch.ones(1))
    with pytest.raises(IndexError):
        torch.zeros(0, device=TPU).index_add(
            0, torch.tensor([0], device=TPU), torch.ones(1, device=TPU)
        ).cpu()


def test_sgn_of_nan_is_zero_as_on_cpu(mode: str) -> None:
    # sgn of a real tensor is sign, whose NaN CPU maps to 0 (tpu answered NaN).
    x = torch.tensor([float("nan"), 1.5, -2.0, 0.0, float("-inf")])
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        torch.testing.assert_close(torch.sgn(x.to(TPU, dtype)).cpu(), torch.sgn(x.to(dtype)))


def test_margin_losses_of_nan_scores_as_on_cpu(mode: str) -> None:
    # CPU adds a hinge term only where it is > 0, so a NaN term adds nothing (tpu answered NaN).
    scores = torch.tensor([[float("nan"), 0.5, -1.0], [0.2, float("nan"), 0.1]])
    labels = torch.tensor([[0, 1, -1], [2, -1, 0]])
    classes = torch.tensor([1, 2])
    for reduction in ("mean", "none"):
        torch.testing.assert_close(
            F.multilabel_margin_loss(scores.to(TPU), labels.to(TPU), reduction=reduction).cpu(),
            F.multilabel_margin_loss(scores, labels, reduction=reduction),
            equal_nan=True,
        )
        for p in (1, 2):
            torch.testing.assert_close(
                F.multi_margin_loss(
                    scores.to(TPU), classes.to(TPU), p=p, reduction=reduction
                ).cpu(),
                F.multi_margin_loss(scores, classes, p=p, reduction=reduction),
                equal_nan=True,
            )


def _with_nans_and_neg_inf(shape: tuple[int, ...]) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(shape)
    x[x > 1.0] = float("nan")
    x[x < -1.2] = float("-inf")
    return x


POOLS: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "max_pool1d": lambda x: F.max_pool1d(x.flatten(2), 4, return_indices=True),
    "max_pool1d_overlapping": lambda x: F.max_pool1d(x.flatten(2), 3, 1, return_indices=True),
    "max_pool2d_padded": lambda x: F.max_pool2d(x, 3, 2, padding=1, return_indices=True),
    "max_pool2d_ceil": lambda x: F.max_pool2d(x, 2, 2, ceil_mode=True, return_indices=True),
    "max_pool3d": lambda x: F.max_pool3d(x.unsqueeze(2), (1, 2, 2), return_indices=True),
    "adaptive_max_pool1d": lambda x: F.adaptive_max_pool1d(x.flatten(2), 5, return_indices=True),
    "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
}


@pytest.mark.parametrize("fill", ["nan_and_neg_inf", "all_neg_inf"])
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_max_pools_pick_cpus_index_among_nans_and_neg_infs(mode: str, pool: str, fill: str) -> None:
    # CPU's scans keep the first largest value, the last NaN of a window, and a real -inf over
    # padding; a window of -inf reports its first position.
    if fill == "all_neg_inf":
        x = torch.full((2, 3, 7, 9), float("-inf"))
    else:
        x = _with_nans_and_neg_inf((2, 3, 7, 9))
    expected_values, expected_indices = POOLS[pool](x)
    values, indices = POOLS[pool](x.to(TPU))
    assert torch.equal(indices.cpu(), expected_indices)
    torch.testing.assert_close(values.cpu(), expected_values, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("mode_name", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_antialiased_float64_resize_is_float64_accurate(
    mode: str, mode_name: str, align_corners: bool
) -> None:
    # The antialiasing weights were tabulated in float32 for every dtype, so a float64 image of
    # ones came out 1 - 2e-7 where CPU (weights in float64) gives ones to the last bits.
    x = torch.ones(2, 3, 8, 8, dtype=torch.float64)
    for size in (4, 5, 12):
        args = {"mode": mode_name, "align_corners": align_corners, "antialias": True}
        expected = F.interpolate(x, size=size, **args)
        actual = F.interpolate(x.to(TPU), size=size, **args).cpu()
        torch.testing.assert_close(actual, expected, atol=1e-12, rtol=0)
    y = torch.randn(2, 3, 9, 7, dtype=torch.float64)
    args = {"mode": mode_name, "align_corners": align_corners, "antialias": True}
    torch.testing.assert_close(
        F.interpolate(y.to(TPU), size=(4, 3), **args).cpu(),
        F.interpolate(y, size=(4, 3), **args),
        atol=1e-12,
        rtol=1e-12,
    )


def test_output_layout_follows_each_inputs_suggested_format(mode: str) -> None:
    # A channels-last batch of one and the same image taken back out with x[0][None] read the
    # same elements and keyed one executable, which kept the first call's output layout: the
    # second got channels-last strides where CPU (following suggest_memory_format) is contiguous.
    batch = torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8)
    batch = batch.contiguous(memory_format=torch.channels_last)
    for first_whole in (True, False):
        for device in ("cpu", TPU):
            x = batch.to(device).contiguous(memory_format=torch.channels_last)
            inputs = [x, x[0][None]] if first_whole else [x[0][None], x]
            outs = [F.interpolate(t.float(), size=(8, 8), mode="bilinear") for t in inputs]
            outs += [F.interpolate(t, size=(8, 8), mode="nearest") for t in inputs]
            if device == "cpu":
                expected = [(o.stride(), o.is_contiguous()) for o in outs]
                values = list(outs)
            else:
                assert [(o.stride(), o.is_contiguous()) for o in outs] == expected
                for got, want in zip(outs, values, strict=True):
                    torch.testing.assert_close(got.cpu(), want)


def test_resize_grow_keeps_pending_values(mode: str) -> None:
    # DeferAndFuse dropped a tensor's values still pending when resize_ grew its storage (zeros
    # came back); the grown tail is uninitialized, so only the kept head is compared.
    def grow(device: str) -> torch.Tensor:
        t = torch.arange(24, device=device).float().reshape(2, 3, 4) * 2
        return t.resize_(3, 4, 5).flatten()[:24]

    assert_matches_cpu(grow)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.bool])
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin_small_integers(mode: str, dtype: torch.dtype, op: str) -> None:
    # The scan's identity was int32's bound for every integer type: uint8 failed to compile.
    x = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]).to(dtype)
    assert_matches_cpu(lambda d: getattr(torch, op)(x.to(d), 1).values)
    assert_matches_cpu(lambda d: getattr(torch, op)(x.to(d), 1).indices)
