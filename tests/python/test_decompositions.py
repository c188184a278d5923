"""QR (Householder), SVD (one-sided Jacobi) and the symmetric eigendecomposition (two-sided
Jacobi) on tpu against CPU (LAPACK): factors, what is built on them, gradients, bad input."""

from __future__ import annotations

import pytest
import torch

DEVICE = "tpu"
CLOSE = {"atol": 2e-5, "rtol": 2e-5}


def tpu(x: torch.Tensor) -> torch.Tensor:
    return x.to(DEVICE)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 4), (0, 3), (3, 0)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_lapack_signs(shape: tuple[int, ...], mode: str) -> None:
    torch.manual_seed(0)
    a = torch.randn(*shape)
    q, r = torch.linalg.qr(a, mode=mode)
    q_t, r_t = torch.linalg.qr(tpu(a), mode=mode)
    assert q_t.shape == q.shape and r_t.shape == r.shape
    torch.testing.assert_close(q_t.cpu(), q, **CLOSE)
    torch.testing.assert_close(r_t.cpu(), r, **CLOSE)


@pytest.mark.parametrize("shape", [(6, 4), (4, 4), (3, 5)])
def test_geqrf_householder_product_and_ormqr(shape: tuple[int, int]) -> None:
    torch.manual_seed(1)
    a = torch.randn(*shape)
    packed, tau = torch.geqrf(a)
    packed_t, tau_t = torch.geqrf(tpu(a))
    torch.testing.assert_close(packed_t.cpu(), packed, **CLOSE)
    torch.testing.assert_close(tau_t.cpu(), tau, **CLOSE)
    if shape[0] >= shape[1]:
        want = torch.linalg.householder_product(packed, tau)
        got = torch.linalg.householder_product(packed_t, tau_t).cpu()
        torch.testing.assert_close(got, want, **CLOSE)
    other = torch.randn(shape[0], 3)
    for left, transpose in [(True, False), (True, True), (False, False), (False, True)]:
        c = other if left else other.T.contiguous()
        want = torch.ormqr(packed, tau, c, left, transpose)
        got = torch.ormqr(packed_t, tau_t, tpu(c), left, transpose).cpu()
        torch.testing.assert_close(got, want, **CLOSE)


def test_qr_gradient_matches_cpu() -> None:
    torch.manual_seed(2)
    a = torch.randn(5, 3, requires_grad=True)
    a_t = tpu(a.detach()).requires_grad_(True)
    q, r = torch.linalg.qr(a)
    q_t, r_t = torch.linalg.qr(a_t)
    (q.sum() + (r * r).sum()).backward()
    (q_t.sum() + (r_t * r_t).sum()).backward()
    torch.testing.assert_close(a_t.grad.cpu(), a.grad, atol=1e-4, rtol=1e-4)


