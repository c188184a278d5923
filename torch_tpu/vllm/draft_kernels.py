"""PyTorch versions of the Triton kernels of vLLM's model-based drafters (a draft model, EAGLE),
registered through vLLM's kernel-override hook like kernels.py's.

Each Triton kernel runs one program per request; here the requests are a dimension, and each
request's run of output slots is found by a search over the cumulative counts, so the work is
a few gathers and selects whatever the batch. The parameter names are the kernels' own: vLLM
forwards a launch's arguments to these by name.
"""

from __future__ import annotations

import torch

MODULE = "vllm.v1.spec_decode.utils"
STEP_SLOTS = f"{MODULE}.eagle_step_slot_mapping_metadata_kernel"
PREPARE_INPUTS = f"{MODULE}.eagle_prepare_inputs_padded_kernel"
NEXT_TOKEN = f"{MODULE}.eagle_prepare_next_token_padded_kernel"
COPY_AND_EXPAND = f"{MODULE}.copy_and_expand_eagle_inputs_kernel"


def eagle_step_slot_mapping_metadata_kernel(
    positions_ptr: torch.Tensor,
    block_table_ptr: torch.Tensor,
    block_table_stride: int,
    seq_lens_ptr: torch.Tensor,
    out_clamped_positions_ptr: torch.Tensor,
    out_slot_mapping_ptr: torch.Tensor,
    block_size: int,
    max_model_len: int,
    n_blocks_per_req: int,
    PAD_ID: int,  # noqa: N803 - the kernel's parameter names
    batch_size: int,
) -> None:
    """One drafting step: each request's position moves one on (to 0 past the model's
    length, where its slot is PAD_ID and its length restarts at 1), its KV slot follows from
    the block table, its sequence length grows by one; slots past the batch are PAD_ID."""
    position = positions_ptr[:batch_size].to(torch.int64) + 1
    exceeds = position >= max_model_len
    clamped = torch.where(exceeds, 0, position)
    block_number = (clamped // block_size).clamp(max=n_blocks_per_req - 1)
    rows = torch.arange(batch_size, device=position.device)
    flat_table = block_table_ptr.as_strided((block_table_ptr.shape[0] * block_table_stride,), (1,))
    block = flat_table[rows * block_table_stride + block_number].to(torch.int64)
    slots = torch.where(exceeds, PAD_ID, block * block_size + clamped % block_size)
    seq_lens = seq_lens_ptr[:batch_size]
    new_lens = torch.where(exceeds, 1, seq_lens + 1).clamp(max=max_model_len)
    out_clamped_positions_ptr[:batch_size] = clamped.to(out_clamped_positions_ptr.dtype)
    out_slot_mapping_ptr[:batch_size] = slots.to(out_slot_mapping_ptr.dtype)
    out_slot_mapping_ptr[batch_size:] = PAD_ID
    seq_lens_ptr[:batch_size] = new_lens.to(seq_lens_ptr.dtype)


def eagle_prepare_inputs_padded_kernel(
    cu_num_draft_tokens_ptr: torch.Tensor,
    valid_sampled_tokens_count_ptr: torch.Tensor,
    query_start_loc_gpu_ptr: torch.Tensor,
    token_indices_to_sample_ptr: torch.Tensor,
    num_rejected_tokens_gpu_ptr: torch.Tensor,
    num_reqs: int,
) -> None:
    """Per request: the drafts the target rejected (drafts + 1 - valid sampled tokens; none
    without drafts) and the row of its last accepted token, where drafting continues."""
    ends = cu_num_draft_tokens_ptr[:num_reqs].to(torch.int64)
    drafts = ends - torch.cat([ends.new_zeros(1), ends[:-1]])
    valid = valid_sampled_tokens_count_ptr[:num_reqs].to(torch.int64)
    rejected = torch.where(drafts > 0, drafts + 1 - valid, 0)
    last_row = query_start_loc_gpu_ptr[1 : num_reqs + 1].to(torch.int64) - 1
    token_indices_to_sample_ptr[:num_reqs] = (last_row - rejected).to(
        token_indices_to_sample_ptr.dtype
    )
    num_rejected_tokens_gpu_ptr[:num_reqs] = rejected.to(num_rejected_tokens_gpu_ptr.dtype)


def eagle_prepare_next_token_padded_kernel(
    sampled_token_ids_ptr: torch.Tensor,
    discard_request_mask_ptr: torch.Tensor,
    backup_next_token_ids_ptr: torch.Tensor,
    next_token_ids_ptr: torch.Tensor,
    valid_sampled_tokens_count_ptr: torch.Tensor,
    vocab_size: int,
    num_sampled_tokens_per_req: int,
    num_reqs: int,
    stride_sampled_token_ids: int,
    BLOCK_SIZE_TOKENS: int,  # noqa: N803 - the kernel's parameter names
) -> None:
    """Per request: how many sampled tokens are valid (not -1, inside the vocabulary) and the
    last valid one, drafting's next input; the backup token where none is valid or the
    request's step is discarded (count 0)."""
    sampled = sampled_token_ids_ptr[:num_reqs, :num_sampled_tokens_per_req].to(torch.int64)
    valid = (sampled != -1) & (sampled < vocab_size)
    count = valid.sum(dim=1)
    column = torch.arange(sampled.shape[1], device=sampled.device)[None, :]
    last = torch.where(valid, column, -1).amax(dim=1)
    last_token = sampled.gather(1, last.clamp(min=0)[:, None])[:, 0]
    discarded = discard_request_mask_ptr[:num_reqs].bool()
    backup = backup_next_token_ids_ptr[:num_reqs].to(torch.int64)
    next_token = torch.where(discarded | (count == 0), backup, last_token)
    count = torch.where(discarded, 0, count)
    next_token_ids_ptr[:num_reqs] = next_token.to(next_token_ids_ptr.dtype)
    valid_sampled_tokens_count_ptr[:num_reqs] = count.to(valid_sampled_tokens_count_ptr.dtype)


def copy_and_expand_eagle_inputs_kernel(
    target_token_ids_ptr: torch.Tensor,
    target_positions_ptr: torch.Tensor,
    next_token_ids_ptr: torch.Tensor,
    out_input_ids_ptr: torch.Tensor,
    out_positions_ptr: torch.Tensor,
    out_is_rejected_token_mask_ptr: torch.Tensor,
    out_is_masked_token_mask_ptr: torch.Tensor,
    out_new_token_indices_ptr: torch.Tensor,
    out_hidden_state_mapping_ptr: torch.Tensor,
    query_start_loc_ptr: torch.Tensor,
    query_end_loc_ptr: torch.Tensor,
    padding_token_id: int,
    parallel_drafting_token_id: int,
    total_input_tokens: int,
    num_padding_slots_per_request: int,
    shift_input_ids: bool,
    BLOCK_SIZE_TOKENS: int,  # noqa: N803 - the kernel's parameter names
) -> None:
    """The drafter's first-pass inputs. Request r's output slots, one run after another:
    its accepted target tokens (shifted by one when the drafter takes hidden states), the
    bonus (next) token, `num_padding_slots_per_request - 1` parallel-drafting slots, then its
    rejected tokens' slots (padding, masked out of the KV cache). Positions count on from the
    request's first input position."""
    pad = num_padding_slots_per_request
    requests = query_end_loc_ptr.shape[0]
    device = query_start_loc_ptr.device
    starts = query_start_loc_ptr[: requests + 1].to(torch.int64)
    query_start, next_start = starts[:-1], starts[1:]
    query_end = query_end_loc_ptr[:requests].to(torch.int64)
    shift = 1 if shift_input_ids else 0
    valid = query_end - query_start + 1 - shift
    rejected = next_start - query_end - 1
    slots = valid + pad + rejected
    index = torch.arange(requests, device=device)
    out_start = query_start + index * (pad - shift)
    total = total_input_tokens + requests * (pad - shift)

    out = torch.arange(total, device=device)
    request = torch.searchsorted(out_start + slots, out, right=True).clamp(max=requests - 1)
    j = out - out_start[request]
    valid_j = valid[request]
    is_bonus = j == valid_j
    is_parallel = (j > valid_j) & (j < valid_j + pad)
    is_rejected = j >= valid_j + pad
    source = (query_start[request] + shift + j).clamp(max=total_input_tokens - 1)
    tokens = target_token_ids_ptr[source].to(torch.int64)
    tokens = torch.where(is_bonus, next_token_ids_ptr[request].to(torch.int64), tokens)
    tokens = torch.where(is_parallel, parallel_drafting_token_id, tokens)
    tokens = torch.where(is_rejected, padding_token_id, tokens)
    first_position = target_positions_ptr[query_start].to(torch.int64)
    positions = torch.where(is_rejected, 0, first_position[request] + j)
    out_input_ids_ptr[:total] = tokens.to(out_input_ids_ptr.dtype)
    out_positions_ptr[:total] = positions.to(out_positions_ptr.dtype)
    out_is_rejected_token_mask_ptr[:total] = is_rejected
    out_is_masked_token_mask_ptr[:total] = is_parallel

    new_slot = torch.arange(pad, device=device)[None, :]
    new_indices = (out_start + valid)[:, None] + new_slot
    out_new_token_indices_ptr[: requests * pad] = new_indices.reshape(-1).to(
        out_new_token_indices_ptr.dtype
    )
    if shift_input_ids:
        # Hidden states are not shifted: input token t goes to its request's slot t - start.
        token = torch.arange(total_input_tokens, device=device)
        token_request = torch.searchsorted(next_start, token, right=True).clamp(max=requests - 1)
        mapping = out_start[token_request] + token - query_start[token_request]
        out_hidden_state_mapping_ptr[:total_input_tokens] = mapping.to(
            out_hidden_state_mapping_ptr.dtype
        )


KERNELS = {
    STEP_SLOTS: eagle_step_slot_mapping_metadata_kernel,
    PREPARE_INPUTS: eagle_prepare_inputs_padded_kernel,
    NEXT_TOKEN: eagle_prepare_next_token_padded_kernel,
    COPY_AND_EXPAND: copy_and_expand_eagle_inputs_kernel,
}
