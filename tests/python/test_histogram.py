"""torch.histogram and torch.histogramdd on tpu against CPU: bin counts over the data's range or a
given one, edge tensors, weights, density, the closed last bin, values outside the edges and
errors."""

from __future__ import annotations

import pytest
import torch
from conftest import TPU, assert_same


def data(*shape: int) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    return x.round(decimals=1)  # many values land exactly on edges


@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("range_", [None, (-1.0, 1.5)])
def test_histogram_with_a_bin_count(
    density: bool, weighted: bool, range_: tuple[float, float] | None
) -> None:
    x = data(7, 9)
    weight = torch.rand(7, 9) if weighted else None
    want = torch.histogram(x, 10, range=range_, weight=weight, density=density)
    got = torch.histogram(
        x.to(TPU),
        10,
        range=range_,
        weight=None if weight is None else weight.to(TPU),
        density=density,
    )
    assert got.hist.device.type == TPU.type and got.bin_edges.device.type == TPU.type
    assert_same(got.bin_edges, want.bin_edges)
    assert_same(got.hist, want.hist)


def test_histogram_with_edges_keeps_the_last_edge_and_drops_outsiders() -> None:
    x = torch.tensor([0.0, 0.5, 1.0, 2.0, 2.0, 7.0, 9.0, -1.0, float("nan"), 3.5])
    edges = torch.tensor([0.0, 1.0, 2.0, 7.0])
    want = torch.histogram(x, edges)
    got = torch.histogram(x.to(TPU), edges.to(TPU))
    assert_same(got.hist, want.hist)
    assert_same(got.bin_edges, want.bin_edges)
    assert got.hist.tolist() == [2.0, 1.0, 4.0]  # 7.0 is in the closed last bin


def test_histogram_of_constant_or_empty_input() -> None:
    for x in (torch.full((5,), 3.0), torch.empty(0)):
        want = torch.histogram(x, 4)
        got = torch.histogram(x.to(TPU), 4)
        assert_same(got.bin_edges, want.bin_edges)
        assert_same(got.hist, want.hist)


@pytest.mark.parametrize("density", [False, True])
def test_histogramdd_counts_and_edges(density: bool) -> None:
    x = data(50, 3)
    weight = torch.rand(50)
    want = torch.histogramdd(x, [3, 4, 2], weight=weight, density=density)
    got = torch.histogramdd(x.to(TPU), [3, 4, 2], weight=weight.to(TPU), density=density)
    assert_same(got.hist, want.hist)
    for g, w in zip(got.bin_edges, want.bin_edges, strict=True):
        assert_same(g, w)
    edges = [torch.tensor([-2.0, 0.0, 0.5, 3.0]), torch.tensor([-1.0, 1.0])]
    want_t = torch.histogramdd(x[:, :2], edges)
    got_t = torch.histogramdd(x[:, :2].to(TPU), [e.to(TPU) for e in edges])
    assert_same(got_t.hist, want_t.hist)


def test_histogram_errors_name_the_problem() -> None:
    x = data(10).to(TPU)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histogram(x, 0)
    with pytest.raises(RuntimeError, match="min should not exceed max"):
        torch.histogram(x, 3, range=(2.0, 1.0))
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histogram(x, 3, range=(0.0, float("inf")))
    with pytest.raises(RuntimeError, match="same shape"):
        torch.histogram(x, 3, weight=torch.ones(3, device=TPU))
