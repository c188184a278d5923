"""LU-based linear algebra on tpu against CPU (LAPACK): lu_factor, lu_solve, inv, solve, det,
slogdet, their gradients, and singular inputs."""

from __future__ import annotations

import pytest
import torch

DEVICE = "tpu"
SHAPES = [(4, 4), (3, 5, 5), (2, 3, 1, 1), (6, 6)]


def tpu(x: torch.Tensor) -> torch.Tensor:
    return x.to(DEVICE)


@pytest.mark.parametrize("shape", SHAPES)
def test_factor_inverse_determinants_and_solves(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    a = torch.randn(*shape)
    lu, pivots = torch.linalg.lu_factor(a)
    lu_t, pivots_t = torch.linalg.lu_factor(tpu(a))
    torch.testing.assert_close(lu_t.cpu(), lu, atol=1e-5, rtol=1e-4)
    assert torch.equal(pivots_t.cpu(), pivots)
    torch.testing.assert_close(
        torch.linalg.inv(tpu(a)).cpu(), torch.linalg.inv(a), atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(
        torch.linalg.det(tpu(a)).cpu(), torch.linalg.det(a), atol=1e-5, rtol=1e-4
    )
    sign, logabs = torch.linalg.slogdet(tpu(a))
    want_sign, want_logabs = torch.linalg.slogdet(a)
    torch.testing.assert_close(sign.cpu(), want_sign)
    torch.testing.assert_close(logabs.cpu(), want_logabs, atol=1e-5, rtol=1e-4)
    matrix, vector = torch.randn(*shape[:-1], 3), torch.randn(*shape[:-1])
    for rhs in (matrix, vector):
        got = torch.linalg.solve(tpu(a), tpu(rhs)).cpu()
        torch.testing.assert_close(got, torch.linalg.solve(a, rhs), atol=1e-4, rtol=1e-4)
    for adjoint in (False, True):
        got = torch.linalg.lu_solve(lu_t, pivots_t, tpu(matrix), adjoint=adjoint).cpu()
        want = torch.linalg.lu_solve(lu, pivots, matrix, adjoint=adjoint)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_gradients_match_cpu() -> None:
    torch.manual_seed(1)
    a = torch.randn(3, 4, 4, requires_grad=True)
    b = torch.randn(3, 4, 2, requires_grad=True)
    a_t = a.detach().to(DEVICE).requires_grad_()
    b_t = b.detach().to(DEVICE).requires_grad_()

    def loss(m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (
            torch.linalg.inv(m).sum()
            + torch.linalg.det(m).sum()
            + torch.linalg.det(m.mT).sum()
            + torch.linalg.slogdet(m)[1].sum()
            + torch.linalg.solve(m, r).sum()
        )

    loss(a, b).backward()
    loss(a_t, b_t).backward()
    assert a.grad is not None and a_t.grad is not None and b.grad is not None
    assert b_t.grad is not None
    torch.testing.assert_close(a_t.grad.cpu(), a.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(b_t.grad.cpu(), b.grad, atol=1e-4, rtol=1e-4)


def test_singular_matrices() -> None:
    singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(torch.linalg.LinAlgError, match="diagonal element 2 is zero"):
        torch.linalg.inv(tpu(singular))
    _, info = torch.linalg.inv_ex(tpu(singular))
    assert info.item() == 2
    assert torch.linalg.det(tpu(singular)).item() == 0.0
    sign, logabs = torch.linalg.slogdet(tpu(singular))
    assert sign.item() == 0.0 and logabs.item() == float("-inf")


def test_bad_shapes_and_unsupported_options() -> None:
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.inv(torch.randn(2, 3, device=DEVICE))
    with pytest.raises(NotImplementedError, match="left=False"):
        torch.linalg.solve(
            torch.randn(3, 3, device=DEVICE), torch.randn(2, 3, device=DEVICE), left=False
        )


def test_cholesky_and_gradient() -> None:
    torch.manual_seed(0)
    m = torch.randn(3, 5, 5)
    a = (m @ m.mT + 0.5 * torch.eye(5)).requires_grad_()
    a_t = a.detach().to(DEVICE).requires_grad_()
    for upper in (False, True):
        got = torch.linalg.cholesky(tpu(a.detach()), upper=upper).cpu()
        torch.testing.assert_close(got, torch.linalg.cholesky(a.detach(), upper=upper))
    torch.linalg.cholesky(a).sum().backward()
    torch.linalg.cholesky(a_t).sum().backward()
    assert a.grad is not None and a_t.grad is not None
    torch.testing.assert_close(a_t.grad.cpu(), a.grad, atol=1e-4, rtol=1e-4)
    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    assert torch.linalg.cholesky_ex(tpu(indefinite)).info.item() == 2
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.linalg.cholesky(tpu(indefinite))


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_solve_triangular(upper: bool, unitriangular: bool) -> None:
    torch.manual_seed(0)
    t = torch.randn(2, 4, 4) + 4 * torch.eye(4)
    b_left, b_right = torch.randn(2, 4, 3), torch.randn(2, 3, 4)
    options = {"upper": upper, "unitriangular": unitriangular}
    got = torch.linalg.solve_triangular(tpu(t), tpu(b_left), **options).cpu()
    torch.testing.assert_close(got, torch.linalg.solve_triangular(t, b_left, **options))
    got = torch.linalg.solve_triangular(tpu(t), tpu(b_right), left=False, **options).cpu()
    want = torch.linalg.solve_triangular(t, b_right, left=False, **options)
    torch.testing.assert_close(got, want)
