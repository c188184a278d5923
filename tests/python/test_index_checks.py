"""Out-of-range indices on tpu: in every eager mode and under torch.compile, an index outside
its dimension (or a class target outside [0, classes)) raises, at the next sync point, the
exception CPU raises for the same call (IndexError, or RuntimeError for gather, scatter,
embedding_bag and the margin losses), naming the op; clamped data is never handed back. In-range
indices (negative ones, ignore_index) raise nothing and match CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from conftest import TPU

import torch_tpu

Case = Callable[[torch.device], torch.Tensor]


def arange(device: torch.device) -> torch.Tensor:
    return torch.arange(10.0, device=device)


def zeros(device: torch.device) -> torch.Tensor:
    return torch.zeros(5, device=device)


def ints(values: list, device: torch.device) -> torch.Tensor:
    return torch.tensor(values, device=device)


def ones(device: torch.device) -> torch.Tensor:
    return torch.ones(1, device=device)


# name -> (the op's name in the message, a call with an index out of range)
OUT_OF_RANGE: dict[str, tuple[str, Case]] = {
    "index": ("aten::index", lambda d: arange(d)[ints([0, 15, -20, 3], d)]),
    "index_2d": (
        "aten::index",
        lambda d: arange(d).reshape(2, 5)[ints([0, 1], d), ints([1, 5], d)],
    ),
    "gather": ("aten::gather", lambda d: torch.gather(arange(d), 0, ints([11], d))),
    "take": ("aten::take", lambda d: torch.take(arange(d), ints([11], d))),
    "index_select": ("aten::index_select", lambda d: arange(d).index_select(0, ints([-11], d))),
    "embedding": (
        "aten::index_select",
        lambda d: F.embedding(ints([3], d), torch.ones(3, 2, device=d)),
    ),
    "cross_entropy": (
        "aten::nll_loss",
        lambda d: F.cross_entropy(torch.ones(2, 3, device=d), ints([0, 3], d)),
    ),
    "nll_loss2d": (
        "aten::nll_loss2d",
        lambda d: F.nll_loss(torch.ones(1, 3, 2, 2, device=d), ints([[[0, 3], [1, 1]]], d)),
    ),
    "index_put": (
        "aten::_index_put_impl_",
        lambda d: zeros(d).index_put_((ints([7], d),), ones(d)),
    ),
    "scatter_add": ("aten::scatter_add", lambda d: zeros(d).scatter_add_(0, ints([5], d), ones(d))),
    "scatter": ("aten::scatter", lambda d: zeros(d).scatter_(0, ints([-6], d), ones(d))),
    "index_add": ("aten::index_add", lambda d: zeros(d).index_add_(0, ints([5], d), ones(d))),
    "index_copy": ("aten::index_copy", lambda d: zeros(d).index_copy_(0, ints([5], d), ones(d))),
    "index_fill": ("aten::index_fill", lambda d: zeros(d).index_fill_(0, ints([5], d), 1.0)),
    "put": ("aten::put", lambda d: zeros(d).put_(ints([5], d), ones(d))),
    "embedding_bag": (
        "aten::_embedding_bag",
        lambda d: F.embedding_bag(ints([1, 4], d), torch.ones(3, 2, device=d), ints([0], d)),
    ),
    "multi_margin_loss": (
        "aten::multi_margin_loss",
        lambda d: F.multi_margin_loss(torch.ones(2, 3, device=d), ints([0, 3], d)),
    ),
    "multilabel_margin_loss": (
        "aten::multilabel_margin_loss",
        lambda d: F.multilabel_margin_loss(
            torch.ones(2, 3, device=d), ints([[0, 3, -1], [1, -1, 0]], d)
        ),
    ),
}

IN_RANGE: dict[str, Case] = {
    "index_negative": lambda d: arange(d)[ints([-10, 9, 0], d)],
    "gather_edges": lambda d: torch.gather(arange(d), 0, ints([0, 9], d)),
    "cross_entropy_ignore_index": lambda d: F.cross_entropy(
        torch.arange(6.0, device=d).reshape(2, 3), ints([2, -100], d)
    ),
    "embedding_bag": lambda d: F.embedding_bag(
        ints([0, 2], d), torch.arange(6.0, device=d).reshape(3, 2), ints([0], d)
    ),
}

MODES = ("strict", "defer_and_fuse", "debug")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = torch_tpu.get_eager_mode()
    torch_tpu.set_eager_mode(request.param)
    yield request.param
    torch_tpu.set_eager_mode(previous)


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_out_of_range_raises_index_error(case: str, mode: str) -> None:
    op, call = OUT_OF_RANGE[case]
    with pytest.raises((IndexError, RuntimeError)) as on_cpu:
        call(torch.device("cpu"))  # CPU refuses the same call
    # The same class as CPU's, at the call (Debug: CPU's own message where it checks on the
    # host) or at this read.
    with pytest.raises(on_cpu.type, match=op.removeprefix("aten::")):
        call(TPU).cpu()
    # Reported once; the device goes on working.
    torch.testing.assert_close(arange(TPU)[ints([1, -1], TPU)].cpu(), torch.tensor([1.0, 9.0]))


@pytest.mark.parametrize("case", sorted(IN_RANGE))
def test_in_range_matches_cpu(case: str, mode: str) -> None:
    call = IN_RANGE[case]
    torch.testing.assert_close(call(TPU).cpu(), call(torch.device("cpu")))


def test_reported_at_synchronize_and_at_any_later_read() -> None:
    bad = torch.index_select(arange(TPU), 0, ints([12], TPU))
    with pytest.raises(IndexError, match="aten::index_select"):
        torch.tpu.synchronize()
    del bad
    torch.take(arange(TPU), ints([-11], TPU))
    unrelated = arange(TPU) * 2  # the read of another tensor is the sync point
    with pytest.raises(IndexError, match="aten::take"):
        unrelated.cpu()
    torch.testing.assert_close(unrelated.cpu(), torch.arange(10.0) * 2)


def test_fused_graph_names_the_failing_op() -> None:
    torch_tpu.set_eager_mode("defer_and_fuse")
    try:
        x = arange(TPU)
        good = x.index_select(0, ints([1, 2], TPU)) * 3
        bad = torch.take(x, ints([10], TPU)) + 1
        also_good = torch.gather(x, 0, ints([4], TPU))
        with pytest.raises(IndexError, match="aten::take"):
            (good.sum() + bad.sum() + also_good.sum()).item()
    finally:
        torch_tpu.set_eager_mode("strict")


def test_compiled_graph_raises() -> None:
    def lookup(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, table).sum(1)

    compiled = torch.compile(lookup, backend="tpu")
    table = torch.arange(12.0).reshape(6, 2)
    ids = torch.tensor([[0, 5], [2, 3]])
    torch.testing.assert_close(compiled(table.to(TPU), ids.to(TPU)).cpu(), lookup(table, ids))
    with pytest.raises(IndexError):
        compiled(table.to(TPU), torch.tensor([[0, 6], [2, 3]]).to(TPU)).cpu()


# Values CPU checks before computing, checked on the device: RuntimeError, as on CPU.
BAD_VALUES: dict[str, tuple[str, Case]] = {
    "multinomial_negative": (
        "aten::multinomial",
        lambda d: torch.multinomial(torch.tensor([0.5, -0.1, 0.6], device=d), 1),
    ),
    "multinomial_nan": (
        "aten::multinomial",
        lambda d: torch.multinomial(torch.tensor([0.5, float("nan")], device=d), 1),
    ),
    "multinomial_zero_sum": (
        "aten::multinomial",
        lambda d: torch.multinomial(torch.zeros(2, 3, device=d), 1),
    ),
    "lu_unpack_pivots": (
        "aten::lu_unpack",
        lambda d: torch.lu_unpack(torch.eye(2, device=d), ints([3, 2], d).int())[0],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_values_raise_runtime_error(case: str, mode: str) -> None:
    op, call = BAD_VALUES[case]
    with pytest.raises(RuntimeError):
        call(torch.device("cpu"))
    with pytest.raises(RuntimeError, match=op):
        call(TPU).cpu()
    assert torch.multinomial(torch.tensor([0.0, 1.0], device=TPU), 1).item() == 1


def test_embedding_backward_checks_its_indices() -> None:
    grad = torch.ones(2, 3, device=TPU)
    with pytest.raises(IndexError, match="aten::embedding_dense_backward"):
        torch.ops.aten.embedding_dense_backward(grad, ints([0, 4], TPU), 4, -1, False).cpu()


def test_assert_async_raises_its_message_at_the_next_sync(mode: str) -> None:
    """Debug mode raises at the call, as CPU does; the others at the next sync point."""
    x = torch.arange(3.0)
    with pytest.raises(RuntimeError, match="must exceed 5"):
        torch._assert_async(x.max() > 5, "must exceed 5")
    torch._assert_async(x.to(TPU).max() < 5, "holds")
    torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="_assert_async.msg.*must exceed 5"):
        torch._assert_async(x.to(TPU).max() > 5, "must exceed 5")
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="a zero where a single nonzero value was expected"):
        torch._assert_async(torch.zeros((), device=TPU))
        (x.to(TPU) + 1).cpu()
    torch.testing.assert_close((x.to(TPU) + 1).cpu(), x + 1)
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        torch._assert_async(torch.ones(2, device=TPU))


def test_every_read_of_a_result_whose_check_failed_raises(mode: str) -> None:
    """Not only the first: a second .cpu(), an .item() of a view, a read through a compacting
    copy. Other tensors read as usual, and a write makes the tensor readable again. (Debug
    refuses the call itself with CPU's message, so no such tensor is made there.)"""
    if mode == "debug":
        with pytest.raises(IndexError, match="index_select"):
            torch.index_select(arange(TPU), 0, ints([3, 12], TPU))
        return
    bad = torch.index_select(arange(TPU), 0, ints([3, 12], TPU))
    for read in (bad.cpu, bad.cpu, lambda: bad[1].item(), lambda: bad[::2].cpu()):
        with pytest.raises(IndexError, match="aten::index_select"):
            read()
    torch.testing.assert_close((arange(TPU) * 2).cpu(), torch.arange(10.0) * 2)
    bad.fill_(1.0)
    torch.testing.assert_close(bad.cpu(), torch.ones(2))


def test_every_read_of_an_out_tensor_whose_check_failed_raises(mode: str) -> None:
    """A check made only on the device (lu_solve's pivots): Debug raises at the call, the
    others at the first read; in every mode the out= tensor written with undefined values raises
    at each read after, until it is written again."""
    lu, _ = torch.linalg.lu_factor(torch.eye(3) * 2)
    bad_pivots = torch.tensor([7, 9, 3], dtype=torch.int32, device=TPU)
    out = torch.zeros(3, 1, device=TPU)
    try:
        torch.linalg.lu_solve(lu.to(TPU), bad_pivots, torch.ones(3, 1, device=TPU), out=out)
    except RuntimeError:
        assert mode == "debug", "only Debug raises at the call"
    for read in (out.cpu, out.cpu, lambda: out[1].item()):
        with pytest.raises(RuntimeError, match="linalg_lu_solve.*pivots out of range"):
            read()
    torch.tpu.synchronize()  # reported already: nothing left to raise
    out.zero_()
    torch.testing.assert_close(out.cpu(), torch.zeros(3, 1))


def test_reading_a_tensor_without_elements_is_a_sync_point(mode: str) -> None:
    if mode == "debug":  # the call raises itself: nothing is left for a later read
        with pytest.raises(IndexError, match="index_select"):
            torch.index_select(arange(TPU), 0, ints([12], TPU))
        assert torch.zeros(0, 3, device=TPU).cpu().shape == (0, 3)
        return
    torch.index_select(arange(TPU), 0, ints([12], TPU))
    empty = torch.zeros(0, 3, device=TPU)
    if mode == "defer_and_fuse":
        # The failing op waits in the pending graph, which a read of a tensor outside it does
        # not run, with elements or without: the sync point that runs it reports the failure.
        assert empty.cpu().shape == (0, 3)
        torch.testing.assert_close(torch.ones(2).to(TPU).cpu(), torch.ones(2))
        with pytest.raises(IndexError, match="aten::index_select"):
            torch.tpu.synchronize()
    else:
        with pytest.raises(IndexError, match="aten::index_select"):
            empty.cpu()  # reads nothing, but reports the failure here, not at a later read
        assert empty.cpu().shape == (0, 3)  # reported once; that tensor itself is fine
    torch.testing.assert_close(arange(TPU).cpu(), torch.arange(10.0))
    # An op whose result is empty, given an index out of range: every read of it raises.
    no_columns = torch.zeros(10, 0, device=TPU).index_select(0, ints([12], TPU))
    for read in (no_columns.tolist, no_columns.cpu):
        with pytest.raises(IndexError, match="aten::index_select"):
            read()
