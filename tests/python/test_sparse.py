"""Sparse COO tensors on tpu, against CPU: conversions, sparse arithmetic with type promotion
(the checks of PyTorch's test_type_promotion.py sparse tests), and the paths that run on the
device (dense + sparse, to_dense, an embedding's sparse gradient under SGD)."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import pytest
import torch

TPU = torch.device("tpu")
HOST_WARNING = "on sparse tensors runs on the host"


def dense_and_sparse(
    dtype: torch.dtype, coalesced: bool, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A (3, 4) dense tensor with zeros, and the same values as a sparse tensor on CPU; an
    uncoalesced one stores every entry twice, halved (so that duplicates must add up)."""
    g = torch.Generator().manual_seed(seed)
    dense = torch.randint(1, 5, (3, 4), generator=g).to(dtype)
    dense[torch.rand(3, 4, generator=g) < 0.4] = 0
    sparse = dense.to_sparse()
    if not coalesced:
        values = sparse.values()
        if dtype.is_floating_point or dtype.is_complex:
            parts = [values / 2, values / 2]
        else:
            parts = [values, torch.zeros_like(values)]
        indices = torch.cat([sparse.indices(), sparse.indices()], 1)
        sparse = torch.sparse_coo_tensor(indices, torch.cat(parts), sparse.shape)
        assert not sparse.is_coalesced()
    return dense, sparse


def test_conversions_and_parts_match_cpu() -> None:
    dense, _ = dense_and_sparse(torch.float32, True, 0)
    on_device = dense.to(TPU).to_sparse()
    expected = dense.to_sparse()
    assert on_device.layout == torch.sparse_coo and on_device.device.type == "tpu"
    assert on_device._nnz() == expected._nnz() and on_device.is_coalesced()
    assert torch.equal(on_device.indices().cpu(), expected.indices())
    assert torch.equal(on_device.values().cpu(), expected.values())
    assert torch.equal(on_device.to_dense().cpu(), dense)
    # Across devices both ways, and a tensor built on the device from its parts.
    moved = expected.to(TPU)
    assert moved.device.type == "tpu" and torch.equal(moved.cpu().to_dense(), dense)
    indices = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])
    values = torch.tensor([3.0, 4.0, 5.0, 1.0])
    built = torch.sparse_coo_tensor(indices.to(TPU), values.to(TPU), (2, 3))
    reference = torch.sparse_coo_tensor(indices, values, (2, 3))
    assert torch.equal(built.to_dense().cpu(), reference.to_dense())  # duplicates add up
    coalesced = built.coalesce()
    assert coalesced.is_coalesced() and coalesced.device.type == "tpu"
    assert torch.equal(coalesced.indices().cpu(), reference.coalesce().indices())
    assert torch.equal(coalesced.values().cpu(), reference.coalesce().values())
    # Partial sparse dims (dense trailing dims), and zero stored entries.
    partial = dense.to(TPU).to_sparse(1)
    assert partial.sparse_dim() == 1 and partial.dense_dim() == 1
    assert torch.equal(partial.to_dense().cpu(), dense)
    empty = torch.zeros(2, 2, device=TPU).to_sparse()
    assert empty._nnz() == 0 and torch.equal(empty.to_dense().cpu(), torch.zeros(2, 2))


def outcome(fn: Callable[[], torch.Tensor]) -> torch.Tensor | type[BaseException]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn()
        return result.to_dense().cpu() if result.layout == torch.sparse_coo else result.cpu()
    except (RuntimeError, TypeError) as error:
        return type(error)


DTYPES = [torch.bool, torch.int64, torch.float32, torch.float64, torch.complex64]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_sparse_arithmetic_and_promotion_match_cpu(op: str) -> None:
    """Sparse (op) sparse, dense (op) sparse, sparse (op) dense and sparse (op) scalar, in place
    and not, coalesced and not, over pairs of dtypes: the same result (or error class) as CPU."""
    for (dtype1, dtype2), inplace, coalesced in itertools.product(
        itertools.product(DTYPES, DTYPES), (False, True), (True, False)
    ):
        if op == "div" and not (dtype1.is_floating_point or dtype1.is_complex):
            continue
        d1, s1 = dense_and_sparse(dtype1, coalesced, 1)
        d2, s2 = dense_and_sparse(dtype2, coalesced, 2)
        name = op + ("_" if inplace else "")
        for left, right in ((s1, s2), (d1, s2), (s1, d2), (s1, d2.flatten()[0].item())):

            def run(
                device: torch.device | str, a: object = left, b: object = right, name: str = name
            ) -> torch.Tensor:
                a = a.clone().to(device)  # type: ignore[attr-defined]
                b = b.to(device) if isinstance(b, torch.Tensor) else b
                return getattr(a, name)(b)

            want, got = outcome(lambda: run("cpu")), outcome(lambda: run(TPU))
            case = (op, dtype1, dtype2, inplace, coalesced, type(left), type(right))
            if isinstance(want, torch.Tensor):
                assert isinstance(got, torch.Tensor), (case, got)
                assert got.dtype == want.dtype, case
                torch.testing.assert_close(got, want, equal_nan=True, msg=str(case))
            else:
                assert got is want, (case, got, want)