def test_bad_qr_mode_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="unrecognized mode 'thin'"):
        torch.linalg.qr(tpu(torch.randn(3, 3)), mode="thin")


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (1, 1), (2, 2), (3, 6, 5), (7, 7)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_factors_and_reconstruction(shape: tuple[int, ...], full_matrices: bool) -> None:
    torch.manual_seed(3)
    a = torch.randn(*shape)
    u, s, vh = torch.linalg.svd(a, full_matrices=full_matrices)
    u_t, s_t, vh_t = (t.cpu() for t in torch.linalg.svd(tpu(a), full_matrices=full_matrices))
    assert (u_t.shape, s_t.shape, vh_t.shape) == (u.shape, s.shape, vh.shape)
    torch.testing.assert_close(s_t, s, **CLOSE)
    k = s.shape[-1]
    # Singular vectors are unique up to sign (the singular values are distinct here).
    torch.testing.assert_close(u_t[..., :k].abs(), u[..., :k].abs(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(vh_t[..., :k, :].abs(), vh[..., :k, :].abs(), atol=1e-4, rtol=1e-4)
    rebuilt = (u_t[..., :k] * s_t.unsqueeze(-2)) @ vh_t[..., :k, :]
    torch.testing.assert_close(rebuilt, a, **CLOSE)
    eye = torch.eye(u_t.shape[-1]).expand_as(u_t.mT @ u_t)
    torch.testing.assert_close(u_t.mT @ u_t, eye, **CLOSE)
    eye = torch.eye(vh_t.shape[-2]).expand_as(vh_t @ vh_t.mT)
    torch.testing.assert_close(vh_t @ vh_t.mT, eye, **CLOSE)


def test_svd_of_rank_deficient_and_empty_matrices() -> None:
    ones = torch.ones(4, 3)
    u, s, vh = (t.cpu() for t in torch.linalg.svd(tpu(ones), full_matrices=True))
    torch.testing.assert_close(s, torch.linalg.svdvals(ones), **CLOSE)
    # U stays orthonormal although two singular values are zero.
    torch.testing.assert_close(u.mT @ u, torch.eye(4), **CLOSE)
    torch.testing.assert_close((u[:, :3] * s) @ vh, ones, **CLOSE)
    assert int(torch.linalg.matrix_rank(tpu(ones)).cpu()) == 1
    for shape in [(0, 3), (3, 0), (2, 0, 0)]:
        for full in (False, True):
            want = torch.linalg.svd(torch.randn(*shape), full_matrices=full)
            got = torch.linalg.svd(tpu(torch.randn(*shape)), full_matrices=full)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape
                torch.testing.assert_close(g.cpu(), w)


def test_svd_built_ops_and_gradients_match_cpu() -> None:
    torch.manual_seed(4)
    a = torch.randn(2, 5, 4)
    for fn in (
        torch.linalg.svdvals,
        torch.linalg.pinv,
        lambda x: torch.linalg.matrix_norm(x, ord="nuc"),
        lambda x: torch.linalg.matrix_norm(x, ord=2),
        lambda x: torch.linalg.cond(x[..., :4, :]),
    ):
        leaf = a.clone().requires_grad_(True)
        leaf_t = tpu(a).requires_grad_(True)
        want, got = fn(leaf), fn(leaf_t)
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
        weights = torch.linspace(-1, 1, want.numel()).view(want.shape)
        (want * weights).sum().backward()
        (got * tpu(weights)).sum().backward()
        torch.testing.assert_close(leaf_t.grad.cpu(), leaf.grad, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (6, 6), (2, 5, 5)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_reads_one_triangle_and_matches_lapack(shape: tuple[int, ...], uplo: str) -> None:
    torch.manual_seed(5)
    a = torch.randn(*shape)  # not symmetric: only the UPLO triangle may be read
    w, v = torch.linalg.eigh(a, UPLO=uplo)
    w_t, v_t = (t.cpu() for t in torch.linalg.eigh(tpu(a), UPLO=uplo))
    torch.testing.assert_close(w_t, w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v_t.abs(), v.abs(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.linalg.eigvalsh(tpu(a), UPLO=uplo).cpu(), w, **CLOSE)


def test_eigh_gradient_and_repeated_eigenvalues() -> None:
    torch.manual_seed(6)
    x = torch.randn(4, 4)
    a = x @ x.T
    leaf, leaf_t = a.clone().requires_grad_(True), tpu(a).requires_grad_(True)
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0])
    (torch.linalg.eigvalsh(leaf) * weights).sum().backward()
    (torch.linalg.eigvalsh(leaf_t) * tpu(weights)).sum().backward()
    torch.testing.assert_close(leaf_t.grad.cpu(), leaf.grad, atol=1e-4, rtol=1e-4)
    w, v = (t.cpu() for t in torch.linalg.eigh(tpu(torch.eye(3) * 2)))
    torch.testing.assert_close(w, torch.full((3,), 2.0))
    torch.testing.assert_close(v.T @ v, torch.eye(3))


def test_eigh_of_a_non_square_matrix_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.eigh(tpu(torch.randn(3, 4)))


@pytest.mark.parametrize("upper", [False, True])
def test_older_cholesky_entry_points(upper: bool) -> None:
    torch.manual_seed(7)
    x = torch.randn(2, 4, 4)
    a = x @ x.mT + torch.eye(4)
    factor = torch.cholesky(a, upper=upper)
    factor_t = torch.cholesky(tpu(a), upper=upper)
    torch.testing.assert_close(factor_t.cpu(), factor, **CLOSE)
    torch.testing.assert_close(
        torch.cholesky_inverse(factor_t, upper=upper).cpu(),
        torch.cholesky_inverse(factor, upper=upper),
        atol=1e-4,
        rtol=1e-4,
    )
    rhs = torch.randn(2, 4, 3)
    torch.testing.assert_close(
        torch.cholesky_solve(tpu(rhs), factor_t, upper=upper).cpu(),
        torch.cholesky_solve(rhs, factor, upper=upper),
        atol=1e-4,
        rtol=1e-4,
    )
    with pytest.raises(RuntimeError, match="not positive-definite"):
        torch.cholesky(tpu(-a), upper=upper)


@pytest.mark.parametrize("scale", [0.0, 0.01, 1.0, 5.0, 12.0])
def test_matrix_exp_against_float64(scale: float) -> None:
    torch.manual_seed(8)
    a = torch.randn(3, 4, 4) * scale
    # float64 on CPU is the reference: CPU's own float32 result is less accurate for large norms.
    want = torch.linalg.matrix_exp(a.double())
    got = torch.linalg.matrix_exp(tpu(a)).cpu().double()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * float(want.abs().max()))
    leaf, leaf_t = a[0].clone().requires_grad_(True), tpu(a[0]).requires_grad_(True)
    if scale <= 1.0:
        torch.linalg.matrix_exp(leaf).sum().backward()
        torch.linalg.matrix_exp(leaf_t).sum().backward()
        torch.testing.assert_close(leaf_t.grad.cpu(), leaf.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (2, 4), (2, 6, 3)])
