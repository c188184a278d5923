"""``torch.tpu.FloatStorage`` and its siblings: the legacy typed-storage classes torch looks up
on a device's module (``tensor.storage_type()``, ``isinstance(t.storage(), ...)``), as
``torch.cuda`` defines them. Without them ``storage_type()`` of a tpu tensor returned None."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch.storage import _LegacyStorage, _warn_typed_storage_removal


class _TpuLegacyStorage(_LegacyStorage):
    """What a device storage cannot do: be made from a host buffer or shared by file name."""

    @classmethod
    def from_buffer(cls, *args: Any, **kwargs: Any) -> Any:
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for tpu storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("_new_with_weak_ptr: Not available for tpu storage")

    @classmethod
    def _new_shared_filename(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("_new_shared_filename: Not available for tpu storage")


def _storage_class(name: str, dtype: torch.dtype, module: str) -> type:
    class Storage(_TpuLegacyStorage):
        @torch._utils.classproperty
        def dtype(self) -> torch.dtype:
            _warn_typed_storage_removal()
            return self._dtype

        @torch._utils.classproperty
        def _dtype(self) -> torch.dtype:
            return dtype

    Storage.__name__ = Storage.__qualname__ = name
    # torch reads the device of a legacy class from its module's last name.
    Storage.__module__ = module
    return Storage


def install(device_module: ModuleType, module: str = "torch.tpu") -> None:
    """Adds one class per dtype torch names a legacy storage for to `device_module`."""
    for dtype, name in torch.storage._dtype_to_storage_type_map().items():
        setattr(device_module, name, _storage_class(name, dtype, module))
