"""The flight recorder's Python face (re-exported by ``torch_tpu.debug``).

torch_tpu keeps the last ``TORCH_TPU_FLIGHT_RECORDER`` (default 256; 0 turns it off) ops and
executions it dispatched in a ring. A fatal signal, an asynchronous device error, a failed index
check, a collective that fails or times out and a failed compile write the record to a file
under the cache folder (``<cache>/flight_records/``) and name it in the error.
``TORCH_TPU_FLIGHT_RECORDER_LINES=1`` also records the Python line that called each op.
"""

from __future__ import annotations

from typing import Literal, TypedDict

import torch


class FlightEntry(TypedDict):
    sequence: int  # 1, 2, ... in dispatch order
    time_ns: int  # system clock, since the epoch
    kind: Literal["op", "execution", "collective"]
    name: str  # "aten::mm", "fused graph of 3 ops: ...", "tpu_dist all_reduce"
    mode: Literal["strict", "debug", "defer_and_fuse"]
    device: int
    key: str | None  # the executable's cache key, hashed (hex); None for a collective
    shapes: list[list[int] | None]  # each tensor argument's sizes (None: too many to keep)
    dtypes: list[torch.dtype]
    more_tensors: bool  # the op had more tensor arguments than the 8 kept
    location: str | None  # "file.py:12" under TORCH_TPU_FLIGHT_RECORDER_LINES=1


def flight_record() -> list[FlightEntry]:
    """The entries the recorder still holds, oldest first (empty when it is off)."""
    from . import _C

    return list(_C._flight_record())


def dump_flight_record(reason: str = "asked for") -> str | None:
    """Writes the record to a new file, as an error would; returns its path (None when the
    recorder is off or the file could not be written)."""
    from . import _C

    return _C._dump_flight_record(reason) or None
