"""Copies between two tpu devices of one process (two CPU-plugin devices,
TORCH_TPU_CPU_DEVICE_COUNT=2): tpu:0 -> tpu:1 and back go device to device (no host round
trip) and equal the CPU's values, for dense and non-contiguous sources, strided and converting
destinations, in Strict and DeferAndFuse. Outside torchrun the indices are the plugin's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

TWO_DEVICES = textwrap.dedent(
    """
    import json, sys, torch, torch_tpu
    mode = sys.argv[1]
    torch_tpu.set_eager_mode(mode)
    assert torch.tpu.device_count() == 2 and torch.tpu.current_device() == 0
    assert torch.tpu._local_device_indices() == [0, 1]
    assert torch.accelerator.device_count() == 2

    def moved(host, src_device, dst_device, view):
        torch_tpu.reset_metrics()
        src = view(host.to(src_device))
        got = src.to(dst_device)
        counts = torch_tpu.metrics()
        assert got.device == torch.device(dst_device), got.device
        want = view(host)
        torch.testing.assert_close((got * 2).cpu(), want * 2)  # computes on dst_device
        return counts["device_copies"], counts["downloads"]

    host = torch.arange(48.0).reshape(6, 8)
    views = {
        "dense": lambda t: t,
        "transposed": lambda t: t.t(),
        "strided_slice": lambda t: t[1:5:2, ::3],
        "offset_row": lambda t: t[4],
    }
    rows = []
    for a, b in (("tpu:0", "tpu:1"), ("tpu:1", "tpu:0")):
        for name, view in views.items():
            copies, downloads = moved(host, a, b, view)
            rows.append({"from": a, "to": b, "view": name, "copies": copies,
                         "downloads": downloads})

    # copy_ into a strided view on the other device, converting dtype and broadcasting.
    dst = torch.zeros(4, 6, device="tpu:1")
    src = torch.arange(6, dtype=torch.int32, device="tpu:0")
    dst[1:3].copy_(src)
    want = torch.zeros(4, 6)
    want[1:3] = torch.arange(6.0)
    torch.testing.assert_close(dst.cpu(), want)
    # The copy keeps its own values when the source is written afterwards.
    x = torch.ones(5, device="tpu:0")
    y = x.to("tpu:1")
    x.add_(1)
    torch.testing.assert_close(y.cpu(), torch.ones(5))
    torch.testing.assert_close(x.cpu(), torch.full((5,), 2.0))
    # Autograd across the copy, as FSDP2's root pre-forward moves inputs.
    w = torch.randn(3, device="tpu:0", requires_grad=True)
    (w.to("tpu:1") * 3).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), torch.full((3,), 3.0))
    print(json.dumps(rows))
    """
)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_copy_between_two_tpu_devices_goes_device_to_device(mode: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env["TORCH_TPU_CPU_DEVICE_COUNT"] = "2"
    done = subprocess.run(
        [sys.executable, "-c", TWO_DEVICES, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(rows) == 8
    for row in rows:
        # One buffer moved by the plugin, nothing read back to the host on the way.
        assert row["copies"] == 1 and row["downloads"] == 0, row
