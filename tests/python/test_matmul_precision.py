"""float32 matrix products at torch's matmul precision (torch.set_float32_matmul_precision).

The XLA CUDA plugin and libtpu compute float32 products in reduced precision unless told
otherwise (TF32, bf16 passes): each product says the precision torch asks for. The CPU plugin
computes exactly either way, so the modules are checked here; the H200 run
(scripts/device_check.sh, bench/peers.py) checks the values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

import torch_tpu


@pytest.fixture
def restore_precision() -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def test_changing_the_precision_recompiles_and_changing_back_hits(
    tpu: torch.device, restore_precision: None
) -> None:
    a = torch.randn(5, 7)
    b = torch.randn(7, 3)
    x, y = a.to(tpu), b.to(tpu)
    torch.testing.assert_close((x @ y).cpu(), a @ b)  # compiled at "highest"
    torch_tpu.reset_metrics()
    torch.set_float32_matmul_precision("high")
    torch.testing.assert_close((x @ y).cpu(), a @ b)
    assert torch_tpu.metrics()["cache_misses"] >= 1  # another executable, not the exact one
    torch.set_float32_matmul_precision("highest")
    torch_tpu.reset_metrics()
    torch.testing.assert_close((x @ y).cpu(), a @ b)
    assert torch_tpu.metrics()["cache_misses"] == 0


MODULES = """
import torch, torch_tpu
x = torch.ones(4, 4, device="tpu")
for precision in ("highest", "high", "medium"):
    torch.set_float32_matmul_precision(precision)
    (x @ x).cpu()
    (x.double() @ x.double()).cpu()
    torch.nn.functional.conv2d(x[None, None], x[None, None, :2, :2]).cpu()
torch.set_float32_matmul_precision("highest")
(x.bfloat16() @ x.bfloat16()).cpu()
"""


def test_products_and_convolutions_say_the_precision_torch_asks_for() -> None:
    env = {**os.environ, "TORCH_TPU_DUMP_HLO": "1", "TORCH_TPU_CACHE_EAGER": "0"}
    env.pop("TPU_DEFER_AND_FUSE", None)
    run = subprocess.run(
        [sys.executable, "-c", MODULES], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = [
        line
        for line in run.stderr.splitlines()
        if '"stablehlo.dot_general"' in line or '"stablehlo.convolution"' in line
    ]
    highest = "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"
    high = "precision_config = [#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]"
    # Per precision: the f32 product, the f64 product, the f32 convolution; then bf16.
    assert len(lines) == 10, "\n".join(lines)
    assert all(highest in line for line in lines[0:3])
    assert all(high in line for line in lines[3:6])
    assert not any("precision_config" in line for line in lines[6:9])  # medium: the default
    assert "bf16" in lines[9] and "precision_config" not in lines[9]
