"""What torch.distributed and its frameworks ask of the device, checked directly (FSDP2 and DDP
use them in test_distributed_fsdp.py and test_distributed_training.py): the backend registered
for tpu and cpu, so init_process_group() with no name picks it; streams and events as
torch.Stream / torch.Event; storage resize (FSDP2's reshard); Ray Train's loader hook."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import torch
import torch.distributed as dist

import torch_tpu
from torch_tpu import _loader

NO_NAME_GROUP = textwrap.dedent(
    """
    import json, sys, torch, torch.distributed as dist
    dist.init_process_group(rank=0, world_size=1, store=dist.HashStore())
    group = dist.group.WORLD
    x = torch.arange(4.0, device="tpu")
    dist.all_reduce(x)
    objects = [None]
    dist.all_gather_object(objects, {"rank": 0})
    json.dump({
        "map": dict(dist.Backend.default_device_backend_map),
        "tpu_backend": group._get_backend(torch.device("tpu")).name(),
        "x": x.cpu().tolist(), "objects": objects,
    }, sys.stdout)
    """
)


def test_init_process_group_with_no_name_picks_tpu_dist_for_tpu() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_NAME_GROUP], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["map"]["tpu"] == "tpu_dist"
    assert got["tpu_backend"] == "tpu_dist"
    assert got["x"] == [0.0, 1.0, 2.0, 3.0]
    assert got["objects"] == [{"rank": 0}]


def test_streams_and_events_are_torch_streams_and_order_work(tpu: torch.device) -> None:
    side = torch.tpu.Stream()
    assert isinstance(side, torch.Stream) and isinstance(torch.tpu.Event(), torch.Event)
    assert isinstance(torch.tpu.current_stream(), torch.Stream)
    x = torch.ones(256, device=tpu)
    with torch.tpu.stream(side):
        assert torch.tpu.current_stream() == side
        y = x * 3
        done = side.record_event(torch.tpu.Event())
    assert torch.tpu.current_stream() != side
    torch.tpu.current_stream().wait_event(done)
    torch.tpu.current_stream().wait_stream(side)
    torch.testing.assert_close((y + 1).cpu(), torch.full((256,), 4.0))
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    (x @ x).item()
    end.record()
    assert start.elapsed_time(end) >= 0.0


def test_storage_resize_frees_and_regrows_as_fsdp2_reshards(tpu: torch.device) -> None:
    x = torch.arange(8.0, device=tpu)
    storage = x.untyped_storage()
    storage.resize_(0)
    assert storage.nbytes() == 0
    storage.resize_(8 * 4)
    assert storage.nbytes() == 32
    x.copy_(torch.arange(8.0, 16.0, device=tpu))
    torch.testing.assert_close(x.cpu(), torch.arange(8.0, 16.0))


def test_ray_train_loader_hook_leaves_tpu_dist_registered() -> None:
    _loader.load()
    _loader.load()  # idempotent
    assert torch_tpu._state["initialized"]
    assert "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
