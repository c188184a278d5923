"""The sweep's rule for selections among ties: positions that read back the same values count
as right, positions that read other values or break a stable sort do not."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from torch_tpu.testing.op_sweep import ties_explain

X = torch.tensor([[2.0, 1.0, 2.0, 0.0]])


def sample(*args: object, **kwargs: object) -> SimpleNamespace:
    return SimpleNamespace(input=X, args=args, kwargs=kwargs)


def test_positions_of_tied_values_are_explained() -> None:
    sort = SimpleNamespace(name="sort")
    want = torch.sort(X, dim=1, descending=True)
    swapped = want.indices.clone()
    swapped[0, :2] = swapped[0, :2].flip(0)  # the two 2.0s in the other order
    got = (want.values, swapped)
    assert ties_explain(sort, sample(1, True), got, tuple(want), 0.0, 0.0)
    argsort = SimpleNamespace(name="argsort")
    assert ties_explain(argsort, sample(dim=1, descending=True), swapped, want.indices, 0, 0)


def test_wrong_positions_or_values_are_not_explained() -> None:
    sort = SimpleNamespace(name="sort")
    want = torch.sort(X, dim=1)
    wrong = want.indices.clone()
    wrong[0, 0], wrong[0, 1] = wrong[0, 1], wrong[0, 0]  # 0.0 and 1.0: not a tie
    assert not ties_explain(sort, sample(1), (want.values, wrong), tuple(want), 0.0, 0.0)
    assert not ties_explain(sort, sample(1), (want.values + 1, want.indices), tuple(want), 0, 0)
    # A stable sort promises CPU's order among ties.
    swapped = want.indices.clone()
    swapped[0, 2:] = swapped[0, 2:].flip(0)
    stable = sample(dim=1, stable=True)
    assert not ties_explain(sort, stable, (want.values, swapped), tuple(want), 0.0, 0.0)
    # Only the selection ops get this rule.
    add = SimpleNamespace(name="add")
    assert not ties_explain(add, sample(1), (want.values, swapped), tuple(want), 0.0, 0.0)


def test_mode_without_keepdim_reads_back_along_its_dim() -> None:
    mode = SimpleNamespace(name="mode")
    want = torch.mode(X, 1)
    assert want.values.item() == 2.0
    other = 2 - want.indices  # the other 2.0 (positions 0 and 2)
    assert ties_explain(mode, sample(1), (want.values, other), tuple(want), 0.0, 0.0)
    assert not ties_explain(mode, sample(1), (want.values, torch.tensor([1])), tuple(want), 0, 0)
