"""Hugging Face accelerate on ``tpu``: its device choice and ``device_map="auto"``.

accelerate enumerates accelerators by name (cuda, xpu, npu, ...) and knows no out-of-tree
device, so without this a plain ``Trainer(...)`` trains on the CPU and ``device_map="auto"``
sees no device memory. When ``tpu`` is the current accelerator and accelerate found nothing
else, its default device becomes ``tpu`` and its memory budget lists the tpu devices (as
integers, the form accelerate uses for accelerator indices; torch reads an integer device as
the current accelerator's). ``ACCELERATE_TORCH_DEVICE`` and ``use_cpu`` still win.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from . import after_import

logger = logging.getLogger(__name__)


def _tpu_is_the_accelerator() -> bool:
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "tpu"


def _tpu_index(key: Any) -> Any:
    """A max_memory key naming a tpu device ("tpu", "tpu:1", torch.device) as its index."""
    if isinstance(key, torch.device) or (isinstance(key, str) and key.split(":")[0] == "tpu"):
        device = torch.device(key)
        if device.type == "tpu":
            return torch.tpu.current_device() if device.index is None else device.index
    return key


def _tpu_max_memory(
    max_memory: dict[int | str, int | str] | None, to_bytes: Callable[[str], int]
) -> dict[int | str, int]:
    import psutil

    if max_memory is None:
        budget: dict[int | str, int] = {
            index: torch.tpu.mem_get_info(index)[0] for index in torch.tpu._local_device_indices()
        }
        budget["cpu"] = psutil.virtual_memory().available
        return budget
    budget = {}
    for key, size in max_memory.items():
        if isinstance(size, str):  # converted in the caller's dict too, as accelerate does
            max_memory[key] = size = to_bytes(size)
        budget[_tpu_index(key)] = int(size)
    devices = sorted(key for key in budget if isinstance(key, int))
    for index in devices:
        if not 0 <= index < torch.tpu.device_count():
            logger.warning(
                "max_memory names tpu:%d, but there are %d tpu devices",
                index,
                torch.tpu.device_count(),
            )
    others = [key for key in ("cpu", "disk") if key in budget]
    unknown = [key for key in budget if key not in devices and key not in others]
    if unknown:
        raise ValueError(
            f"max_memory names device(s) {unknown} that are not tpu devices, 'cpu' or 'disk'"
        )
    return {key: budget[key] for key in devices + others}


def _patch_modeling(modeling: ModuleType) -> None:
    original = modeling.get_max_memory
    if getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def get_max_memory(max_memory: dict[int | str, int | str] | None = None) -> dict:
        if not _tpu_is_the_accelerator():
            return original(max_memory)
        return _tpu_max_memory(max_memory, modeling.convert_file_size_to_int)

    get_max_memory._torch_tpu = True  # type: ignore[attr-defined]
    modeling.get_max_memory = get_max_memory


def _patch_state(state: ModuleType) -> None:
    partial_state = state.PartialState
    original = partial_state.default_device
    if getattr(original.fget, "_torch_tpu", False):
        return

    def default_device(self: Any) -> torch.device:
        device = original.fget(self)
        if device.type == "cpu" and _tpu_is_the_accelerator():
            return torch.device("tpu", torch.tpu.current_device())
        return device

    default_device._torch_tpu = True  # type: ignore[attr-defined]
    default_device.__doc__ = original.__doc__
    partial_state.default_device = property(default_device)


def install() -> None:
    after_import("accelerate.utils.modeling", _patch_modeling)
    after_import("accelerate.state", _patch_state)