def test_lstsq_matches_lapack_drivers(driver: str, shape: tuple[int, ...]) -> None:
    torch.manual_seed(4)
    a = torch.randn(*shape)
    b = torch.randn(*shape[:-1], 2)
    want = torch.linalg.lstsq(a, b, driver=driver)
    got = torch.linalg.lstsq(tpu(a), tpu(b), driver=driver)
    for name in ("solution", "residuals", "rank", "singular_values"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g.cpu(), w, **CLOSE)


def test_lstsq_rank_deficient_vector_rhs_and_gradient() -> None:
    torch.manual_seed(5)
    a = torch.randn(6, 3)
    a[:, 2] = a[:, 0] + a[:, 1]  # rank 2: the minimum-norm solution
    b = torch.randn(6)
    want = torch.linalg.lstsq(a, b, driver="gelsd")
    got = torch.linalg.lstsq(tpu(a), tpu(b), driver="gelsd")
    assert int(got.rank) == int(want.rank) == 2
    assert got.residuals.numel() == want.residuals.numel() == 0  # not full rank
    torch.testing.assert_close(got.solution.cpu(), want.solution, atol=1e-4, rtol=1e-4)

    def grad_on(device: str) -> torch.Tensor:
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(6)).to(device)
        x.requires_grad_()
        rhs = torch.linspace(-1, 1, 10).view(5, 2).to(device)
        torch.linalg.lstsq(x, rhs).solution.sum().backward()
        return x.grad

    torch.testing.assert_close(grad_on(DEVICE).cpu(), grad_on("cpu"), atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="driver"):
        torch.linalg.lstsq(tpu(a), tpu(b), driver="nope")
    with pytest.raises(RuntimeError, match="should match"):
        torch.linalg.lstsq(tpu(a), tpu(torch.randn(5, 2)))
