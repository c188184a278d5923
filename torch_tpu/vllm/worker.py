"""vLLM's worker for ``tpu``: one process per device, running :class:`TpuModelRunner`."""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from vllm.config import set_current_vllm_config
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment

import torch_tpu
from torch_tpu.kv_budget import KvBudget, kv_cache_budget
from torch_tpu.vllm.model_runner import TpuModelRunner

# The eager mode the model runs in (TORCH_TPU_VLLM_EAGER_MODE overrides): DeferAndFuse gathers a
# step into two executables (the model's forward, then logits and sampling; see
# TpuModelRunner.load_model) after host-prepared inputs (host_inputs.py), each compiled once per
# padded shape (warm_up.py compiles them all at start) and replayed at every later step.
DEFAULT_EAGER_MODE = "defer_and_fuse"

# vLLM sets up handlers for its own loggers only: named under it, these messages show.
logger = init_logger(f"vllm.{__name__}")


def _default_memory_utilization() -> float:
    """vLLM's own default for gpu_memory_utilization: a value that differs was set by the user."""
    from vllm.config import CacheConfig

    return float(CacheConfig().gpu_memory_utilization)


def _kv_tensors(caches: Any) -> list[torch.Tensor]:
    if isinstance(caches, torch.Tensor):
        return [caches]
    if isinstance(caches, dict):
        caches = list(caches.values())
    return [t for item in caches for t in _kv_tensors(item)]


class TpuWorker(Worker):
    kv_budget: KvBudget | None = None

    def init_device(self) -> None:
        # vLLM numbers a worker's device by its local rank. A process that sees one device (the
        # CPU plugin's; a chip made the only visible one) drives that one, whatever its rank.
        index = 0 if torch.tpu.device_count() == 1 else self.local_rank
        self.device = torch.device("tpu", index)
        torch.tpu.set_device(self.device)
        torch_tpu.set_eager_mode(os.environ.get("TORCH_TPU_VLLM_EAGER_MODE", DEFAULT_EAGER_MODE))
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        gc.collect()
        torch.tpu.empty_cache()
        self._init_workspace_and_model_runner()

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager[Any]:
        # Sleep mode's tagged memory pools are CUDA/XPU allocators; tpu has none.
        return nullcontext()

    def _make_model_runner(self) -> TpuModelRunner:
        return TpuModelRunner(self.vllm_config, self.device)

    def determine_available_memory(self) -> int:
        """Bytes for the KV cache, after a profiling run at the largest batch (which also
        compiles that batch's executables): see torch_tpu.kv_budget. ``kv_cache_memory_bytes``
        when given, then TORCH_TPU_KV_CACHE_GIB, then ``gpu_memory_utilization`` of the device's
        memory less the run's peak; where the device's memory is the host's (the CPU plugin),
        vLLM's default utilization is not applied: the cache gets min(4 GiB, a quarter of the
        memory available), and an explicitly set utilization is honoured."""
        torch.tpu.reset_peak_memory_stats(self.device)
        with set_current_vllm_config(self.vllm_config):
            self.model_runner.profile_run()
        torch.tpu.synchronize(self.device)
        fraction = self.cache_config.gpu_memory_utilization
        self.kv_budget = kv_cache_budget(
            self.device,
            explicit_bytes=self.cache_config.kv_cache_memory_bytes,
            fraction=fraction,
            fraction_is_explicit=fraction != _default_memory_utilization(),
            peak=torch.tpu.max_memory_allocated(self.device),
        )
        logger.info(
            "KV cache gets %.2f GiB of %s memory (%s)",
            self.kv_budget.bytes / 2**30,
            "host" if self.kv_budget.host_memory else "tpu",
            self.kv_budget.source,
        )
        return self.kv_budget.bytes

    def kv_cache_report(self) -> dict[str, Any]:
        """The KV cache's budget (bytes, the setting that chose it, whether the device's memory
        is the host's) and the bytes its tensors hold: ``LLM.collective_rpc("kv_cache_report")``."""
        if self.kv_budget is None:
            raise RuntimeError("the KV cache is sized when the engine starts; it has not yet")
        storages = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for t in _kv_tensors(self.model_runner.kv_caches)
        }
        held = sum(storages.values())
        return {**dataclasses.asdict(self.kv_budget), "allocated": held}

    def compile_or_warm_up_model(self) -> Any:
        """Compiles every step shape traffic can make (warm_up.py) before the server takes
        requests; TORCH_TPU_VLLM_WARM_UP=0 leaves them to the first steps that need them.
        No CUDA graphs to capture; compiled executables persist in the compile cache, so a
        later start reads them back."""
        from vllm.v1.worker.worker_base import CompilationTimes

        seconds = 0.0
        if self.vllm_config.speculative_config is not None:
            # Speculative steps are prepared by vLLM's own code on the device (host_inputs.py
            # does not apply) and compile per step shape as traffic makes them; warming the
            # plain steps' buckets would compile executables such a server never runs.
            logger.info("warm-up skipped: speculative decoding compiles its steps as they come")
        elif os.environ.get("TORCH_TPU_VLLM_WARM_UP", "1") != "0":
            start = time.perf_counter()
            compiles = torch_tpu.metrics()["compiles"]
            with set_current_vllm_config(self.vllm_config):
                steps = self.model_runner.warm_up()
            seconds = time.perf_counter() - start
            logger.info(
                "warm-up: %d steps, %d compiles, %.1f s",
                steps,
                torch_tpu.metrics()["compiles"] - compiles,
                seconds,
            )
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=seconds, encoder=0.0)

    def torch_tpu_metrics(self) -> dict[str, int]:
        """torch_tpu's dispatcher counters in this worker (compiles, executions, host syncs):
        a server in dev mode (VLLM_SERVER_DEV_MODE=1) returns them from
        ``POST /collective_rpc {"method": "torch_tpu_metrics"}``."""
        return torch_tpu.metrics()

    def sleep(self, level: int = 1) -> None:
        raise NotImplementedError("sleep mode is not available on tpu")

    def wake_up(self, tags: list[str] | None = None) -> None:
        raise NotImplementedError("sleep mode is not available on tpu")
