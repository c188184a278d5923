"""Sampling over a padded bucket of rows.

The runner computes logits for a bucket of rows (the batch's requests, then copies of row 0;
see host_inputs.prepare), so the logits and sampling executable is compiled once per bucket
rather than once per request count. The sampling parameters are per-request tensors at the
front of vLLM's preallocated buffers; taken at the bucket's length, their padding rows hold
stale values, and the rows those produce are dropped before anything reads them.

Parameters whose tensors are built at the request count (penalties, allowed-token masks,
seeded generators, bad words, min-p and unknown logits processors) are not padded: such a
step samples its real rows only, as vLLM does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.logits_processor.builtin import (
    LogitBiasLogitsProcessor,
    MinPLogitsProcessor,
    MinTokensLogitsProcessor,
)
from vllm.v1.sample.metadata import SamplingMetadata

from torch_tpu.vllm.buffers import leading_rows

# Processors that index logits by request row: extra rows pass through them untouched.
_ROW_INDEXED = (LogitBiasLogitsProcessor, MinTokensLogitsProcessor)


def padded_metadata(metadata: SamplingMetadata, rows: int) -> SamplingMetadata | None:
    """`metadata` for `rows` logits rows, or None where some parameter cannot be padded."""
    holder = metadata.thinking_budget_state_holder
    if (
        metadata.generators
        or not metadata.no_penalties
        or metadata.allowed_token_ids_mask is not None
        or metadata.bad_words_token_ids
        or metadata.logprob_token_ids
        or any(metadata.spec_token_ids or ())  # a list per request, empty without drafts
        or (holder is not None and holder.has_tracked_requests())
        or not all(_pads(processor) for processor in metadata.logitsprocs.all)
    ):
        return None
    padded: dict[str, torch.Tensor] = {}
    for name in ("temperature", "top_p", "top_k"):
        tensor = getattr(metadata, name)
        if tensor is None:
            continue
        rows_of_buffer = leading_rows(tensor, rows)
        if rows_of_buffer is None:
            return None
        padded[name] = rows_of_buffer
    return dataclasses.replace(metadata, **padded)


def first_rows(output: SamplerOutput, count: int) -> SamplerOutput:
    """The sampler's output for the batch's `count` requests, without the padding rows."""
    logprobs = output.logprobs_tensors
    if logprobs is not None:
        logprobs = logprobs._replace(
            logprob_token_ids=logprobs.logprob_token_ids[:count],
            logprobs=logprobs.logprobs[:count],
            selected_token_ranks=logprobs.selected_token_ranks[:count],
        )
    return SamplerOutput(
        sampled_token_ids=output.sampled_token_ids[:count], logprobs_tensors=logprobs
    )


def _pads(processor: Any) -> bool:
    if isinstance(processor, _ROW_INDEXED):
        return True
    # min-p's thresholds are a tensor at the request count; inactive, it does nothing.
    return isinstance(processor, MinPLogitsProcessor) and not processor.min_p_count