def host_warnings(fn: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in record if HOST_WARNING in str(w.message)]


def test_dense_plus_sparse_and_to_dense_run_on_the_device() -> None:
    dense, sparse = dense_and_sparse(torch.float32, False, 3)
    base = torch.randn(3, 4)
    target = base.to(TPU)
    on_device = sparse.to(TPU)
    out = torch.empty(3, 4, device=TPU)
    assert host_warnings(lambda: target.add_(on_device, alpha=-0.5)) == []
    assert host_warnings(lambda: torch.add(base.to(TPU), on_device, alpha=2, out=out)) == []
    assert host_warnings(lambda: on_device.to_dense()) == []
    torch.testing.assert_close(target.cpu(), base.add(sparse, alpha=-0.5))
    torch.testing.assert_close(out.cpu(), torch.add(base, sparse, alpha=2))
    with pytest.raises(RuntimeError, match="op2-sparse addition does not currently support"):
        torch.zeros(4, 3, device=TPU).add_(on_device)
    # Other sparse ops take the host path, saying so (once per op and process).
    negated: list[torch.Tensor] = []
    said = host_warnings(lambda: negated.append(torch.neg(on_device)))
    assert any("'aten::neg'" in w for w in said), said
    assert torch.equal(negated[0].to_dense().cpu(), torch.neg(sparse).to_dense())


def test_sparse_embedding_trains_with_sgd_as_on_cpu() -> None:
    torch.manual_seed(0)
    reference = torch.nn.Embedding(20, 8, sparse=True)
    model = torch.nn.Embedding(20, 8, sparse=True).to(TPU)
    model.load_state_dict(reference.state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (reference, model)]
    for step in range(3):
        ids = torch.randint(0, 20, (16,), generator=torch.Generator().manual_seed(step))
        for m, optimizer, device in zip((reference, model), optimizers, ("cpu", TPU), strict=True):
            optimizer.zero_grad()

            x = ids.to(device)

            def train(
                m: torch.nn.Module = m, o: torch.optim.Optimizer = optimizer, x: torch.Tensor = x
            ) -> None:
                m(x).pow(2).sum().backward()
                o.step()

            assert host_warnings(train) == [] or device == "cpu"
        assert model.weight.grad is not None and model.weight.grad.layout == torch.sparse_coo
    torch.testing.assert_close(model.weight.detach().cpu(), reference.weight.detach())


def test_complex_views_of_a_sparse_tensor_share_its_values() -> None:
    indices = torch.tensor([[0, 2], [0, 1]])
    values = torch.tensor([2 + 3j, 4 - 5j], dtype=torch.complex64)
    reference = torch.sparse_coo_tensor(indices, values, (3, 3))
    on_device = torch.sparse_coo_tensor(indices.to(TPU), values.to(TPU), (3, 3))
    real = torch.view_as_real(on_device)
    assert real._is_view() and real._base is on_device
    assert real._values().data_ptr() == on_device._values().data_ptr()
    assert torch.equal(real.to_dense().cpu(), torch.view_as_real(reference).to_dense())
    back = torch.view_as_complex(real)
    assert back.dtype == torch.complex64 and back._is_view()
    assert torch.equal(back.to_dense().cpu(), reference.to_dense())


def test_compressed_tensors_are_built_checked_and_taken_apart_as_on_cpu() -> None:
    parts = ((0, 1, 3), (1, 0, 1), (1.0, 2.0, 3.0))
    reference = torch.sparse_csr_tensor(*parts, size=(2, 2))
    with torch.sparse.check_sparse_tensor_invariants():
        on_device = torch.sparse_csr_tensor(*parts, size=(2, 2), device=TPU)
        # Invariants are CPU's own checks, with CPU's message.
        with pytest.raises(RuntimeError, match=r"crow_indices\[\.\.\., -1\] == nnz"):
            torch.sparse_csr_tensor((0, 1, 4), (1, 0, 1), (1.0, 2.0, 3.0), size=(2, 2), device=TPU)
    assert on_device.layout == torch.sparse_csr and on_device.device.type == "tpu"
    for part in ("crow_indices", "col_indices", "values"):
        got = getattr(on_device, part)()
        assert got.device.type == "tpu" and torch.equal(got.cpu(), getattr(reference, part)())
    assert on_device._nnz() == 3 and on_device.sparse_dim() == 2 and on_device.dense_dim() == 0
    assert torch.equal(on_device.to_dense().cpu(), reference.to_dense())
    assert torch.equal(on_device.clone().cpu().to_dense(), reference.to_dense())
    # Across devices both ways, and a column-compressed tensor moved to the device.
    moved = reference.to_sparse_csc().to(TPU)
    assert moved.layout == torch.sparse_csc
    assert torch.equal(moved.ccol_indices().cpu(), reference.to_sparse_csc().ccol_indices())
    assert torch.equal(moved.to_dense().cpu(), reference.to_dense())
    # Ops without a device kernel run on the host with CPU's result.
    vector = torch.tensor([1.0, -2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        product = torch.mv(on_device, vector.to(TPU))
    assert torch.equal(product.cpu(), torch.mv(reference, vector))
