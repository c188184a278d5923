"""FBGEMM's jagged-tensor ops (``torch.ops.fbgemm.*``) on ``tpu``, for TorchRec.

TorchRec's ``KeyedJaggedTensor`` and its embedding modules call a handful of fbgemm_gpu ops to
turn lengths into offsets, permute features and reduce segments. fbgemm_gpu ships CPU and CUDA
kernels only; here each op the unsharded and sharded modules reach is written with ordinary
ATen ops on the device (cumsum, searchsorted, gather, index_add, ...), each of them a StableHLO
lowering of ``csrc/aten``, so a lookup runs on the device end to end: no host fallback.

The shape of a jagged result is the sum of its lengths. Where TorchRec passes that sum (as
``KeyedJaggedTensor.permute`` does) nothing waits for the device; where it does not, the sum is
read once (a host sync), as fbgemm's CUDA kernels read it too. The segment every output
position belongs to is found on the device by a binary search over the output offsets, so the
executables depend on the lengths' count and the values' length only, not on the ids: a
batch whose lengths were met before compiles nothing new; a new length compiles these ops
once more (they do not run at size buckets yet, docs/guide/recommendation.md).

Registered when ``fbgemm_gpu`` is imported (TorchRec imports it), for the PrivateUse1 key (the
table-batched embedding ops, in :mod:`torch_tpu.integrations.fbgemm_tbe`, with them).
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor

_library: torch.library.Library | None = None


def _complete_cumsum(t: Tensor) -> Tensor:
    """[0, t0, t0+t1, ...]: n+1 offsets from n lengths, along the last dim, in t's dtype."""
    if t.dim() not in (1, 2):
        raise ValueError(
            f"asynchronous_complete_cumsum expects a 1-d or 2-d tensor, got {t.dim()}-d"
        )
    zero = torch.zeros(*t.shape[:-1], 1, dtype=t.dtype, device=t.device)
    return torch.cat([zero, torch.cumsum(t, dim=-1).to(t.dtype)], dim=-1)


def _inclusive_cumsum(t: Tensor) -> Tensor:
    return torch.cumsum(t, dim=0).to(t.dtype)


def _exclusive_cumsum(t: Tensor) -> Tensor:
    return (torch.cumsum(t, dim=0) - t).to(t.dtype)


def _positions(total: int, device: torch.device) -> Tensor:
    """0..total-1 (int64) as a jagged batch's positions: counted up from ones rather than by
    arange, so that a batch's new length runs at its size bucket (docs/design/buckets.md) as
    the ops reading the positions then do."""
    return torch.ones(total, device=device, dtype=torch.long).cumsum(0) - 1


def _segment_of_positions(ends: Tensor, positions: Tensor) -> Tensor:
    """For every position, the index of the segment holding it, given each segment's
    (inclusive-cumsum) end. Empty segments share their end with the one before and are skipped
    by the right-sided search."""
    return torch.searchsorted(ends.to(torch.long), positions, right=True)


def _total(lengths: Tensor, given: int | None) -> int:
    """A jagged result's length: given by the caller, or read from the device (one sync)."""
    if given is not None:
        return int(given)
    return int(lengths.sum().item())


