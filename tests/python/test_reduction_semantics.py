"""Checks from PyTorch's own test_reductions.py that tpu once failed, kept here against CPU:
complex truth tests and norms, any/all over dim=[], and the 64-dimension limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

TPU = torch.device("tpu")

COMPLEX_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "count_nonzero": torch.count_nonzero,
    "count_nonzero_dim": lambda t: torch.count_nonzero(t, dim=1),
    "logical_not": torch.logical_not,
    "all": torch.all,
    "all_dim": lambda t: torch.all(t, 1),
    "any": torch.any,
    "any_dim": lambda t: torch.any(t, 0),
    "norm2": torch.linalg.vector_norm,
    "norm1_dim": lambda t: torch.linalg.vector_norm(t, 1, dim=1),
    "norm_inf": lambda t: torch.linalg.vector_norm(t, float("inf")),
    "norm_-inf_dim": lambda t: torch.linalg.vector_norm(t, -float("inf"), dim=1),
    "norm0": lambda t: torch.linalg.vector_norm(t, 0),
    "norm3_dim": lambda t: torch.linalg.vector_norm(t, 3, dim=0),
}


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("name", list(COMPLEX_REDUCTIONS))
def test_complex_reductions_match_cpu(name: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 5, dtype=dtype)
    x[0, 1] = 0
    x[1, 2] = 1j  # true through its imaginary part alone
    x[3] = 0
    fn = COMPLEX_REDUCTIONS[name]
    expected = fn(x)
    got = fn(x.to(TPU)).cpu()
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("op", [torch.any, torch.all])
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all_over_no_dims_reduce_nothing(
    op: Callable[..., torch.Tensor], keepdim: bool
) -> None:
    x = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    expected = op(x, dim=[], keepdim=keepdim)
    got = op(x.to(TPU), dim=[], keepdim=keepdim).cpu()
    assert got.shape == expected.shape == (2, 2)
    assert torch.equal(got, expected)


@pytest.mark.parametrize(
    "op",
    [torch.sum, torch.mean, torch.std, torch.logsumexp, torch.argmax, torch.argmin],
    ids=lambda op: op.__name__,
)
def test_more_than_64_dims_with_a_dim_is_refused_as_on_cpu(op: Callable[..., torch.Tensor]) -> None:
    x = torch.randn([1] * 65)
    with pytest.raises(RuntimeError, match="only tensors with up to 64 dims are supported"):
        op(x, dim=0)
    with pytest.raises(RuntimeError, match="only tensors with up to 64 dims are supported"):
        op(x.to(TPU), dim=0)


def test_searchsorted_is_cpu_binary_search_step_for_step() -> None:
    torch.manual_seed(0)
    unsorted = torch.randn(3, 6)  # CPU's answer on unsorted rows is its search's path
    values = torch.randn(3, 4)
    values[0, 0] = float("nan")
    for sorter in (None, torch.argsort(unsorted, -1)):
        for side in ("left", "right"):
            expected = torch.searchsorted(unsorted, values, side=side, sorter=sorter)
            got = torch.searchsorted(
                unsorted.to(TPU),
                values.to(TPU),
                side=side,
                sorter=None if sorter is None else sorter.to(TPU),
            )
            assert torch.equal(got.cpu(), expected)
    # Memory grows with the values, not values x boundaries (which would be 2e10 here).
    boundaries = torch.sort(torch.randn(100_000)).values
    many = torch.randn(200_000)
    got = torch.bucketize(many.to(TPU), boundaries.to(TPU), right=True)
    assert torch.equal(got.cpu(), torch.bucketize(many, boundaries, right=True))


def test_searchsorted_warns_on_each_non_contiguous_call_as_on_cpu() -> None:
    values = torch.tensor([[[1, 3, 5], [2, 4, 6]], [[1, 2, 3], [4, 5, 6]]])
    boundaries = values.permute(2, 1, 0).to(torch.float64)
    permuted = values.permute(2, 1, 0).to(torch.int32)
    expected = torch.searchsorted(boundaries, permuted)
    always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # what PyTorch's tests do: warn-once messages on every call
    try:
        for call in range(2):  # the second call is a cache hit
            for device in ("cpu", TPU):
                with pytest.warns(UserWarning) as record:
                    got = torch.searchsorted(boundaries.to(device), permuted.to(device))
                kinds = sorted(
                    text.split("(): ")[1].split(" tensor")[0]
                    for text in (str(w.message) for w in record)
                    if "non-contiguous" in text
                )
                assert kinds == ["boundary", "input value"], (call, device, kinds)
                assert torch.equal(got.cpu(), expected)
        with pytest.warns(UserWarning, match="input value tensor is non-contiguous"):
            torch.bucketize(permuted.to(TPU), torch.tensor([1, 2, 3], device=TPU))
    finally:
        torch.set_warn_always(always)


@pytest.mark.parametrize("op", [torch.std, torch.var, torch.var_mean, torch.std_mean])
def test_no_degrees_of_freedom_warns_as_on_cpu(op: Callable[..., object]) -> None:
    x = torch.randn(10, 20)
    for device in ("cpu", TPU):
        with pytest.warns(UserWarning, match=rf"{op.__name__}\(\): degrees of freedom is <= 0"):
            op(x.to(device), dim=-1, correction=20)


@pytest.mark.parametrize(
    "values",
    [
        [-1000.0, 0.0, 5.0],  # a prefix far below the slice's maximum used to give -inf
        [float("-inf"), float("-inf"), 1.0, float("inf"), 2.0],
        [float("nan"), 1.0, 2.0],
    ],
)
def test_logcumsumexp_over_any_range_as_on_cpu(values: list[float]) -> None:
    x = torch.tensor(values)
    got = torch.logcumsumexp(x.to("tpu"), 0).cpu()
    torch.testing.assert_close(got, torch.logcumsumexp(x, 0), equal_nan=True)
    wide = torch.randn(3, 300, generator=torch.Generator().manual_seed(0)) * 300
    for dim in (0, 1):
        got = torch.logcumsumexp(wide.to("tpu"), dim).cpu()
        torch.testing.assert_close(got, torch.logcumsumexp(wide, dim))


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_logcumsumexp_as_on_cpu(dtype: torch.dtype) -> None:
    def standard(t: torch.Tensor) -> torch.Tensor:
        # The phase modulo 2 pi; a -inf real part makes the phase meaningless (zeroed).
        t = torch.complex(t.real, torch.remainder(t.imag, 2 * torch.pi))
        lost = torch.isneginf(t.real)
        return torch.where(lost, torch.complex(t.real, torch.zeros_like(t.real)), t)

    cases = [
        torch.randn(5, 10, dtype=dtype, generator=torch.Generator().manual_seed(0)),
        torch.tensor([1e3 + 0j, 1e-18 + 1e4j, 1e2 + 1e-8j], dtype=dtype),
        # Special values: CPU's accumulation order decides these.
        torch.tensor(
            [
                -INF + 4j,
                -INF + 1j,
                1.2 + 2.1j,
                1e10 + 1e20j,
                INF + 0j,
                INF + 1j,
                INF + 3j,
                NAN + 2j,
            ],
            dtype=dtype,
        ),
        torch.tensor(
            [complex(-INF, INF), complex(-INF, INF), -INF + 1j, 1.2 + 2.1j, complex(2.4, INF)],
            dtype=dtype,
        ),
    ]
    for x in cases:
        for dim in range(x.ndim):
            got = torch.logcumsumexp(x.to(TPU), dim).cpu()
            want = torch.logcumsumexp(x, dim)
            assert got.dtype == want.dtype
            torch.testing.assert_close(standard(got), standard(want), equal_nan=True)
