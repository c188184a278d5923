"""torchrun worker: a job's PJRT client started across processes, as the XLA engine needs.

Run with TORCH_TPU_PJRT_PLUGIN pointing at the node shim test plugin (which wraps the CPU
plugin and, given node options, does a multi-node client's start-up exchange through the
key-value store) and TORCH_TPU_DIST_ENGINE=xla. Writes one JSON line per case to
$DIST_RESULTS.<rank>: {"case", "error"}."""

from __future__ import annotations

import datetime
import json
import os
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import torch_tpu
from torch_tpu.distributed import _multi_process


def shim_report(rank: int) -> dict[str, Any]:
    return json.loads(open(f"{os.environ['TORCH_TPU_SHIM_REPORT']}.{rank}").read())


def client_started_as_one_node(rank: int, world: int) -> None:
    report = shim_report(rank)
    assert report["node_id"] == rank and report["num_nodes"] == world, report
    assert report["has_store"], report
    # Every node's entry, put by each process through the store callbacks, read by this one.
    assert report["peers"] == [f"node {r}" for r in range(world)], report
    # A key nobody puts: the blocking get gives up with DEADLINE_EXCEEDED (4), the try-get
    # says NOT_FOUND (5) at once.
    assert report["missing_get"].startswith("error 4: "), report
    assert report["missing_try_get"] == "error 5", report
    assert report["visible_devices"] == [], report  # only the CUDA plugin is given one device
    assert torch_tpu._state["kind"] == "custom"
    assert (torch.ones(3, device="tpu") * 2).sum().item() == 6.0  # the wrapped client works


def key_value_between_processes(rank: int, world: int) -> None:
    store = torch_tpu._C._PjrtKeyValueStore(_multi_process.key_value_store())
    store.put(f"bytes/{rank}", bytes([0, rank, 255]) + b"tail")
    other = (rank + 1) % world
    assert store.get(f"bytes/{other}", 30000) == bytes([0, other, 255]) + b"tail"
    assert store.try_get(f"bytes/{rank}") == bytes([0, rank, 255]) + b"tail"
    assert store.try_get("never-put") is None


def xla_engine_needs_a_spanning_client(rank: int, world: int) -> None:
    # The shim's client is the CPU plugin's: each process knows only its own device 0.
    try:
        dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=60))
    except RuntimeError as error:
        text = str(error)
        assert "TORCH_TPU_DIST_ENGINE=xla needs a PJRT client that spans" in text, text
        assert "[(0, 0), (0, 0)]" in text and "TORCH_TPU_DIST_ENGINE=host" in text, text
    else:
        raise AssertionError("init_process_group took the xla engine over per-process clients")


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    results: list[dict[str, object]] = []

    def case(name: str, fn: Callable[[int, int], None]) -> None:
        try:
            fn(rank, world)
            results.append({"case": name, "error": None})
        except Exception:  # noqa: BLE001 - each case reports its own failure
            results.append({"case": name, "error": traceback.format_exc(limit=4)})

    case("client_started_as_one_node", client_started_as_one_node)
    case("key_value_between_processes", key_value_between_processes)
    case("xla_engine_needs_a_spanning_client", xla_engine_needs_a_spanning_client)
    with open(f"{os.environ['DIST_RESULTS']}.{rank}", "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