def _permute_sparse(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    weights: Tensor | None,
    permuted_lengths_sum: int | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Rows of a [T, B] jagged batch reordered (or repeated) as ``permute`` says."""
    rows, batch = lengths.shape
    if permute.dim() != 1:
        raise ValueError(f"permute must be 1-d, got shape {tuple(permute.shape)}")
    if values.dim() < 1:
        raise ValueError("values must have at least one dimension")
    if weights is not None and weights.shape[0] != values.shape[0]:
        raise ValueError(
            f"weights ({weights.shape[0]}) and values ({values.shape[0]}) differ in length"
        )
    permute = permute.to(torch.long)
    lengths64 = lengths.to(torch.long)
    permuted_lengths = lengths.index_select(0, permute)
    flat = permuted_lengths.to(torch.long).reshape(-1)
    total = _total(flat, permuted_lengths_sum)
    if total == 0:
        empty_w = None if weights is None else weights[:0]
        return permuted_lengths, values[:0], empty_w
    in_starts = (torch.cumsum(lengths64.reshape(-1), 0) - lengths64.reshape(-1)).view(rows, batch)
    src_starts = in_starts.index_select(0, permute).reshape(-1)
    out_ends = torch.cumsum(flat, 0)
    out_starts = out_ends - flat
    positions = _positions(total, values.device)
    segment = _segment_of_positions(out_ends, positions)
    source = src_starts.index_select(0, segment) + positions - out_starts.index_select(0, segment)
    permuted_values = values.index_select(0, source)
    permuted_weights = None if weights is None else weights.index_select(0, source)
    return permuted_lengths, permuted_values, permuted_weights


def _permute_2d(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    weights: Tensor | None = None,
    permuted_lengths_sum: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    if lengths.dim() != 2:
        raise ValueError(f"permute_2D_sparse_data expects 2-d lengths, got {lengths.dim()}-d")
    return _permute_sparse(permute, lengths, values, weights, permuted_lengths_sum)


def _permute_1d(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    weights: Tensor | None = None,
    permuted_lengths_sum: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    if lengths.dim() != 1:
        raise ValueError(f"permute_1D_sparse_data expects 1-d lengths, got {lengths.dim()}-d")
    permuted_lengths, permuted_values, permuted_weights = _permute_sparse(
        permute, lengths.view(-1, 1), values, weights, permuted_lengths_sum
    )
    return permuted_lengths.view(-1), permuted_values, permuted_weights


def _segment_sum_csr(batch_size: int, csr_seg: Tensor, values: Tensor) -> Tensor:
    """Sums of values[csr_seg[i] * batch_size : csr_seg[i + 1] * batch_size] for each i."""
    if csr_seg.dim() != 1 or csr_seg.numel() < 1:
        raise ValueError("segment_sum_csr expects 1-d csr_seg with at least one offset")
    segments = csr_seg.numel() - 1
    ends = csr_seg[1:].to(torch.long) * batch_size
    segment = _segment_of_positions(ends, _positions(values.shape[0], values.device))
    # Positions past the last end land in a spill slot that is cut off.
    out = torch.zeros(segments + 1, *values.shape[1:], dtype=values.dtype, device=values.device)
    return out.index_add(0, segment, values).narrow(0, 0, segments)


def _offsets_range(offsets: Tensor, range_size: int) -> Tensor:
    """For each position 0..range_size-1, its distance from the start of its segment."""
    ends = torch.cat([offsets[1:], offsets.new_full((1,), range_size)]).to(torch.long)
    positions = _positions(range_size, offsets.device)
    segment = _segment_of_positions(ends, positions)
    starts = offsets.to(torch.long).index_select(0, segment.clamp(max=offsets.numel() - 1))
    return (positions - starts).to(offsets.dtype)


def _invert_permute(permute: Tensor) -> Tensor:
    positions = torch.arange(permute.numel(), device=permute.device, dtype=permute.dtype)
    return torch.empty_like(permute).scatter(0, permute.to(torch.long), positions)


def _jagged_to_padded_dense(
    values: Tensor, offsets: list[Tensor], max_lengths: list[int], padding_value: float = 0.0
) -> Tensor:
    """One jagged dim: row b of the result holds values[offsets[b]:offsets[b+1]] padded."""
    if len(offsets) != 1 or len(max_lengths) != 1:
        raise NotImplementedError(
            "jagged_to_padded_dense on tpu supports one jagged dimension, "
            f"got {len(offsets)} offsets"
        )
    offset = offsets[0].to(torch.long)
    max_length = int(max_lengths[0])
    starts = offset[:-1]
    lengths = offset[1:] - starts
    steps = torch.arange(max_length, device=values.device, dtype=torch.long)
    index = starts[:, None] + steps[None, :]
    inside = steps[None, :] < lengths[:, None]
    last = max(values.shape[0] - 1, 0)
    gathered = values.index_select(0, index.clamp(0, last).reshape(-1))
    gathered = gathered.view(*index.shape, *values.shape[1:])
    mask = inside.view(*inside.shape, *([1] * (values.dim() - 1)))
    pad = torch.full((), padding_value, dtype=values.dtype, device=values.device)
    return torch.where(mask, gathered, pad)


def _jagged_2d_to_dense(values: Tensor, offsets: Tensor, max_sequence_length: int) -> Tensor:
    return _jagged_to_padded_dense(values, [offsets], [max_sequence_length], 0.0)


def _permute_pooled_embs(
    pooled_embs: Tensor,
    offset_dim_list: Tensor,
    permute_list: Tensor,
    inv_offset_dim_list: Tensor,
    inv_permute_list: Tensor,
) -> Tensor:
    """Column blocks of [B, sum(dims)] pooled embeddings reordered: output block i is input
    block permute_list[i]. One column gather found on the device, differentiable in the input
    (its backward is the scatter-add of index_select)."""
    if pooled_embs.dim() != 2:
        raise ValueError(f"permute_pooled_embs expects 2-d embeddings, got {pooled_embs.dim()}-d")
    starts = offset_dim_list.to(device=pooled_embs.device, dtype=torch.long)
    permute = permute_list.to(device=pooled_embs.device, dtype=torch.long)
    dims = (starts[1:] - starts[:-1]).index_select(0, permute)
    ends = torch.cumsum(dims, 0)
    total = pooled_embs.shape[1]
    columns = torch.arange(total, device=pooled_embs.device, dtype=torch.long)
    block = _segment_of_positions(ends, columns).clamp(max=permute.numel() - 1)
    source = (
        starts.index_select(0, permute.index_select(0, block))
        + columns
        - (ends - dims).index_select(0, block)
    )
    return pooled_embs.index_select(1, source)


def _block_bucketize(
    lengths: Tensor,
    indices: Tensor,
    bucketize_pos: bool,
    sequence: bool,
    block_sizes: Tensor,
    my_size: int,
    weights: Tensor | None = None,
    batch_size_per_feature: Tensor | None = None,
    max_B: int = -1,  # noqa: N803 - fbgemm's argument name
    block_bucketize_pos: list[Tensor] | None = None,
    keep_orig_idx: bool = False,
    total_num_blocks: Tensor | None = None,
    keep_orig_idx_per_feature: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """Row-wise sharding's split of a [T, B] jagged batch into `my_size` buckets (ranks): index
    i of feature t goes to bucket i // block_sizes[t] as row i % block_sizes[t] (past the
    blocks' end: bucket i % my_size, row i // my_size). The result is [my_size, T, B] bags, each
    holding its original bag's indices of that bucket in their order; with `sequence`, also
    where each index went, and with `bucketize_pos` each index's position in its bag."""
    if batch_size_per_feature is not None or block_bucketize_pos is not None:
        raise NotImplementedError(
            "block_bucketize_sparse_features on tpu: variable batch sizes and uneven row "
            "blocks are not supported"
        )
    if total_num_blocks is not None or keep_orig_idx_per_feature is not None:
        raise NotImplementedError(
            "block_bucketize_sparse_features on tpu: two-level bucketization is not supported"
        )
    features = block_sizes.numel()
    bags = lengths.numel()
    if features == 0 or bags % features != 0:
        raise ValueError(f"block_bucketize: {bags} lengths do not split into {features} features")
    batch = bags // features
    lengths64 = lengths.to(torch.long)
    ends = torch.cumsum(lengths64, 0)
    positions = _positions(indices.numel(), indices.device)
    bag = _segment_of_positions(ends, positions)
    size = block_sizes.to(torch.long).index_select(0, bag // batch)
    index = indices.to(torch.long)
    in_blocks = index < size * my_size
    bucket = torch.where(in_blocks, index // size, index % my_size)
    row = index if keep_orig_idx else torch.where(in_blocks, index % size, index // my_size)
    # The new bag of each index, and its place: new bags in order, each keeping its indices'.
    key = bucket * bags + bag
    order = torch.sort(key, stable=True).indices
    new_lengths = torch.zeros(my_size * bags, dtype=torch.long, device=lengths.device)
    new_lengths = new_lengths.index_add(0, key, torch.ones_like(key)).to(lengths.dtype)
    new_indices = row.to(indices.dtype).index_select(0, order)
    new_weights = None if weights is None else weights.index_select(0, order)
    new_pos = None
    if bucketize_pos:
        within = positions - (ends - lengths64).index_select(0, bag)
        new_pos = within.to(indices.dtype).index_select(0, order)
    unbucketize = None
    if sequence:
        unbucketize = torch.empty_like(order).scatter_(0, order, positions).to(indices.dtype)
    return new_lengths, new_indices, new_weights, new_pos, unbucketize


def _get_infos_metadata(unused: Tensor, batch: int, tables: int) -> tuple[int, int]:
    """How TBE packs (batch, table) into one int: a function of two integers, so the CPU
    kernel computes it (the tensor is a dispatch anchor only)."""
    return torch.ops.fbgemm.get_infos_metadata(torch.empty(0), batch, tables)


_KERNELS = {
    "get_infos_metadata": _get_infos_metadata,
    "asynchronous_complete_cumsum": _complete_cumsum,
    "asynchronous_inclusive_cumsum": _inclusive_cumsum,
    "asynchronous_exclusive_cumsum": _exclusive_cumsum,
    "permute_2D_sparse_data": _permute_2d,
    "permute_1D_sparse_data": _permute_1d,
    "segment_sum_csr": _segment_sum_csr,
    "offsets_range": _offsets_range,
    "invert_permute": _invert_permute,
    "jagged_to_padded_dense_forward": _jagged_to_padded_dense,
    "jagged_2d_to_dense_forward": _jagged_2d_to_dense,
    "block_bucketize_sparse_features": _block_bucketize,
}


def register(_module: ModuleType | None = None) -> None:
    """Registers the tpu kernels of the fbgemm ops above (once)."""
    global _library
    if _library is not None:
        return
    from . import fbgemm_tbe

    library = torch.library.Library("fbgemm", "IMPL")
    for name, kernel in {**_KERNELS, **fbgemm_tbe.KERNELS}.items():
        library.impl(name, kernel, "PrivateUse1")
    differentiable = {
        name: _permute_pooled_embs
        for name in (
            "permute_pooled_embs",
            "permute_pooled_embs_split",
            "permute_pooled_embs_auto_grad",
            "permute_pooled_embs_auto_grad_split",
        )
    }
    for name, kernel in {**fbgemm_tbe.AUTOGRAD_KERNELS, **differentiable}.items():
        library.impl(name, kernel, "PrivateUse1")
        library.impl(name, kernel, "AutogradPrivateUse1")
    _library = library


def install() -> None:
    from . import after_import

    after_import("fbgemm_gpu", register)
