"""DTensor sharding strategies for scaled_dot_product_attention on tpu.

On a PrivateUse1 device torch routes ``F.scaled_dot_product_attention`` to
``aten._scaled_dot_product_fused_attention_overrideable`` (and autograd to its ``_backward``),
which DTensor knows no sharding strategy for: tensor-parallel attention (q/k/v sharded on the
heads, as ``ColwiseParallel(use_local_output=False)`` leaves them) raised. These are the
strategies torch gives its flash and cuDNN kernels: everything replicated, the heads sharded,
or the batch sharded. A mask that broadcasts over the sharded dim stays whole on every rank
(its gradient, summed over that dim, is then a partial sum).
"""

from __future__ import annotations

from typing import Any

import torch

_registered = False


def register() -> None:
    """Registers the forward and backward strategies with DTensor (idempotent)."""
    global _registered
    if _registered:
        return
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor._op_schema import OpSchema, OpStrategy, RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import (
        expand_to_full_mesh_op_strategy,
        register_op_strategy,
    )

    aten = torch.ops.aten
    forward = aten._scaled_dot_product_fused_attention_overrideable.default
    backward = aten._scaled_dot_product_fused_attention_overrideable_backward.default

    def split(dim: int | None) -> Any:
        return Replicate() if dim is None else Shard(dim)

    def mask_placement(mask: Any, dim: int | None) -> Any:
        """The mask's placement where the heads or batch (`dim`) are sharded: sharded alike
        where it has that dim, whole where it broadcasts over it."""
        if mask is None:
            return None
        if dim is None or mask.shape[dim] == 1:
            return Replicate()
        return Shard(dim)

    def mask_grad_placement(mask: Any, dim: int | None) -> Any:
        if mask is None:
            return None
        placement = mask_placement(mask, dim)
        return Partial() if dim is not None and placement == Replicate() else placement

    @register_op_strategy(forward, schema_info=RuntimeSchemaInfo(4))
    def forward_strategy(op_schema: OpSchema) -> OpStrategy:
        # (query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, *, scale)
        # -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
        #     philox_offset, debug_attn_mask)
        args = op_schema.args_schema
        mask = args[3] if len(args) > 3 and isinstance(args[3], OpStrategy) else None
        strategies = []
        for dim in (None, 1, 0):  # replicated, heads, batch
            placements = [split(dim), split(dim), None, None, None, None]
            placements += [Replicate(), Replicate(), None]  # seed and offset: 0-d
            placements += [split(dim)] * 3
            if mask is not None:
                placements.append(mask_placement(mask, dim))
            strategies.append(placements)
        mesh = op_schema.get_mesh_from_args()
        return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=9)

    @register_op_strategy(backward)
    def backward_strategy(op_schema: OpSchema) -> OpStrategy:
        # (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
        #  cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)
        # -> (grad_query, grad_key, grad_value, grad_attn_bias)
        args = op_schema.args_schema
        mask = args[4] if isinstance(args[4], OpStrategy) else None
        strategies = []
        for dim in (None, 1, 0):
            placements = [split(dim)] * 3 + [mask_grad_placement(mask, dim)]
            for index, arg in enumerate(args):
                if not isinstance(arg, OpStrategy):
                    continue
                if index == 4:
                    placements.append(mask_placement(mask, dim))
                elif index in (8, 9, 14, 15):  # cumulative lengths, seed and offset
                    placements.append(Replicate())
                else:
                    placements.append(split(dim))
            strategies.append(placements)
        mesh = op_schema.get_mesh_from_args(validate=False)
        return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=4)

    _registered = True
