"""fbgemm's table-batched embedding (TBE) training lookup on ``tpu``: what TorchRec's sharded
embedding tables run (``BatchedFusedEmbeddingBag`` wraps fbgemm's
``SplitTableBatchedEmbeddingBagsCodegen``).

A TBE holds all tables of a group in one flat weight tensor; feature ``t`` reads rows of
``D_offsets[t + 1] - D_offsets[t]`` floats from ``weights_offsets[t]`` on, with indices local to
its table, and ``offsets`` bound the ``T * B`` bags, feature-major. The lookup pools each bag
(sum or mean, times per-sample weights) into column block ``t`` of a ``[B, total_D]`` output.
Its backward is *fused*: it applies the optimizer to the rows it touched and gives the weights
no gradient, which is why TorchRec's optimizer for these tables does nothing itself.

Here the lookup and the update are written with device ATen ops: each feature pools its bags
with ``embedding_bag`` over all positions and that feature's offsets (positions of other
features lie in none of its bags), and its row gradients come from embedding_bag's dense
backward, so no shape depends on the data, nothing reads the indices on the host, and a
batch's new count of indices runs at its size bucket (docs/design/buckets.md). Rows no bag
touched get a zero gradient, and the supported optimizers leave such rows unchanged, so the
dense update equals fbgemm's sparse one: plain SGD (``weights -= lr * grad``) and row-wise
Adagrad (``m += mean(grad**2)``, ``weights -= lr * grad / (sqrt(m) + eps)``), without weight
decay. The layout's few integers (offsets of tables, dims, row counts) are read from the
host once per TBE and kept.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

_POOL_SUM, _POOL_MEAN = 0, 1
_FP32 = 0  # fbgemm's SparseType.FP32 as output_dtype


@dataclass(frozen=True)
class _Layout:
    """Where each feature's table lies in the flat weights: element offset, dim, rows."""

    weight_offsets: tuple[int, ...]
    dims: tuple[int, ...]
    rows: tuple[int, ...]
    column_offsets: tuple[int, ...]


# Host copies of a TBE's small metadata buffers, read once: keyed by the buffers' identity and
# version, and checked through weak references so that a key reused by new buffers (after the
# old ones are freed) is not mistaken for them.
_host_lists: dict[tuple[int, int], tuple[weakref.ref[Tensor], list[int]]] = {}


def _host_list(t: Tensor) -> list[int]:
    key = (id(t), t._version)
    found = _host_lists.get(key)
    if found is not None and found[0]() is t:
        return found[1]
    values = [int(v) for v in t.cpu().tolist()]
    if len(_host_lists) > 256:  # drop the entries of buffers that are gone
        for stale in [k for k, (ref, _) in _host_lists.items() if ref() is None]:
            del _host_lists[stale]
    _host_lists[key] = (weakref.ref(t), values)
    return values


def _layout(weights_offsets: Tensor, d_offsets: Tensor, hash_size_cumsum: Tensor) -> _Layout:
    """The TBE's layout from its metadata buffers (host copies kept, see _host_list)."""
    offsets = _host_list(weights_offsets)
    columns = _host_list(d_offsets)
    cumsum = _host_list(hash_size_cumsum)
    # hash_size_cumsum has one entry per feature (features of one table repeat its start) and
    # the total last; a table's rows run to the next larger start.
    starts = sorted(set(cumsum))
    rows = []
    for start in cumsum[:-1]:
        following = [s for s in starts if s > start]
        rows.append((following[0] if following else start) - start)
    dims = [columns[t + 1] - columns[t] for t in range(len(columns) - 1)]
    return _Layout(tuple(offsets), tuple(dims), tuple(rows), tuple(columns))


def _flat_weights(weights: list[Tensor]) -> tuple[Tensor, Tensor]:
    """(flat weights, weights_offsets) from TBE's list: [host, placements, offsets] when the
    tables are placed on the "host" (how TorchRec places them for devices it does not know),
    [dev, uvm, placements, offsets, lxu_cache] when on the device."""
    if len(weights) == 3:
        return weights[0], weights[2]
    if len(weights) == 5:
        return weights[0], weights[3]
    raise ValueError(f"TBE weights: expected 3 or 5 tensors, got {len(weights)}")


@dataclass
class _Bags:
    """What each feature's pooling reads besides its table: the bags' offsets into the
    indices, and each position's weight (its per-sample weight, 1 without; 0 for a pruned
    index, -1)."""

    offsets: Tensor  # [T * B + 1], the indices' dtype
    weights: Tensor  # float32 [L]
    batch: int
    mean: bool


