"""How many bytes a serving engine's KV cache may take on a tpu device (vLLM and SGLang).

On a chip the KV cache takes a share of the device's own memory, as the engines do on GPUs.
Where the device's memory *is* the host's RAM (the XLA CPU plugin: its buffers are host
allocations and it reports no memory limit, so ``torch.tpu.mem_get_info`` is the host's
``MemAvailable``/``MemTotal``), an engine's GPU default (vLLM's ``gpu_memory_utilization``
0.92, SGLang's ``mem_fraction_static``) would hand nearly all of the machine's RAM to the cache
and the kernel's OOM killer would end the engine, or whatever else runs there. There the
default is a fixed budget, bounded by a share of the memory free when the engine starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

GiB = 1 << 30
# The KV cache's default on a host-memory device: vLLM's CPU backend took a fixed 4 GiB
# (VLLM_CPU_KVCACHE_SPACE's default) before it moved to a fraction of RAM ...
HOST_DEFAULT_BYTES = 4 * GiB
# ... but never more than this share of the memory available when the engine sizes its cache,
# so a small or busy machine keeps room for its other work.
HOST_AVAILABLE_SHARE = 0.25
# An explicit budget in GiB (a float), over any fraction: the variable an operator sets once for
# every engine on the machine.
ENV = "TORCH_TPU_KV_CACHE_GIB"


@dataclass(frozen=True)
class KvBudget:
    """The bytes chosen and why: ``source`` names the setting that decided them."""

    bytes: int
    source: str
    host_memory: bool
    free: int
    total: int


def memory_is_host(device: Any = None) -> bool:
    """True where the device's memory is the host's RAM: the plugin reports no memory limit
    (the CPU plugin), so ``mem_get_info`` falls back to the host's figures."""
    stats = torch.tpu.memory_stats(device)
    return int(stats.get("device.bytes_limit", 0)) <= 0


def _env_bytes() -> int | None:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    try:
        gib = float(text)
    except ValueError:
        raise ValueError(
            f"{ENV}={text!r}: expected the KV cache's size in GiB, e.g. 2 or 0.5"
        ) from None
    if gib <= 0:
        raise ValueError(f"{ENV}={text!r}: the KV cache's size must be positive")
    return int(gib * GiB)


def kv_cache_budget(
    device: Any,
    *,
    explicit_bytes: int | None,
    fraction: float,
    fraction_is_explicit: bool,
    peak: int,
) -> KvBudget:
    """The KV cache's bytes on ``device``, in this order of precedence:

    1. ``explicit_bytes`` (the engine's own byte setting, e.g. vLLM's ``kv_cache_memory_bytes``);
    2. ``TORCH_TPU_KV_CACHE_GIB``;
    3. ``fraction`` of the device's memory less ``peak`` (what the model and a profiling run
       took), on a chip always, on a host-memory device only when the user set it;
    4. on a host-memory device, ``min(4 GiB, 25% of the memory available now)``.

    On a host-memory device a budget larger than the memory available now is refused with a
    ValueError saying what to lower, instead of being left to the OOM killer.
    """
    free, total = torch.tpu.mem_get_info(device)
    host = memory_is_host(device)
    env = _env_bytes()
    if explicit_bytes:
        chosen, source = int(explicit_bytes), "kv_cache_memory_bytes"
    elif env is not None:
        chosen, source = env, ENV
    elif fraction_is_explicit or not host:
        chosen, source = int(total * fraction) - peak, f"memory fraction {fraction}"
        if chosen <= 0:
            raise ValueError(
                f"no device memory left for the KV cache: the model and profiling run peaked at "
                f"{peak} bytes of {total}; raise the memory fraction or set {ENV}"
            )
    else:
        chosen = min(HOST_DEFAULT_BYTES, int(free * HOST_AVAILABLE_SHARE))
        source = "host-memory default"
    if host and chosen > free:
        raise ValueError(
            f"the KV cache's {chosen / GiB:.2f} GiB ({source}) exceed the host memory available "
            f"now ({free / GiB:.2f} of {total / GiB:.2f} GiB; the device's memory is the host's "
            f"RAM): lower it, e.g. {ENV}=1"
        )
    return KvBudget(bytes=chosen, source=source, host_memory=host, free=free, total=total)
