"""Ready kernels for a transformer's layers, as torch ops (``torch_tpu.kernels.jax_op``):

- ``rms_norm(x, weight, eps)``: RMSNorm over the last dimension, written in jax, with a
  hand-written jax backward (the gradients of x and of the weight);
- ``masked_attention(q, k, v, mask, scale)``: attention of q [B, H, L, D] over k, v
  [B, Hkv, S, D] (grouped-query heads when Hkv < H) under a boolean mask [B, L, S] (True: the
  key is visible). The forward is a Pallas flash kernel (online softmax over key blocks, one
  program per batch, head and query block); its backward is the vjp of the same attention in
  plain jax. On the CPU plugin Pallas runs in its interpret mode (plain StableHLO); on a TPU
  the kernel lowers to Mosaic.

Both compute in float32 and return the inputs' dtype. jax is imported when this module is.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from . import jax_op

__all__ = ["masked_attention", "rms_norm"]

_HIGHEST = jax.lax.Precision.HIGHEST  # full float32 matmuls (a TPU's default would be bf16)
# A masked score: finite, so a block whose keys are all masked leaves no NaN in the running max.
_MASKED = -1e30


def _rms_norm_backward(cotangents: tuple[Any], x: Any, weight: Any, eps: float) -> Any:
    (grad,) = cotangents
    x32, g32, w32 = x.astype(jnp.float32), grad.astype(jnp.float32), weight.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps)
    gw = g32 * w32
    # d/dx of x * rstd: rstd * (gw - x * rstd^2 * mean(gw * x)).
    dx = rstd * (gw - x32 * rstd * rstd * jnp.mean(gw * x32, -1, keepdims=True))
    dw = jnp.sum((g32 * x32 * rstd).reshape(-1, x.shape[-1]), axis=0)
    return dx.astype(x.dtype), dw.astype(weight.dtype)


@jax_op(name="torch_tpu_layers::rms_norm", backward=_rms_norm_backward)
def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """``x * rsqrt(mean(x^2, -1) + eps) * weight``, as torch.nn.RMSNorm."""
    x32 = x.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps)
    return (x32 * rstd * weight.astype(jnp.float32)).astype(x.dtype)


def _block(length: int, limit: int = 64) -> int:
    """The largest power of two up to `limit` that divides `length`."""
    block = 1
    while block * 2 <= limit and length % (block * 2) == 0:
        block *= 2
    return block


def _flash_kernel(
    q_ref: Any, k_ref: Any, v_ref: Any, mask_ref: Any, o_ref: Any, *, scale: float
) -> None:
    # q_ref [block_q, D]: a block of one (batch, head)'s queries; k_ref, v_ref [S, D]: that
    # head's keys and values; mask_ref [block_q, S]: which of them each query sees.
    block_q, head_dim = q_ref.shape
    kv_length = k_ref.shape[0]
    block_k = _block(kv_length)
    q = q_ref[...].astype(jnp.float32) * scale

    def step(j: Any, carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        running_max, total, acc = carry
        keys = pl.ds(j * block_k, block_k)
        k = k_ref[keys, :].astype(jnp.float32)
        v = v_ref[keys, :].astype(jnp.float32)
        visible = mask_ref[:, keys]
        scores = jnp.where(visible, jnp.dot(q, k.T, precision=_HIGHEST), _MASKED)
        new_max = jnp.maximum(running_max, scores.max(axis=-1))
        p = jnp.where(visible, jnp.exp(scores - new_max[:, None]), 0.0)
        correction = jnp.exp(running_max - new_max)
        acc = acc * correction[:, None] + jnp.dot(p, v, precision=_HIGHEST)
        return new_max, total * correction + p.sum(axis=-1), acc

    init = (
        jnp.full((block_q,), _MASKED, jnp.float32),
        jnp.zeros((block_q,), jnp.float32),
        jnp.zeros((block_q, head_dim), jnp.float32),
    )
    _, total, acc = jax.lax.fori_loop(0, kv_length // block_k, step, init)
    # A query that sees no key at all gets zeros (its total is 0), not NaN.
    o_ref[...] = (acc / jnp.where(total == 0, 1.0, total)[:, None]).astype(o_ref.dtype)


def _reference_attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """The same attention in plain jax: what the backward differentiates."""
    groups = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, groups, axis=1), jnp.repeat(v, groups, axis=1)
    q32, k32, v32 = (t.astype(jnp.float32) for t in (q, k, v))
    scores = jnp.einsum("bhqd,bhkd->bhqk", q32, k32, precision=_HIGHEST) * scale
    visible = mask[:, None, :, :]
    weights = jax.nn.softmax(jnp.where(visible, scores, _MASKED), axis=-1)
    weights = jnp.where(visible, weights, 0.0)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v32, precision=_HIGHEST).astype(q.dtype)


def _attention_backward(
    cotangents: tuple[Any], q: Any, k: Any, v: Any, mask: Any, scale: float
) -> Any:
    attend = functools.partial(_reference_attention, mask=mask, scale=scale)
    _, pullback = jax.vjp(attend, q, k, v)
    return (*pullback(cotangents[0]), None)


@jax_op(name="torch_tpu_layers::masked_attention", backward=_attention_backward)
def masked_attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """softmax(q k^T * scale, keys where ``mask``) v; q [B, H, L, D], k and v [B, Hkv, S, D],
    mask [B, L, S] of bool. Returns [B, H, L, D]."""
    batch, heads, query_length, head_dim = q.shape
    kv_heads, kv_length = k.shape[1], k.shape[2]
    groups = heads // kv_heads
    block_q = _block(query_length)
    whole_kv = pl.BlockSpec(
        (None, None, kv_length, head_dim), lambda b, h, i: (b, h // groups, 0, 0)
    )
    return pl.pallas_call(
        functools.partial(_flash_kernel, scale=scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch, heads, query_length // block_q),
        in_specs=[
            pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i: (b, h, i, 0)),
            whole_kv,
            whole_kv,
            pl.BlockSpec((None, block_q, kv_length), lambda b, h, i: (b, i, 0)),
        ],
        out_specs=pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i: (b, h, i, 0)),
    )(q, k, v, mask)
