"""Bounded executable caches (the least recently used executables are dropped and destroyed
once idle, so a long process never runs out of JIT code mappings) and copy_ by buffer sharing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

import torch_tpu

PROGRAM = """
import json, sys, torch, torch_tpu
from torch_tpu import _C
torch_tpu.set_eager_mode(sys.argv[1])
worst = 0.0
sizes = []
for n in list(range(1, 61)) + list(range(1, 11)):  # the first sizes again, after eviction
    x = torch.linspace(-2, 2, n)
    got = ((x.to("tpu") * 3 + 1).tanh() - x.to("tpu")).cpu()
    worst = max(worst, (got - ((x * 3 + 1).tanh() - x)).abs().max().item())
    sizes.append(_C._cache_size())
print(json.dumps({"worst": worst, "max_cache": max(sizes), "metrics": torch_tpu.metrics()}))
"""


def run(mode: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_small_cache_limits_evict_and_stay_correct() -> None:
    for mode in ("strict", "defer_and_fuse"):
        # Every size its own executables (size buckets would share them), to evict them.
        proc = run(
            mode,
            TORCH_TPU_MAX_CACHED_OPS="16",
            TORCH_TPU_MAX_CACHED_GRAPHS="8",
            TORCH_TPU_SIZE_BUCKETS="0",
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["worst"] < 1e-5, result
        assert result["max_cache"] <= 16, result
        # The revisited sizes had been evicted, so their executables were compiled again or
        # loaded back from the persistent cache.
        per_size = 1 if mode == "defer_and_fuse" else 4  # mul, add, tanh, sub
        metrics = result["metrics"]
        assert metrics["compiles"] + metrics["disk_cache_hits"] >= 70 * per_size, result


def test_a_process_near_its_mapping_limit_evicts_past_the_size_limits() -> None:
    # Executables of some ops hold three times the JIT mappings of others: 4,000 index_reduce
    # executables reached vm.max_map_count within the size limits, and the process crashed.
    # Past TORCH_TPU_MAX_MAPPINGS (here: at once) each insert evicts the oldest entry.
    for mode in ("strict", "defer_and_fuse"):
        proc = run(mode, TORCH_TPU_MAX_MAPPINGS="1")
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["worst"] < 1e-5, result
        if mode == "strict":
            assert result["max_cache"] <= 2, result


def test_invalid_cache_limit_is_a_clear_error() -> None:
    proc = run("strict", TORCH_TPU_MAX_CACHED_OPS="many")
    assert proc.returncode != 0
    assert "TORCH_TPU_MAX_CACHED_OPS must be a positive integer" in proc.stderr


def test_whole_tensor_copy_shares_the_buffer_without_running_anything() -> None:
    src_cpu = torch.randn(64, 32)
    src = src_cpu.to("tpu")
    dst = torch.zeros(64, 32, device="tpu")
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["executions"]
    dst.copy_(src)
    assert torch_tpu.metrics()["executions"] == before
    # Writes to either side after the copy leave the other alone.
    src.add_(1.0)
    dst.mul_(2.0)
    torch.testing.assert_close(src.cpu(), src_cpu + 1.0)
    torch.testing.assert_close(dst.cpu(), src_cpu * 2.0)


def test_partial_and_converting_copies_still_run_kernels() -> None:
    src = torch.arange(12.0).reshape(3, 4)
    dst = torch.zeros(3, 4, dtype=torch.float64, device="tpu")
    dst.copy_(src.to("tpu"))
    torch.testing.assert_close(dst.cpu(), src.double())
    rows = torch.zeros(6, 4, device="tpu")
    rows[1:4].copy_(src.to("tpu"))
    expected = torch.zeros(6, 4)
    expected[1:4] = src
    torch.testing.assert_close(rows.cpu(), expected)


def test_views_at_different_offsets_share_one_executable() -> None:
    # A view's storage offset is a runtime input: reading x[i], x[:, i] or x[i:i+3] for every
    # i, and writing through such views, compiles once per shape, not once per position.
    x_cpu = torch.randn(64, 8)
    x = x_cpu.to("tpu")
    out = torch.zeros(64, 8, device="tpu")
    expected = torch.zeros(64, 8)

    def step(i: int) -> None:
        out[i].copy_(torch.exp(x[i]) + x[:, i % 8].sum())
        expected[i].copy_(torch.exp(x_cpu[i]) + x_cpu[:, i % 8].sum())
        out[i : i + 1].mul_(x[i : i + 1])
        expected[i : i + 1].mul_(x_cpu[i : i + 1])

    for i in range(2):  # compiles every op once
        step(i)
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["compiles"]
    for i in range(2, 64):
        step(i)
    torch.testing.assert_close(out.cpu(), expected)
    # Strict compiles nothing more; DeferAndFuse compiles the fused graphs its loop cuts (a
    # step, and the tail before the sync), once each. Per position it would be 62 or more.
    assert torch_tpu.metrics()["compiles"] - before <= 2


def test_out_variants_that_resize_cost_a_lookup_after_the_first_call() -> None:
    # torch.arange makes an empty out= tensor on every call; resizing it must not rebuild
    # the op each time (a decode loop calls it per token).
    def loop() -> None:
        for n in range(3):
            got = torch.arange(64, device="tpu") + n
            torch.testing.assert_close(got.cpu(), torch.arange(64) + n)

    loop()
    before = torch_tpu.metrics()
    loop()
    assert torch_tpu.metrics()["cache_misses"] == before["cache_misses"]
    out = torch.empty(0, device="tpu")  # resized by the call, as on CPU
    torch.cumsum(torch.ones(5, device="tpu"), 0, out=out)
    torch.testing.assert_close(out.cpu(), torch.arange(1.0, 6.0))
