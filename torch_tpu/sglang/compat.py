"""What SGLang 0.5.23 needs on ``tpu`` beyond its platform interface, in one place.

- **Server defaults** (``apply_server_args_defaults``, called through the platform hook): where
  the device's memory is the host's RAM (the CPU plugin), SGLang's ``mem_fraction_static``
  would size the KV pool from nearly all free RAM; the pool is capped instead with SGLang's own
  ``max_total_tokens`` at torch_tpu.kv_budget's budget (min(4 GiB, a quarter of the memory
  available), or ``TORCH_TPU_KV_CACHE_GIB``) unless the user set ``max_total_tokens`` or
  ``mem_fraction_static``. The attention backend defaults to SGLang's ``torch_native``.
- **A KV pool of whole tensors** (``TpuMHATokenToKVPool``, through the platform's
  ``get_kv_pool_cls`` hook): SGLang carves each layer's K and V as the two halves of one
  allocation; on tpu a tensor that is part of its storage is read by gathering from the storage
  and written by scattering into it, so every attention read and KV write of a step cost a pass
  over the layer's whole pool (8 tokens took ~2 minutes with the 4 GiB default). The subclass
  allocates K and V of each layer as tensors of their own; the rest of the pool is SGLang's.
- **torchvision without its C++ ops:** ``sglang.srt.configs`` imports torchvision, whose PyPI
  wheels are CUDA builds; ``torch_tpu.integrations.torchvision`` (installed when torch loads
  torch_tpu) lets it import without them.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

from torch_tpu import kv_budget


def kv_bytes_per_token(model_path: str, dtype: torch.dtype) -> int:
    """Key and value bytes one token takes in every layer of a multi-head-attention model."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    text = getattr(config, "text_config", None) or config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * dtype.itemsize


def _model_dtype(server_args: Any) -> torch.dtype:
    if isinstance(server_args.dtype, str) and server_args.dtype not in ("auto", ""):
        return getattr(torch, server_args.dtype)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(server_args.model_path)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return dtype if isinstance(dtype, torch.dtype) else torch.bfloat16


class TpuMHATokenToKVPool(MHATokenToKVPool):
    """SGLang's multi-head-attention KV pool with each layer's K and V in storages of their own
    (see the module's docstring); other layouts are left to SGLang."""

    def _create_buffers_normal(self) -> None:
        if self.kv_cache_layout == "vectorized_5d":
            super()._create_buffers_normal()
            return
        k_shape, v_shape = self._kv_buffer_shapes()
        self.k_buffer = [self._zeros(k_shape) for _ in range(self.layer_num)]
        self.v_buffer = [self._zeros(v_shape) for _ in range(self.layer_num)]

    def _zeros(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.zeros(shape, dtype=self.store_dtype, device=self.device)


def apply_server_args_defaults(server_args: Any) -> None:
    if server_args.attention_backend is None:
        server_args.attention_backend = "torch_native"
    if server_args.max_total_tokens is not None or server_args.mem_fraction_static is not None:
        return
    device = torch.device("tpu", 0)
    if not kv_budget.memory_is_host(device):
        return
    budget = kv_budget.kv_cache_budget(
        device, explicit_bytes=None, fraction=0.0, fraction_is_explicit=False, peak=0
    )
    per_token = kv_bytes_per_token(server_args.model_path, _model_dtype(server_args))
    server_args.max_total_tokens = max(1, budget.bytes // per_token)
