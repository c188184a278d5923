"""A Pallas flash-attention kernel as the attention of a Hugging Face Llama model on tpu.

The forward is a Pallas kernel (online softmax over key blocks, causal, grouped-query heads
through the key/value index map); its backward is written by hand in plain jax (the gradients
of softmax(q k^T) v). Registered with transformers' AttentionInterface as "pallas", the
model generates the same tokens as with sdpa, and one training step's gradients match.

    .venv/bin/python examples/pallas_attention.py      # needs the kernels and hf extras

On the CPU plugin the kernel runs in Pallas's interpret mode (plain StableHLO); on a TPU the
same kernel lowers to Mosaic.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

from torch_tpu.kernels import jax_op


def _largest_block(length: int, limit: int = 64) -> int:
    """The largest power of two up to `limit` that divides `length`."""
    block = 1
    while block * 2 <= limit and length % (block * 2) == 0:
        block *= 2
    return block


def _flash_kernel(q_ref: Any, k_ref: Any, v_ref: Any, o_ref: Any, *, scale: float) -> None:
    # q_ref: one block of queries [block_q, D] of one (batch, head); k_ref, v_ref: that head's
    # whole key/value sequence [S, D]. Query i sits at position S - Lq + i (a cache before it).
    block_q, _ = q_ref.shape
    kv_length = k_ref.shape[0]
    query_length = pl.num_programs(2) * block_q
    block_k = _largest_block(kv_length)
    q = q_ref[...].astype(jnp.float32) * scale
    q_positions = (
        kv_length - query_length + pl.program_id(2) * block_q + jnp.arange(block_q)[:, None]
    )

    def step(j: Any, carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        running_max, total, acc = carry
        k = k_ref[pl.ds(j * block_k, block_k), :].astype(jnp.float32)
        v = v_ref[pl.ds(j * block_k, block_k), :].astype(jnp.float32)
        scores = q @ k.T
        k_positions = j * block_k + jnp.arange(block_k)[None, :]
        scores = jnp.where(k_positions <= q_positions, scores, -jnp.inf)
        new_max = jnp.maximum(running_max, scores.max(axis=-1))
        p = jnp.exp(scores - new_max[:, None])
        correction = jnp.exp(running_max - new_max)
        return new_max, total * correction + p.sum(axis=-1), acc * correction[:, None] + p @ v

    head_dim = q_ref.shape[1]
    init = (
        jnp.full((block_q,), -jnp.inf, jnp.float32),
        jnp.zeros((block_q,), jnp.float32),
        jnp.zeros((block_q, head_dim), jnp.float32),
    )
    # Key block 0 holds position 0, which every query sees: no row is all -inf after it.
    _, total, acc = jax.lax.fori_loop(0, kv_length // block_k, step, init)
    o_ref[...] = (acc / total[:, None]).astype(o_ref.dtype)


def _reference_attention(q: Any, k: Any, v: Any, scale: float) -> Any:
    """The same attention in plain jax: what the backward differentiates."""
    groups = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, groups, axis=1), jnp.repeat(v, groups, axis=1)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) * scale
    query_length, kv_length = q.shape[2], k.shape[2]
    visible = jnp.arange(kv_length)[None, :] <= (
        kv_length - query_length + jnp.arange(query_length)[:, None]
    )
    weights = jax.nn.softmax(jnp.where(visible, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v.astype(jnp.float32)).astype(q.dtype)


def _flash_backward(cotangents: tuple[Any], q: Any, k: Any, v: Any, scale: float) -> Any:
    _, pullback = jax.vjp(functools.partial(_reference_attention, scale=scale), q, k, v)
    return pullback(cotangents[0])


@jax_op(name="examples::flash_attention", backward=_flash_backward)
def flash_attention(q: Any, k: Any, v: Any, scale: float) -> Any:
    """Causal attention of q [B, H, Lq, D] over k, v [B, Hkv, S, D] (S >= Lq)."""
    batch, heads, query_length, head_dim = q.shape
    kv_heads, kv_length = k.shape[1], k.shape[2]
    groups = heads // kv_heads
    block_q = _largest_block(query_length)
    return pl.pallas_call(
        functools.partial(_flash_kernel, scale=scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch, heads, query_length // block_q),
        in_specs=[
            pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((None, None, kv_length, head_dim), lambda b, h, i: (b, h // groups, 0, 0)),
            pl.BlockSpec((None, None, kv_length, head_dim), lambda b, h, i: (b, h // groups, 0, 0)),
        ],
        out_specs=pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i: (b, h, i, 0)),
    )(q, k, v)


def pallas_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; returns [B, Lq, H, D] and no weights."""
    if attention_mask is not None or dropout:
        raise NotImplementedError("pallas attention: causal attention without padding or dropout")
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    output = flash_attention(query, key, value, float(scale))
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register("pallas", pallas_attention)


def tiny_llama(attention: str) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("tpu").eval()


def main() -> None:
    prompt = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1)).to("tpu")
    tokens = {}
    for attention in ("sdpa", "pallas"):
        model = tiny_llama(attention)
        generated = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
        tokens[attention] = generated.cpu()
        print(f"{attention:>12}: {tokens[attention][0, 12:].tolist()}")
    same = torch.equal(tokens["sdpa"], tokens["pallas"])
    print(f"same tokens as sdpa: {same}")

    gradients = {}
    for attention in ("sdpa", "pallas"):
        model = tiny_llama(attention).train()
        model(prompt, labels=prompt).loss.backward()
        gradients[attention] = model.model.layers[0].self_attn.q_proj.weight.grad.cpu()
    difference = (gradients["sdpa"] - gradients["pallas"]).abs().max().item()
    print(f"q_proj gradient, largest difference from sdpa: {difference:.2e}")
    if not same or difference > 1e-4:
        raise SystemExit("the pallas attention disagrees with sdpa")


if __name__ == "__main__":
    main()
