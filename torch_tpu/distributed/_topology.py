"""Placing mesh positions on the physical interconnect.

Each rank contributes its device's attributes (PJRT: ``coords``, ``core_on_chip``,
``slice_index``, ``process_index``). Devices of one slice are joined by the chip-to-chip
torus (ICI); slices are joined by the data-centre network (DCN). The mesh is laid out so
that neighbouring positions along each within-slice dimension are neighbouring chips and the
``dcn_mesh_shape`` part of each dimension steps across slices, as hybrid sharding needs:
shard within a slice, replicate across slices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Attributes = Mapping[str, Sequence[int]]


def _physical_key(attributes: Attributes) -> tuple[int, ...]:
    """(z, y, x, core) so that sorting walks x fastest, as the torus is numbered."""
    coords = list(attributes.get("coords", ()))
    coords += [0] * (3 - len(coords))
    core = list(attributes.get("core_on_chip", (0,)))[0]
    return (coords[2], coords[1], coords[0], core)


def _extents(keys: Sequence[tuple[int, ...]]) -> list[int]:
    """Extent of each physical axis (z, y, x, core) over `keys`, axes of extent 1 dropped."""
    axes = zip(*keys, strict=True) if keys else ()
    return [e for e in (max(a) - min(a) + 1 for a in axes) if e > 1]


def _snake(keys: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Boustrophedon order over the sorted grid: every step moves to a neighbouring chip, so a
    1-D ring over the slice never jumps across it."""
    ordered = sorted(keys)
    rows: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for key in ordered:
        rows.setdefault(key[:-2], []).append(key)  # rows along x (with cores) per (z, y)
    out: list[tuple[int, ...]] = []
    for i, row_key in enumerate(sorted(rows)):
        row = rows[row_key]
        out.extend(reversed(row) if i % 2 else row)
    return out


def _order_slice(
    ranks: list[int], keys: list[tuple[int, ...]], ici_shape: Sequence[int]
) -> list[int]:
    """The ranks of one slice in mesh order for its within-slice mesh shape `ici_shape`."""
    by_key = dict(zip(keys, ranks, strict=True))
    if len(by_key) != len(keys):
        raise ValueError("topology_aware_mesh: two ranks report the same device coordinates")
    mesh_dims = [d for d in ici_shape if d > 1]
    if mesh_dims == _extents(keys):
        # The mesh has the torus's own shape: row-major over (z, y, x) maps each mesh
        # dimension onto one physical axis.
        return [by_key[k] for k in sorted(keys)]
    return [by_key[k] for k in _snake(keys)]


def order_ranks(
    attributes: Sequence[Attributes],
    mesh_shape: Sequence[int],
    dcn_mesh_shape: Sequence[int] | None = None,
) -> list[int]:
    """Ranks in row-major order of `mesh_shape` (the flattened mesh), given each rank's device
    attributes. Without coordinates (the CPU plugin) this is rank order."""
    world = len(attributes)
    if math.prod(mesh_shape) != world:
        raise ValueError(
            f"topology_aware_mesh: mesh_shape {tuple(mesh_shape)} holds "
            f"{math.prod(mesh_shape)} devices, but the group has {world} ranks"
        )
    dcn = list(dcn_mesh_shape) if dcn_mesh_shape is not None else [1] * len(mesh_shape)
    if len(dcn) != len(mesh_shape) or any(m % d for m, d in zip(mesh_shape, dcn, strict=True)):
        raise ValueError(
            f"topology_aware_mesh: dcn_mesh_shape {tuple(dcn)} must have one entry per mesh "
            f"dimension, each dividing it (mesh_shape {tuple(mesh_shape)})"
        )
    ici = [m // d for m, d in zip(mesh_shape, dcn, strict=True)]
    if not any("coords" in a or "slice_index" in a for a in attributes):
        # No placement known (the CPU plugin): rank order, each block of ranks a "slice".
        return list(range(world))
    slices: dict[int, list[int]] = {}
    for rank, attrs in enumerate(attributes):
        slices.setdefault(list(attrs.get("slice_index", (0,)))[0], []).append(rank)
    if len(slices) != math.prod(dcn):
        raise ValueError(
            f"topology_aware_mesh: dcn_mesh_shape {tuple(dcn)} asks for {math.prod(dcn)} "
            f"slices, the devices report {len(slices)}"
        )
    per_slice = [
        _order_slice(ranks, [_physical_key(attributes[r]) for r in ranks], ici)
        for _, ranks in sorted(slices.items())
    ]
    if any(len(s) != math.prod(ici) for s in per_slice):
        raise ValueError("topology_aware_mesh: slices hold different numbers of devices")

    # Position (dcn index, ici index) per dimension -> flat position in the hybrid mesh, where
    # dimension i's index is dcn_i * ici_i + its within-slice index.
    order = [0] * world
    for slice_number, slice_ranks in enumerate(per_slice):
        dcn_index = _unravel(slice_number, dcn)
        for within, rank in enumerate(slice_ranks):
            ici_index = _unravel(within, ici)
            index = [d * i_size + i for d, i, i_size in zip(dcn_index, ici_index, ici, strict=True)]
            order[_ravel(index, mesh_shape)] = rank
    return order


def _unravel(flat: int, shape: Sequence[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return index[::-1]


def _ravel(index: Sequence[int], shape: Sequence[int]) -> int:
    flat = 0
    for i, size in zip(index, shape, strict=True):
        flat = flat * size + i
    return flat
