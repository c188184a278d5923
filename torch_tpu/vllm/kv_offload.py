"""The host-memory tier of vLLM's prefix cache on tpu (`--kv-offloading-size GiB`).

vLLM's OffloadingConnector keeps its scheduler side (which prefix blocks live in host memory,
LRU eviction, lookups) device-neutral; only the worker that moves blocks is CUDA's (raw-pointer
copy kernels on CUDA streams). This spec keeps vLLM's scheduler side and moves blocks with
tensor ops: a store gathers the blocks' pages on the device and downloads them, a load uploads
the pages and scatters them into the KV cache in place, so a prefix evicted from device memory
comes back from host memory instead of being recomputed. Transfers finish before `submit_*`
returns: the store must read the blocks before the scheduler reuses them, and the load must land
before the step that reads them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from vllm.v1.kv_offload.base import (
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

SPEC_NAME = "TpuHostOffloadingSpec"


def select_for_tpu(vllm_config: Any) -> None:
    """Points vLLM's native offloading (`--kv-offloading-size`, or an OffloadingConnector
    without a spec of its own) at this module's spec. Runs before vLLM fills the connector's
    config from `--kv-offloading-size`, which keeps the keys set here."""
    from vllm.config import KVTransferConfig

    transfer = vllm_config.kv_transfer_config
    native = (
        vllm_config.cache_config.kv_offloading_size is not None
        and vllm_config.cache_config.kv_offloading_backend == "native"
    )
    if transfer is None and native:
        transfer = vllm_config.kv_transfer_config = KVTransferConfig()
    if transfer is None or not (native or transfer.kv_connector == "OffloadingConnector"):
        return
    extra = transfer.kv_connector_extra_config
    if extra.get("spec_name", "CPUOffloadingSpec") == "CPUOffloadingSpec":
        extra.update({"spec_name": SPEC_NAME, "spec_module_path": __name__})


class TpuHostOffloadingSpec(CPUOffloadingSpec):
    """vLLM's CPU offloading spec (its chunk accounting and manager) with a tpu worker."""

    def _uses_shared_region(self) -> bool:
        return False  # a plain host tensor per KV tensor, no shared mmap region

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            self._worker = TpuHostOffloadingWorker(  # type: ignore[assignment]
                kv_caches, self.blocks_per_chunk, self.num_chunks
            )
        return self._worker  # type: ignore[return-value]


class TpuHostOffloadingWorker(OffloadingWorker):
    """Moves whole device blocks to and from host chunks (one block a chunk)."""

    def __init__(
        self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int, num_chunks: int
    ) -> None:
        if blocks_per_chunk != 1:
            raise NotImplementedError(
                "torch_tpu's KV offloading moves one device block per host chunk; leave the "
                f"offloaded block size at the KV cache's (got {blocks_per_chunk} blocks a chunk)"
            )
        if len(kv_caches.group_data_refs) != 1:
            raise NotImplementedError(
                "torch_tpu's KV offloading takes models with one KV cache group (got "
                f"{len(kv_caches.group_data_refs)}: sliding-window or hybrid layers)"
            )
        self.device = [entry.tensor for entry in kv_caches.tensors]
        self.host = [
            torch.empty((num_chunks, *t.shape[1:]), dtype=t.dtype, device="cpu")
            for t in self.device
        ]
        self.finished: list[TransferResult] = []

    def submit_store(
        self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec
    ) -> bool:
        start = time.perf_counter()
        blocks, chunks = self._pairs(src_spec, dst_spec)
        device_index = torch.from_numpy(blocks).to(self.device[0].device)
        size = 0
        for device, host in zip(self.device, self.host, strict=True):
            pages = device.index_select(0, device_index).cpu()
            host[torch.from_numpy(chunks)] = pages
            size += pages.numel() * pages.element_size()
        self._finish(job_id, size, start)
        return True

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec) -> bool:
        start = time.perf_counter()
        blocks, chunks = self._pairs(dst_spec, src_spec)
        device_index = torch.from_numpy(blocks).to(self.device[0].device)
        size = 0
        for device, host in zip(self.device, self.host, strict=True):
            pages = host[torch.from_numpy(chunks)]
            device.index_copy_(0, device_index, pages.to(device.device))
            size += pages.numel() * pages.element_size()
        self._finish(job_id, size, start)
        return True

    def get_finished(self) -> list[TransferResult]:
        finished, self.finished = self.finished, []
        return finished

    def wait(self, job_ids: set[int]) -> None:
        pass  # every transfer finished in its submit call

    def shutdown(self) -> None:
        self.host = []

    @staticmethod
    def _pairs(device_spec: Any, host_spec: Any) -> tuple[np.ndarray, np.ndarray]:
        blocks = np.asarray(device_spec.block_ids, dtype=np.int64)
        chunks = np.asarray(host_spec.block_ids, dtype=np.int64)
        if len(blocks) != len(chunks):
            raise ValueError(
                f"KV offloading: {len(blocks)} device blocks for {len(chunks)} host chunks"
            )
        return blocks, chunks

    def _finish(self, job_id: int, size: int, start: float) -> None:
        self.finished.append(
            TransferResult(
                job_id=job_id,
                success=True,
                transfer_size=size,
                transfer_time=time.perf_counter() - start,
            )
        )
