"""PyTorch versions of the Triton kernels vLLM's model runner launches on its common path,
registered through vLLM's kernel-override hook (Platform.register_triton_kernel_overrides),
with speculative decoding's: the rejection sampler's (rejection_kernels.py) and the model-based
drafters' (draft_kernels.py)."""

from __future__ import annotations

import torch

# vLLM's name for the kernel each function replaces.
SLOT_MAPPING = "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"


def compute_slot_mapping(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_table_stride: int,
    slot_mapping: torch.Tensor,
    KV_CACHE_BLOCK_SIZE: int,  # noqa: N803 - the kernel's parameter names
    TOTAL_CP_WORLD_SIZE: int = 1,  # noqa: N803
    TOTAL_CP_RANK: int = 0,  # noqa: N803
    CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,  # noqa: N803
    PAD_ID: int = -1,  # noqa: N803
    BLOCK_SIZE: int = 1024,  # noqa: N803
) -> None:
    """Each scheduled token's KV cache slot: its request's block for the token's position,
    times the block size, plus the position within the block; PAD_ID past the tokens."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("context parallelism is not supported on tpu")
    token = torch.arange(num_tokens, device=positions.device, dtype=query_start_loc.dtype)
    request = torch.searchsorted(query_start_loc[1:], token, right=True)
    position = positions[:num_tokens].to(torch.int64)
    flat_index = request.to(torch.int64) * block_table_stride + position // KV_CACHE_BLOCK_SIZE
    block = block_table.reshape(-1)[flat_index].to(torch.int64)
    slot_mapping[:num_tokens] = block * KV_CACHE_BLOCK_SIZE + position % KV_CACHE_BLOCK_SIZE
    if max_num_tokens > num_tokens:
        slot_mapping[num_tokens:max_num_tokens] = PAD_ID


_registered = False


def register() -> None:
    """Installs the overrides, once a process: they replace module attributes, which stay
    replaced for every later engine (vLLM calls this at each engine's start, and its rescan of
    every module chokes on some that a first engine imports, numba's among them)."""
    global _registered
    if _registered:
        return
    from vllm.triton_utils.dispatcher import register_kernels

    from torch_tpu.vllm import draft_kernels, rejection_kernels

    register_kernels(
        {SLOT_MAPPING: compute_slot_mapping, **rejection_kernels.KERNELS, **draft_kernels.KERNELS}
    )
    _registered = True
