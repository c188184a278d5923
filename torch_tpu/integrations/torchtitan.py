"""TorchTitan's layers swapped for torch_tpu's kernels by configuration.

TorchTitan (0.3.0) replaces any configurable component through its ``override.imports``
setting: each entry names an ``@override`` factory that rewrites the matching nodes of the
config tree before the model is built. This module registers two:

- ``torch_tpu.integrations.torchtitan.jax_rms_norm``: every ``RMSNorm.Config`` becomes
  ``JaxRMSNorm`` (``torch_tpu.kernels.layers.rms_norm``: jax forward, jax backward);
- ``torch_tpu.integrations.torchtitan.pallas_attention``: every flex-attention inner attention
  becomes ``PallasAttention`` (``torch_tpu.kernels.layers.masked_attention``: a Pallas flash
  kernel under the model's own mask, made dense; jax backward).

On TorchTitan's command line::

    --override.imports torch_tpu.integrations.torchtitan.jax_rms_norm \
        torch_tpu.integrations.torchtitan.pallas_attention

or in Python ``config.override.imports = [...]``. The parameters keep their names and shapes,
so checkpoints move between the stock and the swapped model. Under TorchTitan's DTensor
parallelism the kernels run on each rank's local shards: RMSNorm's rows (FSDP's batch shards,
sequence parallel's sequence shards) through ``local_map``, attention's heads through the
``local_map`` TorchTitan already wraps its inner attention in.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate
from torch.distributed.tensor.experimental import local_map
from torch.nn.attention.flex_attention import create_block_mask, create_mask
from torchtitan.config import derive, override
from torchtitan.models.common import attention
from torchtitan.models.common.attention import FlexAttention
from torchtitan.models.common.nn_modules import RMSNorm

from ..kernels import layers

__all__ = ["JaxRMSNorm", "PallasAttention", "jax_rms_norm", "pallas_attention"]


def _plain(name: str, *tensors: torch.Tensor | None) -> None:
    if any(isinstance(t, DTensor) for t in tensors):
        raise NotImplementedError(
            f"torch_tpu.integrations.torchtitan: {name} takes the local tensors TorchTitan's "
            "local_map hands an inner attention (its sharding config); got DTensors"
        )


class JaxRMSNorm(RMSNorm):
    """TorchTitan's RMSNorm (same parameter) computed by torch_tpu's jax kernel."""

    @dataclass(kw_only=True, slots=True)
    class Config(RMSNorm.Config):
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if tuple(self.normalized_shape) != (x.shape[-1],):
            raise ValueError(
                f"JaxRMSNorm normalizes the last dimension only, got {self.normalized_shape}"
            )
        eps = float(self.eps if self.eps is not None else torch.finfo(x.dtype).eps)
        weight = self.weight if self.weight is not None else torch.ones_like(x[..., 0, :])
        if isinstance(x, DTensor):
            return _rms_norm_on_local_shards(x, weight, eps)
        if isinstance(weight, DTensor):
            raise TypeError("JaxRMSNorm: a DTensor weight takes a DTensor input")
        return layers.rms_norm(x, weight, eps)


def _rms_norm_on_local_shards(x: DTensor, weight: torch.Tensor, eps: float) -> DTensor:
    """The kernel on each rank's rows (TorchTitan's DTensor path: FSDP's batch shards, sequence
    parallel's sequence shards): each row is normalized on its own, so a rank's rows need no
    other rank's. The weight is whole on every rank; the gradient each rank computes for it is
    its rows' share of the sum (Partial where x is sharded), which DTensor reduces."""
    if not isinstance(weight, DTensor):
        weight = DTensor.from_local(weight, x.device_mesh, [Replicate()] * x.device_mesh.ndim)
    last = x.ndim - 1
    for placement in (*x.placements, *weight.placements):
        if not (placement.is_replicate() or placement.is_shard()) or (
            placement.is_shard() and placement.dim in (last, -1)
        ):
            raise NotImplementedError(
                f"JaxRMSNorm: rows sharded or replicated, got x {x.placements}, weight "
                f"{weight.placements}"
            )
    if any(p.is_shard() for p in weight.placements):
        raise NotImplementedError(f"JaxRMSNorm: a sharded weight ({weight.placements})")
    weight_grad = tuple(Partial() if p.is_shard() else Replicate() for p in x.placements)
    run = local_map(
        functools.partial(layers.rms_norm, eps=eps),
        out_placements=(x.placements,),
        in_placements=(x.placements, weight.placements),
        in_grad_placements=(x.placements, weight_grad),
        device_mesh=x.device_mesh,
    )
    return run(x, weight)


class PallasAttention(attention.Module):
    """Flex attention's place (the model builds its packed-document block mask for it), run by
    torch_tpu's Pallas kernel under that mask, made dense."""

    @dataclass(kw_only=True, slots=True)
    class Config(FlexAttention.Config):
        pass

    def __init__(self, config: Config) -> None:
        super().__init__()

    def forward(  # type: ignore[override]
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: Any,
        score_mod: Any = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        out_transform: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        if score_mod is not None or out_transform is not None:
            raise NotImplementedError("PallasAttention: score_mod and out_transform")
        _plain("PallasAttention", q_BLNH, k_BLNH, v_BLNH)
        batch, q_len, kv_len = q_BLNH.shape[0], q_BLNH.shape[1], k_BLNH.shape[1]
        mask = create_mask(
            attention_masks.mask_mod, batch, None, q_len, kv_len, device=q_BLNH.device
        )
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q_BLNH, k_BLNH, v_BLNH))
        if q.shape[1] % k.shape[1] != 0:
            raise ValueError(f"PallasAttention: {q.shape[1]} heads over {k.shape[1]} kv heads")
        scale = scale if scale is not None else q.shape[-1] ** -0.5
        out = layers.masked_attention(q, k, v, mask[:, 0], float(scale))
        return out.transpose(1, 2)


@override(target=RMSNorm.Config, description="RMSNorm by torch_tpu's jax kernel")
def jax_rms_norm(cfg: RMSNorm.Config) -> JaxRMSNorm.Config:
    return derive(cfg, JaxRMSNorm.Config)


@override(target=FlexAttention.Config, description="attention by torch_tpu's Pallas kernel")
def pallas_attention(cfg: FlexAttention.Config) -> PallasAttention.Config:
    # The model builds the block mask with Inductor, which has no tpu code generator; eagerly
    # built it is the same mask.
    attention._compiled_create_block_mask = create_block_mask
    return derive(cfg, PallasAttention.Config)


def tpu_programs(gm: torch.fx.GraphModule, example_inputs: Any = None) -> torch.fx.GraphModule:
    """A graph pass for TorchTitan's graph trainer (``experiments/graph_trainer``, its
    ``aot_fx_trace`` whole-step mode), last in a pass pipeline: the traced step becomes torch_tpu
    programs. The stretches of compute between collectives are compiled graphs (recorded on the
    first step, replayed after, joined into one pending graph); the collectives run through
    ``tpu_dist`` between them (see ``torch_tpu._graph_collectives``)."""
    from .._graph_collectives import split_at_collectives

    return split_at_collectives(gm)
