"""SGLang's ``SRTPlatform`` for the ``tpu`` device (PrivateUse1).

SGLang 0.5.23 asks an out-of-tree platform for its device identity, memory figures, distributed
backend and subsystem choices; every layer then runs its PyTorch implementation
(``forward_native``, the dispatch key this platform names) and attention runs SGLang's
``torch_native`` backend (scaled-dot-product attention over the token-to-KV pool).
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform

import torch_tpu.distributed

ATTENTION_BACKEND = "torch_native"


class TpuSRTPlatform(SRTPlatform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    # No Triton kernels, CUDA graphs or piecewise Inductor graphs on tpu: SGLang takes its
    # torch-native allocator, req-to-token writers and eager decode.
    capabilities = PlatformCapabilities()

    # ---- device identity and memory ----

    def get_device(self, device_id: int = 0) -> Any:
        return torch.device("tpu", device_id)

    def set_device(self, device: torch.device) -> None:
        torch.tpu.set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    def get_device_uuid(self, device_id: int = 0) -> str:
        props = torch.tpu.get_device_properties(device_id)
        return f"{props.platform_name}:{device_id}"

    def get_device_capability(self, device_id: int = 0) -> None:
        return None

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return int(torch.tpu.mem_get_info(device_id)[1])

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        free, total = torch.tpu.mem_get_info(device_id)
        return int(free), int(total)

    def get_current_memory_usage(self, device: Any = None) -> float:
        return float(torch.tpu.max_memory_allocated(device))

    def empty_cache(self) -> None:
        torch.tpu.empty_cache()

    def synchronize(self) -> None:
        torch.tpu.synchronize()

    def is_pin_memory_available(self, device: Any = None) -> bool:
        return False

    # ---- subsystems ----

    def get_default_attention_backend(self) -> str:
        return ATTENTION_BACKEND

    def get_kv_pool_cls(self, *, kind: str) -> type | None:
        if kind != "mha":
            return None
        from torch_tpu.sglang.compat import TpuMHATokenToKVPool

        return TpuMHATokenToKVPool

    def get_torch_distributed_backend_str(self) -> str:
        return torch_tpu.distributed.BACKEND_NAME

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        return torch.device("tpu", local_rank)

    def get_dispatch_key_name(self) -> str:
        return "native"

    def get_compile_backend(self, mode: str | None = None) -> str:
        return "tpu"

    def post_load_model(self, model: torch.nn.Module) -> None:
        elsewhere = {t.device for t in [*model.parameters(), *model.buffers()]} - {
            torch.device("tpu", torch.tpu.current_device())
        }
        if elsewhere:
            raise RuntimeError(f"SGLang loaded model tensors on {elsewhere}, not on tpu")

    def apply_server_args_defaults(self, server_args: Any) -> None:
        from torch_tpu.sglang import compat

        compat.apply_server_args_defaults(server_args)
