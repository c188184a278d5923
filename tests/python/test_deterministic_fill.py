"""With deterministic algorithms on, memory handed out uninitialized reads as on CPU: NaN for
floating types, the largest value for integers (PyTorch's test_torch.py, issue 47). tpu used to
hand out zeros. Each case runs in Strict mode and in DeferAndFuse mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from conftest import TPU
from torch.testing._internal.common_utils import DeterministicGuard

import torch_tpu


@pytest.fixture(params=["strict", "defer_and_fuse"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.eager_mode(request.param):
        yield request.param


def grown(device: str, dtype: torch.dtype) -> torch.Tensor:
    """A tensor whose resize_ grows its storage: the old values stay, the new ones are filled."""
    t = torch.arange(24, device=device).to(dtype).reshape(2, 3, 4)
    return t.resize_(3, 4, 5)


MAKERS: dict[str, Callable[[str, torch.dtype], torch.Tensor]] = {
    "empty": lambda d, dt: torch.empty(10, 9, device=d, dtype=dt),
    "empty_like": lambda d, dt: torch.empty_like(torch.zeros(4, 5, device=d, dtype=dt)),
    "empty_strided": lambda d, dt: torch.empty_strided((10, 9), (1, 5), device=d, dtype=dt),
    "empty_permuted": lambda d, dt: torch.empty_permuted((2, 3, 5), (1, 0, 2), device=d, dtype=dt),
    "resize_": grown,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_uninitialized_memory_filled_as_on_cpu(mode: str, dtype: torch.dtype) -> None:
    for name, make in MAKERS.items():
        with DeterministicGuard(True):
            expected, actual = make("cpu", dtype), make(TPU, dtype).cpu()
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, name
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True, msg=name)


def test_fill_only_when_deterministic() -> None:
    # Off by default: empty stays a bare allocation, no execution is queued for it.
    before = torch_tpu.metrics()["executions"]
    torch.empty(64, device=TPU)
    assert torch_tpu.metrics()["executions"] == before
