"""Paged attention for vLLM on ``tpu``, written in PyTorch ops.

One batch holds prefills and decodes together. Each layer's cache is vLLM's page table of
``[blocks, kv_heads, block_size, 2 * head_size]`` (keys then values in the last dimension),
stored token-major within a block (layout LBNHC) so that a token's slot is one row.

A step writes its new keys and values at their slots, then every query token attends over the
pages of its request, gathered through the block table. The number of pages gathered is padded
to a power of two and masked by position, so a request's growing context reuses one compiled
executable per power of two rather than compiling at every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

from torch_tpu import _C
from torch_tpu.vllm.buffers import elements_from, whole_buffer

# vLLM's fp8 cache dtype names (it allocates such caches as uint8) and the float8 format each
# stores; "fp8" is e4m3, as in vLLM.
FP8_CACHE_DTYPES = {
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


class TpuAttentionBackend(AttentionBackend):
    # forward() writes the step's keys and values into the cache itself.
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [
        torch.bfloat16,
        torch.float16,
        torch.float32,
    ]
    # fp8 caches hold each key and value divided by the layer's scale (1.0 unless the
    # checkpoint gives one), rounded to float8; attention reads them back times the scale.
    supported_kv_cache_dtypes: ClassVar[list[Any]] = ["auto", *FP8_CACHE_DTYPES]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[TpuAttentionImpl]:
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[TpuAttentionMetadataBuilder]:
        return TpuAttentionMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any head size

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    # Per token slot of the runner's buffers (longer than any step; a step reads its padded
    # token count from the front): the token's request's row in `block_table` (-1 for a
    # padding token), its position in the sequence and its cache slot.
    token_request: torch.Tensor
    token_position: torch.Tensor
    slot_mapping: torch.Tensor
    # [max requests, pages] block ids; pages padded to a power of two (padding entries masked).
    block_table: torch.Tensor


def pages_for(max_seq_len: int, block_size: int, width: int) -> int:
    pages = max(1, -(-max_seq_len // block_size))
    return min(1 << (pages - 1).bit_length(), width)


def _all_rows(table: torch.Tensor) -> torch.Tensor:
    """The runner's block table with a row for every request slot, not only the batch's: each
    token picks its request's row, and no shape then follows the batch's request count."""
    rows = elements_from(table) // table.stride(0)
    return table.as_strided((rows, table.shape[1]), table.stride())


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(
        self,
        kv_cache_spec: Any,
        layer_names: list[str],
        vllm_config: Any,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuAttentionMetadata:
        meta = common_attn_metadata
        num_reqs = meta.num_reqs
        # The runner pads the step's tokens to a bucket (padding.padded_count), but
        # hands over positions and slots for its real tokens only, and the real count changes
        # at every step. Passed at the buffers' full length, every step's tensors have the same
        # shapes, and forward() reads its padded count from their front: its graph is compiled
        # once per token and page bucket, not once per token count.
        slots = whole_buffer(meta.slot_mapping)
        positions = None if meta.positions is None else whole_buffer(meta.positions)
        starts = meta.query_start_loc_cpu[: num_reqs + 1].numpy()
        length = len(slots) if positions is None else min(len(positions), len(slots))
        token_request = np.full(length, -1, dtype=np.int64)
        token_request[: starts[-1]] = np.repeat(np.arange(num_reqs), np.diff(starts))
        table = meta.block_table_tensor
        requests = torch.from_numpy(token_request).to(table.device)
        if positions is None:
            positions = _positions_from_lengths(meta, starts, token_request, requests)
        pages = pages_for(meta.max_seq_len, self.block_size, table.shape[1])
        return TpuAttentionMetadata(
            num_actual_tokens=meta.num_actual_tokens,
            token_request=requests,
            token_position=positions.to(torch.int64),
            slot_mapping=slots,
            block_table=_all_rows(table)[:, :pages],
        )


def _positions_from_lengths(
    meta: CommonAttentionMetadata,
    starts: np.ndarray,
    token_request: np.ndarray,
    requests: torch.Tensor,
) -> torch.Tensor:
    """Each token's position where the metadata carries none (a drafter's steps): a request's
    query is the last tokens of its sequence, so a token k places before its query's end sits
    at the sequence length less k + 1. The lengths stay on the device (drafters update them
    there); the places before the end are host arithmetic. Padding tokens get position 0."""
    real = token_request >= 0
    before_end = np.zeros(len(token_request), dtype=np.int64)
    ends = starts[1:][token_request[real]]
    before_end[real] = ends - 1 - np.flatnonzero(real)
    lengths = meta.seq_lens.to(torch.int64)[requests.clamp(min=0)]
    offsets = torch.from_numpy(before_end + 1).to(lengths.device)
    return torch.where(requests >= 0, lengths - offsets, 0)


class TpuAttentionImpl(AttentionImpl[TpuAttentionMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        **unsupported: Any,
    ) -> None:
        refused = {
            "ALiBi": alibi_slopes is not None,
            "a sliding window": sliding_window is not None,
            "logit soft-capping": bool(logits_soft_cap),
            f"attention type {attn_type}": attn_type != AttentionType.DECODER,
            f"KV cache dtype {kv_cache_dtype}": kv_cache_dtype != "auto"
            and kv_cache_dtype not in FP8_CACHE_DTYPES,
            "attention sinks": unsupported.get("sinks") is not None,
        }
        named = [what for what, present in refused.items() if present]
        if named:
            raise NotImplementedError(f"tpu paged attention does not support {', '.join(named)}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.fp8_format = FP8_CACHE_DTYPES.get(kv_cache_dtype)
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type
        # Under vLLM's compilation (compiler.py) each call replays a recorded graph.
        self.replayed = _compiled_mode()
        self._replays: dict[tuple[int, int], Any] = {}
        if self.replayed:
            _register_fake_attention()

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: TpuAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu paged attention has no fused output quantization")
        if attn_metadata is None:  # a profiling run before the cache exists
            return output.fill_(0)
        k_scale, v_scale = 1.0, 1.0
        if self.fp8_format is not None:
            k_scale, v_scale = float(layer._k_scale_float), float(layer._v_scale_float)
        args = (
            query,
            key,
            value,
            kv_cache,
            output,
            attn_metadata.token_request[: query.shape[0]],
            attn_metadata.token_position[: query.shape[0]],
            attn_metadata.slot_mapping[: query.shape[0]],
            attn_metadata.block_table,
            k_scale,
            v_scale,
        )
        if not self.replayed:
            self._attend(*args)
            return output
        # Compiled mode (compiler.py): the layer's attention at this token and page bucket
        # is one fused executable, recorded once and replayed at every later step, so that no
        # op of it is dispatched per step. One replay per bucket pair keeps each to its one
        # signature (a replay keeps a few, least recently used out).
        bucket = (query.shape[0], attn_metadata.block_table.shape[1])
        replay = self._replays.get(bucket)
        if replay is None:
            replay = self._replays[bucket] = _C._GraphReplay(self._attend)
        replay(*args)
        return output

    def _attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        output: torch.Tensor,
        request: torch.Tensor,
        position: torch.Tensor,
        slot_mapping: torch.Tensor,
        block_table: torch.Tensor,
        k_scale: float,
        v_scale: float,
    ) -> tuple[()]:
        """Writes the step's keys and values at their slots and each token's attention into
        `output`. Reads nothing but its arguments, so that it can be replayed."""
        # Every row of the padded batch is computed: padding rows read request 0's pages and
        # write the null block (block 0, which vLLM never hands to a request); their outputs
        # are not read.
        tokens = query.shape[0]
        real = request >= 0
        d = self.head_size
        if self.fp8_format is not None:
            # vLLM allocates the cache as bytes; the same bytes as float8.
            kv_cache = kv_cache.view(self.fp8_format)
        # [blocks, block_size, kv_heads, 2 * head_size]: one row per token slot.
        cache = kv_cache.permute(0, 2, 1, 3)
        block_size = cache.shape[1]
        if self.kv_sharing_target_layer_name is None:
            new_keys, new_values = key[:tokens], value[:tokens]
            if self.fp8_format is not None:
                new_keys, new_values = new_keys / k_scale, new_values / v_scale
            entry = torch.cat([new_keys, new_values], dim=-1).to(cache.dtype)
            slots = torch.where(real, slot_mapping, 0)
            _write_slots(kv_cache, cache, slots, entry)

        # Each query token's request context: [tokens, pages * block_size, kv_heads, 2 * d].
        token_pages = block_table[request.clamp(min=0)]
        context = cache[token_pages].reshape(
            tokens, token_pages.shape[1] * block_size, self.num_kv_heads, 2 * d
        )
        keys, values = context[..., :d].float(), context[..., d:].float()
        if self.fp8_format is not None:
            keys, values = keys * k_scale, values * v_scale

        group = self.num_heads // self.num_kv_heads
        q = query.reshape(tokens, self.num_kv_heads, group, d)
        scores = torch.einsum("tkgd,tlkd->tkgl", q.float(), keys) * self.scale
        visible = torch.arange(context.shape[1], device=q.device)[None, :] <= position[:, None]
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        attended = torch.einsum("tkgl,tlkd->tkgd", probs, values)
        out = output.view(output.shape[0], self.num_heads, d)
        out[:tokens] = attended.reshape(tokens, self.num_heads, d).to(out.dtype)
        return ()


ATTENTION_OP = "vllm::unified_attention_with_output"


def _fake_attention(*args: Any, **kwargs: Any) -> None:
    """What Dynamo sees of a layer's attention: it writes its `output` argument in place and
    returns nothing, so the traced graph has no value of it to shape."""
    return None


def _register_fake_attention() -> None:
    """Gives vLLM's attention op (registered by vLLM through torch.library without one) a fake
    implementation, so that Dynamo traces around it as one opaque call by its declared
    behaviour rather than by a fallback for ops without one."""
    from torch._library.simple_registry import singleton

    if singleton.find(ATTENTION_OP).fake_impl.kernel is None:
        torch.library.register_fake(ATTENTION_OP, _fake_attention)


def _compiled_mode() -> bool:
    from vllm.config import CompilationMode, get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    return config is not None and config.compilation_config.mode == CompilationMode.VLLM_COMPILE


def _write_slots(
    kv_cache: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor, entry: torch.Tensor
) -> None:
    """Writes each token's [kv_heads, 2 * head_size] row at its slot.

    The layer's cache is a view into vLLM's one buffer for all layers. Written through that
    view, a few rows would rewrite the whole view; written as a scatter into the flat buffer
    at the rows' element offsets, they cost what they write (the fused graph updates the
    buffer in place).
    """
    slots = slots.clamp(min=0)  # tokens without a slot (-1) write the null block
    if not cache.is_contiguous():  # a layout other than the one this backend asks for
        block_size = cache.shape[1]
        cache[slots // block_size, slots % block_size] = entry
        return
    row = cache.shape[2] * cache.shape[3]
    flat = kv_cache.as_strided(
        (kv_cache.untyped_storage().nbytes() // kv_cache.element_size(),), (1,), 0
    )
    columns = torch.arange(row, device=slots.device)
    offsets = (kv_cache.storage_offset() + slots * row)[:, None] + columns[None, :]
    flat[offsets] = entry.reshape(entry.shape[0], row)
