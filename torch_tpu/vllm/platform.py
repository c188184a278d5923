"""The vLLM ``Platform`` for the ``tpu`` device (PrivateUse1)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

import torch_tpu.distributed

if TYPE_CHECKING:
    from vllm.config import VllmConfig

# vLLM sets up handlers for its own loggers only: named under it, these messages show.
logger = init_logger(f"vllm.{__name__}")

ATTENTION_BACKEND = "torch_tpu.vllm.attention.TpuAttentionBackend"
WORKER = "torch_tpu.vllm.worker.TpuWorker"
COMPILER = "torch_tpu.vllm.compiler.TpuCompiler"


def compiled_mode() -> bool:
    """Whether the model runs under vLLM's compilation (TORCH_TPU_VLLM_COMPILE=1, compiler.py)
    rather than eagerly in DeferAndFuse."""
    return os.environ.get("TORCH_TPU_VLLM_COMPILE", "0") == "1"


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    # Ray schedules tpu workers on its TPU resource.
    ray_device_key: str = "TPU"
    device_control_env_var: str = "TPU_VISIBLE_CHIPS"
    # vLLM compiles small helpers with torch.compile: our Dynamo backend compiles for tpu.
    simple_compile_backend: str = "tpu"
    dist_backend: str = torch_tpu.distributed.BACKEND_NAME
    supported_quantization: list[str] = []

    @classmethod
    def import_kernels(cls) -> None:
        # vLLM's compiled ops (vllm._C) are CUDA/CPU builds; every layer this platform runs
        # has a PyTorch implementation, which vLLM's CustomOp picks for out-of-tree platforms.
        return

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from torch_tpu.vllm import kernels

        kernels.register()

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: Any,
        attn_selector_config: Any,
        num_heads: int | None = None,
    ) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise ValueError("the tpu platform has no MLA or sparse attention backend")
        if selected_backend is not None and selected_backend.name != "CUSTOM":
            logger.warning_once(
                "attention backend %s is not available on tpu; using torch_tpu's paged attention",
                selected_backend.name,
            )
        return ATTENTION_BACKEND

    @classmethod
    def get_compile_backend(cls) -> str:
        # vLLM's piecewise compilation hands each piece to this CompilerInterface.
        return COMPILER

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Compiled, attention is one custom op per layer (vllm::unified_attention_with_output),
        # which Dynamo traces around and vLLM's compilation splits the graph at: its metadata
        # lives in vLLM's forward context, outside the traced graph. Eager, a direct call.
        return compiled_mode()

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.get_device_properties(device_id).total_memory

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> None:
        # CUDA compute capabilities mean nothing here; None makes vLLM skip its checks.
        return None

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls) -> Any:
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def device_count(cls) -> int:
        return torch.tpu.device_count()

    @classmethod
    def get_current_memory_usage(cls, device: Any = None) -> float:
        torch.tpu.reset_peak_memory_stats(device)
        return float(torch.tpu.max_memory_allocated(device))

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        return False

    @classmethod
    def check_runner_kv_caches_multi_layer(cls) -> None:
        # A draft model's layers share layer indices with the target's. The runner's list of
        # caches in layer order is read here only for the cache's size report (worker.py);
        # attention reads each layer's own cache, bound by name.
        return

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        compilation = vllm_config.compilation_config
        if compiled_mode() and vllm_config.speculative_config is None:
            _compiled_config(vllm_config)
        else:
            # The runner executes the model eagerly in DeferAndFuse mode: a step's ops fuse
            # into a few executables, compiled per distinct padded shape and cached across
            # steps (see worker.py). vLLM's own graph capture (Dynamo + Inductor passes, CUDA
            # graphs) targets other devices.
            compilation.mode = CompilationMode.NONE
            compilation.cudagraph_mode = CUDAGraphMode.NONE
            if compilation.compile_sizes is None:
                compilation.compile_sizes = []
            if vllm_config.model_config is not None:
                vllm_config.model_config.enforce_eager = True
        # A step's inputs are prepared on the host from the tokens the previous step sampled
        # (host_inputs.py), so the scheduler waits for them; device work is asynchronous
        # behind PJRT's dispatch either way.
        vllm_config.scheduler_config.async_scheduling = False
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = WORKER
        # A stopping server lets the engine core finish and release the device (PJRT client,
        # compile cache writes) instead of killing it at once, vLLM's default. The engine
        # core's process took 4.9 s to end after its busy loop on the 2-core CPU-plugin machine
        # (native finalization: py-spy showed its main thread busy with no Python frame), so
        # 5 s was killing it under load.
        if vllm_config.shutdown_timeout == 0:
            vllm_config.shutdown_timeout = 20
        # The engine core starts its worker in a fresh process: forking a process whose PJRT
        # client has threads would copy them in a broken state.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        # The prefix cache's host-memory tier (--kv-offloading-size) moves blocks with tensor ops.
        from torch_tpu.vllm import kv_offload

        kv_offload.select_for_tpu(vllm_config)

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return (
            "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"
        )


def _compiled_config(vllm_config: VllmConfig) -> None:
    """vLLM's piecewise compilation with torch_tpu's compiler (compiler.py), no CUDA graphs:
    the pieces between attention ops replay fused executables, one per token bucket."""
    from vllm.config import CompilationMode, CUDAGraphMode

    compilation = vllm_config.compilation_config
    compilation.mode = CompilationMode.VLLM_COMPILE
    compilation.backend = COMPILER
    compilation.cudagraph_mode = CUDAGraphMode.NONE
    compilation.cudagraph_capture_sizes = []
    # One symbolic token count, compiled once as a graph; the runner pads counts to buckets
    # (padding.py) and each bucket is a signature of the pieces' replays.
    compilation.compile_sizes = []
    # Every attention op splits the graph: its metadata is read from vLLM's forward context,
    # which a recorded piece would freeze at the step it was recorded at.
    splitting = list(compilation.splitting_ops or [])
    compilation.splitting_ops = [
        *splitting,
        *(op for op in compilation._attention_ops if op not in splitting),
    ]
    # vLLM's fusion passes rewrite graphs for Inductor's CUDA and ROCm kernels; the pieces here
    # run through torch_tpu's own kernels and fusion.
    passes = compilation.pass_config
    for name in list(vars(passes)):
        if name.startswith("fuse_") or name == "enable_qk_norm_rope_fusion":
            setattr(passes, name, False)
    if vllm_config.model_config is not None:
        vllm_config.model_config.enforce_eager = False
    # vLLM's compile cache stores Inductor artifacts; the pieces' executables persist in
    # torch_tpu's own cache, and their replays are rebuilt at every start.
    os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
    os.environ.setdefault("VLLM_DISABLE_COMPILE_CACHE", "1")
