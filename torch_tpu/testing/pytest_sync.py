"""A pytest plugin (``-p torch_tpu.testing.pytest_sync``): a sync point after every test, so
that an error the device finds asynchronously (an index out of range, reported at the next
sync as CUDA's device asserts are) fails the test that caused it, not whichever test happens
to sync next."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    import torch

    if hasattr(torch, "tpu") and torch.tpu.is_available():
        torch.tpu.synchronize()
