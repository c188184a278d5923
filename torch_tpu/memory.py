"""``torch.tpu.memory``: the memory API of ``torch.cuda.memory`` for tpu, including the
allocation history that PyTorch's memory visualizer (https://pytorch.org/memory_viz) reads.

    torch.tpu.memory._record_memory_history(max_entries=100000)
    train_step()
    torch.tpu.memory._dump_snapshot("snapshot.pickle")
    torch.tpu.memory._record_memory_history(enabled=None)

Each device storage is one block in a segment of its own: device memory belongs to the PJRT
plugin, not to a caching allocator, so the snapshot has no cached free space to show.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any, Literal

from . import _C
from .device_module import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)

__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
]


def _record_memory_history(
    enabled: Literal["state", "all"] | None = "all",
    context: Literal["state", "alloc", "all"] | None = "all",
    stacks: Literal["python", "all"] = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
) -> None:
    """Starts (``enabled="all"`` or ``"state"``) or stops (``None``) recording every device
    allocation and free, with the Python stack (``stacks="all"`` adds C++ frames) that made
    it; at most ``max_entries`` events are kept, the oldest dropped first."""
    del device  # every device records, as CUDA's does per process
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    with_stacks = context is not None
    _C._record_memory_history(
        enabled is not None, max_entries, with_stacks, with_stacks and stacks == "all"
    )


def _snapshot(device: Any = None) -> dict[str, Any]:
    """The live storages (``segments``) and the recorded events (``device_traces``, one list
    per device), laid out as ``torch.cuda.memory._snapshot()`` lays them out."""
    del device
    return _C._memory_snapshot(_C._device_count())


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles ``_snapshot()`` to ``filename`` for https://pytorch.org/memory_viz."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
