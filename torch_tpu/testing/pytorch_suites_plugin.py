"""A pytest plugin for PyTorch's own test files on tpu (``-p
torch_tpu.testing.pytorch_suites_plugin``; tools/pytorch_suites.py passes it):

- a sync point after every test, so that an error the device finds asynchronously (an index
  out of range, reported at the next sync as CUDA's device asserts are) fails the test that
  caused it, not whichever test happens to sync next;
- ``largeTensorTest`` asks the device how much memory is free, as it asks CUDA's, instead of
  skipping every such test as an unknown device type.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch


def _has_sufficient_memory_on_tpu(original: Any) -> Any:
    def has_sufficient_memory(device: Any, size: int) -> bool:
        device = torch.device(device)
        if device.type != "tpu":
            return original(device, size)
        torch.tpu.synchronize()
        torch.tpu.empty_cache()
        return torch.tpu.mem_get_info(device.index or 0)[0] >= size

    return has_sufficient_memory


def pytest_configure(config: pytest.Config) -> None:
    from torch.testing._internal import common_device_type

    common_device_type._has_sufficient_memory = _has_sufficient_memory_on_tpu(
        common_device_type._has_sufficient_memory
    )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if hasattr(torch, "tpu") and torch.tpu.is_available():
        torch.tpu.synchronize()
