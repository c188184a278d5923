"""A step's inputs prepared on the host and uploaded whole.

vLLM's GPU runner copies the scheduler's numbers to the device and derives positions, sequence
lengths and KV-cache slots there, on slices as long as the step's request and token counts. On
tpu those slices would make one executable per (requests, tokens) pair, compiled whenever
traffic makes a new pair. Every input here derives from host data the runner already holds, so
it is computed with numpy and each device buffer is replaced by a whole-buffer upload: a step
costs a few host-to-device copies and no compile, whatever its counts.

Covers the runner's plain decoder path (no speculative decoding, M-RoPE, prompt embeddings,
LoRA, asynchronous scheduling, context parallelism or recurrent-state layers); :func:`applies`
says when.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from torch_tpu.vllm.padding import padded_count


class HostStaging:
    """Host copies of the runner's device-only step buffers, uploaded whole each step."""

    def __init__(self, runner: Any) -> None:
        self.positions = torch.zeros_like(runner.positions, device="cpu")
        self.seq_lens = torch.zeros_like(runner.seq_lens, device="cpu")
        self.num_computed_tokens = torch.zeros_like(runner.num_computed_tokens, device="cpu")
        self.is_padding = torch.zeros_like(runner.is_padding, device="cpu")


def applies(runner: Any) -> bool:
    """Whether the step uses only what :func:`prepare` computes."""
    tables = runner.input_batch.block_table.block_tables
    return not (
        runner.speculative_config is not None
        or runner.uses_mrope
        or runner.enable_prompt_embeds
        or runner.lora_config
        or runner.input_batch.prev_sampled_token_ids is not None
        or any(t.dcp_world_size * t.pcp_world_size != 1 for t in tables)
        # Recurrent-state (Mamba) groups keep state indices, not slots.
        or any(t.slot_mapping_mode.name == "NONE" for t in tables)
    )


def prepare(
    runner: Any, staging: HostStaging, total_tokens: int, scheduled: np.ndarray
) -> torch.Tensor:
    """Fills and uploads the step's input ids, positions, query starts, sequence lengths,
    block tables and slot mappings, as vLLM's ``_prepare_inputs`` does on the device. Returns
    the hidden-state row of each request's last token, padded with row 0 to a bucket of the
    request count (logits and sampling are then compiled per bucket, not per count)."""
    batch = runner.input_batch
    num_reqs = batch.num_reqs
    request_of_token = np.repeat(runner.arange_np[:num_reqs], scheduled)
    ends = runner._get_cumsum_and_arange(scheduled, runner.query_pos.np)
    positions = batch.num_computed_tokens_cpu[request_of_token] + runner.query_pos.np[:total_tokens]

    token_indices = positions + request_of_token * batch.token_ids_cpu.shape[1]
    torch.index_select(
        batch.token_ids_cpu_tensor.flatten(),
        0,
        torch.from_numpy(token_indices),
        out=runner.input_ids.cpu[:total_tokens],
    )
    runner.input_ids.copy_to_gpu()

    starts = runner.query_start_loc.np
    starts[0] = 0
    starts[1 : num_reqs + 1] = ends
    starts[num_reqs + 1 :] = ends[-1]  # non-decreasing past the batch, as vLLM keeps it
    runner.query_start_loc.copy_to_gpu()

    computed = batch.num_computed_tokens_cpu_tensor[:num_reqs]
    seq_lens = runner.optimistic_seq_lens_cpu
    torch.add(computed, torch.from_numpy(scheduled), out=seq_lens[:num_reqs])
    seq_lens[num_reqs:] = 0
    runner._compute_prev_positions(num_reqs)
    known_tokens = np.array([runner.requests[r].num_tokens for r in batch.req_ids], np.int32)
    # A chunk of a prompt samples a token that is thrown away.
    runner.discard_request_mask.np[:num_reqs] = seq_lens[:num_reqs].numpy() < known_tokens
    runner.discard_request_mask.copy_to_gpu()
    # (num_accepted_tokens stays all ones, as the runner filled it: only speculative decoding
    # and recurrent-state models change it, and neither takes this path.)

    _upload(runner.seq_lens, staging.seq_lens, seq_lens)
    _upload(
        runner.num_computed_tokens,
        staging.num_computed_tokens,
        batch.num_computed_tokens_cpu_tensor,
    )
    staging.positions[:total_tokens] = torch.from_numpy(positions)
    staging.positions[total_tokens:] = 0
    runner.positions.copy_(staging.positions)

    for table in batch.block_table.block_tables:
        table.block_table.copy_to_gpu()
        _slot_mapping(table, request_of_token, positions)

    last_rows = np.zeros(padded_count(num_reqs, runner.max_num_reqs), np.int64)
    last_rows[:num_reqs] = ends - 1
    return torch.from_numpy(last_rows).to(runner.device)


def padding_mask(runner: Any, staging: HostStaging, tokens: int, padded: int) -> torch.Tensor:
    """vLLM's mask of the step's padding tokens, set on the host and uploaded whole."""
    staging.is_padding[:tokens] = False
    staging.is_padding[tokens:] = True
    runner.is_padding.copy_(staging.is_padding)
    return runner.is_padding[:padded]


def _upload(device: torch.Tensor, staging: torch.Tensor, values: torch.Tensor) -> None:
    count = min(len(staging), len(values))
    staging[:count] = values[:count]
    staging[count:] = 0
    device.copy_(staging)


def _slot_mapping(table: Any, request_of_token: np.ndarray, positions: np.ndarray) -> None:
    """Each token's KV-cache slot: its request's block for the position, times the block
    size, plus the offset in the block; -1 past the step's tokens."""
    size = table.block_size
    blocks = table.block_table.np[request_of_token, positions // size].astype(np.int64)
    slots = table.slot_mapping.np
    slots[: len(positions)] = blocks * size + positions % size
    slots[len(positions) :] = -1
    table.slot_mapping.copy_to_gpu()