def _bags(
    indices: Tensor, offsets: Tensor, features: int, pooling_mode: int, weights: Tensor | None
) -> _Bags:
    bags = offsets.numel() - 1
    if features == 0 or bags % features != 0:
        raise ValueError(f"TBE offsets: {bags} bags do not split into {features} features")
    present = indices >= 0
    # where, not a dtype conversion: positionwise ops run at the indices' size bucket.
    weights = torch.where(present, 1.0 if weights is None else weights.to(torch.float32), 0.0)
    return _Bags(offsets.to(indices.dtype), weights, bags // features, pooling_mode == _POOL_MEAN)


@dataclass
class _Pooled:
    """Feature t's pooling, as its backward needs it."""

    rows: Tensor  # [L]: the feature's table rows (0 at other features' positions)
    offset2bag: Tensor
    bag_size: Tensor
    lengths: Tensor | None  # float32 [B]: the bags' lengths, for the mean


def _pool(table: Tensor, indices: Tensor, bags: _Bags, t: int) -> tuple[Tensor, _Pooled]:
    """Feature t's [B, D] pooled rows: embedding_bag over all positions with the feature's bags'
    offsets, so the positions of other features lie in none of its bags and nothing depends on
    the indices' values on the host (the indices are read at their size bucket on tpu)."""
    rows = table.shape[0]
    local = torch.where((indices >= 0) & (indices < rows), indices, 0)
    offsets = bags.offsets.narrow(0, t * bags.batch, bags.batch + 1)
    pooled, offset2bag, bag_size, _ = torch.ops.aten._embedding_bag(
        table, local, offsets, False, 0, False, bags.weights, True, -1
    )
    lengths = None
    if bags.mean:
        # fbgemm's mean divides by the bag's length, pruned indices included.
        lengths = (offsets[1:] - offsets[:-1]).clamp(min=1).to(torch.float32)
        pooled = pooled / lengths[:, None]
    return pooled, _Pooled(local, offset2bag, bag_size, lengths)


def _table(flat: Tensor, layout: _Layout, t: int) -> Tensor:
    rows, dim = layout.rows[t], layout.dims[t]
    return flat.narrow(0, layout.weight_offsets[t], rows * dim).view(rows, dim)


def _forward(
    flat: Tensor, layout: _Layout, indices: Tensor, bags: _Bags
) -> tuple[Tensor, list[_Pooled]]:
    blocks, pooled = [], []
    for t in range(len(layout.dims)):
        block, kept = _pool(_table(flat, layout, t).to(torch.float32), indices, bags, t)
        blocks.append(block)
        pooled.append(kept)
    return torch.cat(blocks, dim=1), pooled


def _row_gradients(
    grad_output: Tensor, layout: _Layout, bags: _Bags, pooled: list[_Pooled]
) -> list[Tensor]:
    """Each feature's [rows, D] weight gradient (zero on rows no bag read)."""
    grads = []
    for t, kept in enumerate(pooled):
        block = grad_output.narrow(1, layout.column_offsets[t], layout.dims[t])
        if kept.lengths is not None:
            block = block / kept.lengths[:, None]
        empty = torch.empty(0, dtype=torch.long, device=grad_output.device)
        grads.append(
            torch.ops.aten._embedding_bag_dense_backward(
                block,
                kept.rows,
                kept.offset2bag,
                kept.bag_size,
                empty,
                layout.rows[t],
                False,
                0,
                bags.weights,
                -1,
            )
        )
    return grads


_Update = Callable[[Tensor, int, Tensor, float], None]


def _write_table(flat: Tensor, layout: _Layout, t: int, value: Tensor) -> None:
    _table(flat, layout, t).copy_(value.to(flat.dtype))


class _Lookup(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        placeholder: Tensor,
        flat: Tensor,
        layout: _Layout,
        indices: Tensor,
        bags: _Bags,
        update: _Update,
        learning_rate: float,
    ) -> Tensor:
        output, pooled = _forward(flat, layout, indices, bags)
        ctx.saved = (flat, layout, bags, pooled, update, learning_rate)
        return output

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple[None, ...]:
        flat, layout, bags, pooled, update, learning_rate = ctx.saved
        with torch.no_grad():
            grads = _row_gradients(grad_output.to(torch.float32), layout, bags, pooled)
            # Features reading one table (TorchRec's shared tables) sum their gradients first:
            # the optimizer sees each row's whole gradient once, as fbgemm's does.
            summed: dict[int, Tensor] = {}
            first_feature: dict[int, int] = {}
            for t, grad in enumerate(grads):
                start = layout.weight_offsets[t]
                first_feature.setdefault(start, t)
                summed[start] = summed[start] + grad if start in summed else grad
            for start, grad in summed.items():
                update(flat, first_feature[start], grad, learning_rate)
        return (None,) * 7


def _check_supported(
    aux_tensor: list[Tensor | None], output_dtype: int, vbe_output: Tensor | None
) -> None:
    if aux_tensor and aux_tensor[0] is not None or vbe_output is not None:
        raise NotImplementedError(
            "TBE on tpu: variable batch sizes per feature (VBE) are not supported"
        )
    if output_dtype != _FP32:
        raise NotImplementedError(f"TBE on tpu: output dtype {output_dtype} (FP32 only)")


def _lookup(
    placeholder: Tensor,
    weights: list[Tensor],
    d_offsets: Tensor,
    hash_size_cumsum: Tensor,
    indices: Tensor,
    offsets: Tensor,
    pooling_mode: int,
    indice_weights: Tensor | None,
    learning_rate_tensor: Tensor,
    update: _Update,
) -> Tensor:
    if pooling_mode not in (_POOL_SUM, _POOL_MEAN):
        raise NotImplementedError(
            "TBE on tpu: pooling mode NONE (sequence embeddings) is not supported"
        )
    flat, weights_offsets = _flat_weights(weights)
    layout = _layout(weights_offsets, d_offsets, hash_size_cumsum)
    bags = _bags(indices, offsets, len(layout.dims), pooling_mode, indice_weights)
    learning_rate = float(learning_rate_tensor.item())
    return _Lookup.apply(placeholder, flat, layout, indices, bags, update, learning_rate)


def lookup_sgd(
    placeholder_autograd_tensor: Tensor,
    weights: list[Tensor],
    D_offsets: Tensor,  # noqa: N803 - fbgemm's argument names
    total_D: int,  # noqa: N803
    max_D: int,  # noqa: N803
    hash_size_cumsum: Tensor,
    total_hash_size_bits: int,
    indices: Tensor,
    offsets: Tensor,
    pooling_mode: int,
    indice_weights: Tensor | None,
    feature_requires_grad: Tensor | None,
    output_dtype: int,
    aux_tensor: list[Tensor | None],
    aux_int: list[int],
    aux_float: list[float],
    aux_bool: list[bool],
    learning_rate_tensor: Tensor,
    max_B: int = -1,  # noqa: N803
    max_B_feature_rank: int = -1,  # noqa: N803
    vbe_output_size: int = -1,
    vbe_output: Tensor | None = None,
) -> Tensor:
    _check_supported(aux_tensor, output_dtype, vbe_output)
    _, weights_offsets = _flat_weights(weights)
    layout = _layout(weights_offsets, D_offsets, hash_size_cumsum)

    def update(flat: Tensor, t: int, grad: Tensor, lr: float) -> None:
        table = _table(flat, layout, t).to(torch.float32)
        _write_table(flat, layout, t, table - lr * grad)

    return _lookup(
        placeholder_autograd_tensor,
        weights,
        D_offsets,
        hash_size_cumsum,
        indices,
        offsets,
        pooling_mode,
        indice_weights,
        learning_rate_tensor,
        update,
    )


def lookup_rowwise_adagrad(
    placeholder_autograd_tensor: Tensor,
    weights: list[Tensor],
    D_offsets: Tensor,  # noqa: N803
    total_D: int,  # noqa: N803
    max_D: int,  # noqa: N803
    hash_size_cumsum: Tensor,
    total_hash_size_bits: int,
    indices: Tensor,
    offsets: Tensor,
    pooling_mode: int,
    indice_weights: Tensor | None,
    feature_requires_grad: Tensor | None,
    output_dtype: int,
    aux_tensor: list[Tensor | None],
    aux_int: list[int],
    aux_float: list[float],
    aux_bool: list[bool],
    momentum1: list[Tensor],
    learning_rate_tensor: Tensor,
    optim_int: list[int],
    optim_float: list[float],
    max_B: int = -1,  # noqa: N803
    max_B_feature_rank: int = -1,  # noqa: N803
    vbe_output_size: int = -1,
    vbe_output: Tensor | None = None,
) -> Tensor:
    _check_supported(aux_tensor, output_dtype, vbe_output)
    eps, weight_decay = optim_float[0], optim_float[1]
    if weight_decay != 0.0:
        raise NotImplementedError("TBE on tpu: row-wise Adagrad with weight decay")
    flat, weights_offsets = _flat_weights(weights)
    layout = _layout(weights_offsets, D_offsets, hash_size_cumsum)
    # The momentum list mirrors the weights' ([host, placements, offsets] or the device's five),
    # one float per row, at element offsets of its own per feature.
    state = momentum1[0]
    state_offsets = momentum1[2] if len(momentum1) == 3 else momentum1[3]
    starts = _host_list(state_offsets)

    def update(flat: Tensor, t: int, grad: Tensor, lr: float) -> None:
        rows = layout.rows[t]
        moment = state.narrow(0, starts[t], rows)
        new_moment = moment.to(torch.float32) + (grad * grad).mean(dim=1)
        moment.copy_(new_moment.to(moment.dtype))
        step = lr / (torch.sqrt(new_moment) + eps)
        table = _table(flat, layout, t).to(torch.float32)
        _write_table(flat, layout, t, table - step[:, None] * grad)

    return _lookup(
        placeholder_autograd_tensor,
        weights,
        D_offsets,
        hash_size_cumsum,
        indices,
        offsets,
        pooling_mode,
        indice_weights,
        learning_rate_tensor,
        update,
    )


def bounds_check_indices(
    rows_per_table: Tensor,
    indices: Tensor,
    offsets: Tensor,
    bounds_check_mode: int,
    warning: Tensor,
    weights: Tensor | None = None,
    B_offsets: Tensor | None = None,  # noqa: N803
    max_B: int = -1,  # noqa: N803
    b_t_map: Tensor | None = None,
    info_B_num_bits: int = -1,  # noqa: N803
    info_B_mask: int = -1,  # noqa: N803
    bounds_check_version: int = 1,
    prefetch_pipeline: bool = False,
) -> None:
    """fbgemm's check of TBE indices against their tables' sizes: out-of-range indices read
    row 0 (WARNING and IGNORE modes, WARNING counting them), or raise (FATAL, one host sync)."""
    if bounds_check_mode in (3,):  # NONE
        return
    if B_offsets is not None:
        raise NotImplementedError("bounds_check_indices on tpu: variable batch sizes (VBE)")
    features = rows_per_table.numel()
    bags = offsets.numel() - 1
    if features == 0 or indices.numel() == 0:
        return
    batch = bags // features
    rows = _host_list(rows_per_table)
    # Each feature's positions compared with its bounds: every op positionwise over the
    # indices, so that it runs at their size bucket (a searchsorted or gather over all
    # positions would compile at every count of indices).
    positions = torch.ones_like(indices, dtype=torch.long).cumsum(0) - 1
    bounds = offsets.to(torch.long)[::batch]
    # -1 marks a pruned index, which fbgemm lets through (and TBE reads as nothing).
    bad = indices < -1
    for t in range(features):
        inside = (positions >= bounds[t]) & (positions < bounds[t + 1])
        bad |= inside & (indices >= rows[t])
    if bounds_check_mode in (0, 6):  # FATAL
        count = int(bad.sum().item())
        if count:
            raise IndexError(f"TBE indices: {count} indices lie outside their tables")
        return
    indices.copy_(torch.where(bad, torch.zeros_like(indices), indices))
    if bounds_check_mode in (1, 5):  # WARNING
        warning.add_(bad.sum().to(warning.dtype))


def dense_lookup(
    dev_weights: Tensor,
    weights_offsets: Tensor,
    D_offsets: Tensor,  # noqa: N803
    total_D: int,  # noqa: N803
    max_D: int,  # noqa: N803
    hash_size_cumsum: Tensor,
    total_hash_size_bits: int,
    indices: Tensor,
    offsets: Tensor,
    pooling_mode: int,
    indice_weights: Tensor | None,
    feature_requires_grad: Tensor | None,
    output_dtype: int = _FP32,
    B_offsets: Tensor | None = None,  # noqa: N803
    vbe_output_offsets_feature_rank: Tensor | None = None,
    vbe_B_offsets_rank_per_feature: Tensor | None = None,  # noqa: N803
    max_B: int = -1,  # noqa: N803
    max_B_feature_rank: int = -1,  # noqa: N803
    vbe_output_size: int = -1,
    mixed_D: bool = True,  # noqa: N803
) -> Tensor:
    """The dense TBE (TorchRec's data-parallel tables): the same pooled lookup, differentiable
    in the weights through the ops it is made of; the optimizer is the user's."""
    _check_supported([B_offsets], output_dtype, None)
    if pooling_mode not in (_POOL_SUM, _POOL_MEAN):
        raise NotImplementedError(
            "TBE on tpu: pooling mode NONE (sequence embeddings) is not supported"
        )
    layout = _layout(weights_offsets, D_offsets, hash_size_cumsum)
    bags = _bags(indices, offsets, len(layout.dims), pooling_mode, indice_weights)
    return _forward(dev_weights, layout, indices, bags)[0]


KERNELS: dict[str, Callable[..., Any]] = {
    "bounds_check_indices": bounds_check_indices,
}
# The lookups carry their own backward (the fused optimizer), so they are registered for the
# autograd key as well: fbgemm's own autograd kernel would call its CPU/CUDA backward.
AUTOGRAD_KERNELS: dict[str, Callable[..., Any]] = {
    "split_embedding_codegen_lookup_sgd_function_pt2": lookup_sgd,
    "split_embedding_codegen_lookup_rowwise_adagrad_function_pt2": lookup_rowwise_adagrad,
    "dense_embedding_codegen_lookup_function": dense_lookup,
}
