"""Structured output's token masks applied on ``tpu``.

vLLM's structured-output backend (xgrammar by default) fills, on the host, one bitmask row per
structured request and per draft token: 32 tokens a 32-bit word, a set bit allowing the token.
vLLM's runner hands them to xgrammar's kernels, which pick Triton on CUDA, a C++ loop on CPU and
``torch.compile`` with Inductor anywhere else; Inductor has no code generator for tpu. Here the
rows are put in the batch's order on the host, padded with all-ones rows to the logits' padded
row count (requests without a grammar and padding rows allow every token), uploaded whole, and
unpacked and applied with tensor ops on the device: one executable per row bucket, whatever the
mix of structured and free requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

BITS_PER_WORD = 32


def batch_ordered_bitmask(
    grammar_bitmask: np.ndarray,
    structured_request_ids: list[str],
    batch_request_ids: list[str],
    scheduled_spec_tokens: dict[str, list[int]],
    rows: int,
) -> np.ndarray:
    """The bitmask rows in the order of the logits rows: each request has one row, then one per
    draft token scheduled for it. `grammar_bitmask` holds the structured requests' rows, in
    `structured_request_ids`' order with the same draft rows; every other row allows all."""
    ordered = np.full((rows, grammar_bitmask.shape[1]), -1, dtype=grammar_bitmask.dtype)
    first_logits_row: dict[str, int] = {}
    row = 0
    for req_id in batch_request_ids:
        first_logits_row[req_id] = row
        row += 1 + len(scheduled_spec_tokens.get(req_id, ()))
    source = 0
    for req_id in structured_request_ids:
        count = 1 + len(scheduled_spec_tokens.get(req_id, ()))
        target = first_logits_row.get(req_id)
        if target is not None:  # a request that left the batch keeps its place in the mask
            ordered[target : target + count] = grammar_bitmask[source : source + count]
        source += count
    return ordered


def allowed_tokens(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[rows, vocab_size] booleans from [rows, words] packed int32 words (bit b of word w is
    token 32 * w + b); tokens past the mask's words are allowed."""
    shifts = torch.arange(BITS_PER_WORD, device=bitmask.device, dtype=bitmask.dtype)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    allowed = bits.reshape(bitmask.shape[0], -1).bool()
    covered = allowed.shape[1]
    if covered >= vocab_size:
        return allowed[:, :vocab_size]
    rest = torch.ones(
        bitmask.shape[0], vocab_size - covered, dtype=torch.bool, device=bitmask.device
    )
    return torch.cat([allowed, rest], dim=1)


def apply_grammar_bitmask(
    scheduler_output: Any, grammar_output: Any, batch_request_ids: list[str], logits: torch.Tensor
) -> None:
    """Sets the logits of the tokens each structured request's grammar forbids to -inf, in
    place (what vLLM's ``apply_grammar_bitmask`` does through xgrammar's kernels)."""
    ordered = batch_ordered_bitmask(
        grammar_output.grammar_bitmask,
        list(grammar_output.structured_output_request_ids),
        batch_request_ids,
        scheduler_output.scheduled_spec_decode_tokens,
        logits.shape[0],
    )
    bitmask = torch.from_numpy(ordered).to(logits.device)
    allowed = allowed_tokens(bitmask, logits.shape[-1])
    logits.masked_fill_(~allowed, float("-inf"))
