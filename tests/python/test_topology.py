"""topology_aware_mesh's ordering, with device attributes injected for TPU layouts we cannot
run here: a 4x4 torus (one slice) and a pair of 2x2x1 slices joined by the data-centre
network. Ranks are given in a shuffled order so that rank order alone cannot pass."""

from __future__ import annotations

import random

import pytest

from torch_tpu.distributed._topology import order_ranks


def torus_attributes(nx: int, ny: int, slices: int = 1, seed: int = 0) -> list[dict]:
    devices = [
        {"coords": [x, y, 0], "core_on_chip": [0], "slice_index": [s]}
        for s in range(slices)
        for y in range(ny)
        for x in range(nx)
    ]
    random.Random(seed).shuffle(devices)
    return devices


def position(attrs: dict) -> tuple[int, int, int]:
    return (attrs["slice_index"][0], attrs["coords"][0], attrs["coords"][1])


def torus_distance(a: dict, b: dict, nx: int, ny: int) -> int:
    dx = abs(a["coords"][0] - b["coords"][0])
    dy = abs(a["coords"][1] - b["coords"][1])
    return min(dx, nx - dx) + min(dy, ny - dy)


def test_4x4_torus_as_4x4_mesh_maps_axes_onto_the_torus() -> None:
    attrs = torus_attributes(4, 4)
    order = order_ranks(attrs, [4, 4])
    for i in range(4):
        for j in range(4):
            x, y = attrs[order[i * 4 + j]]["coords"][:2]
            assert (x, y) == (j, i)


def test_4x4_torus_as_a_ring_steps_between_neighbours() -> None:
    attrs = torus_attributes(4, 4, seed=3)
    order = order_ranks(attrs, [16])
    assert sorted(order) == list(range(16))
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        assert torus_distance(attrs[a], attrs[b], 4, 4) == 1


def test_slice_pair_hybrid_mesh_replicates_across_slices() -> None:
    # mesh (2, 4): the first dimension spans the two slices (DCN), the second shards within one.
    attrs = torus_attributes(2, 2, slices=2, seed=5)
    order = order_ranks(attrs, [2, 4], dcn_mesh_shape=[2, 1])
    rows = [order[0:4], order[4:8]]
    for s, row in enumerate(rows):
        assert {attrs[r]["slice_index"][0] for r in row} == {s}
        for a, b in zip(row, row[1:] + row[:1], strict=True):
            assert torus_distance(attrs[a], attrs[b], 2, 2) == 1
    # Same position within each slice, so a dcn-dimension group pairs matching chips.
    for a, b in zip(rows[0], rows[1], strict=True):
        assert attrs[a]["coords"] == attrs[b]["coords"]


def test_slice_pair_as_2x2x2_mesh() -> None:
    attrs = torus_attributes(2, 2, slices=2, seed=7)
    order = order_ranks(attrs, [2, 2, 2], dcn_mesh_shape=[2, 1, 1])
    for s in range(2):
        for i in range(2):
            for j in range(2):
                got = position(attrs[order[s * 4 + i * 2 + j]])
                assert got == (s, j, i)


def test_without_coordinates_it_is_rank_order() -> None:
    attrs = [{"process_index": [r], "id": [0]} for r in range(4)]
    assert order_ranks(attrs, [2, 2]) == [0, 1, 2, 3]
    assert order_ranks(attrs, [4], dcn_mesh_shape=[2]) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("mesh", "dcn", "message"),
    [
        ([3, 2], None, "holds 6 devices"),
        ([2, 4], [3, 1], "dividing"),
        ([8], [4], "asks for 4 slices"),
    ],
)
def test_bad_shapes_are_clear_errors(mesh: list[int], dcn: list[int] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        order_ranks(torus_attributes(2, 2, slices=2), mesh, dcn_mesh_shape=dcn)


def test_duplicate_coordinates_are_an_error() -> None:
    attrs = [{"coords": [0, 0, 0], "slice_index": [0]}] * 2
    with pytest.raises(ValueError, match="same device coordinates"):
        order_ranks(attrs, [2])
