"""A torchrun job's PJRT client, started across processes for tpu_dist's XLA engine.

On this machine no plugin spans processes (the CPU plugin refuses node options), so a test
plugin that wraps the CPU plugin plays one at client creation: two ranks under torchrun each
start their client with their node id and the node count, and exchange entries through the
key-value callbacks, which the c10d store torchrun runs serves. The XLA engine itself needs a
client that spans the processes: over per-process clients it is refused with a clear error.
Also: the engine and the client options each plugin gets, and the engine over a one-rank group
(its wiring: collectives run on the device, nothing through the host).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_workers.launch import assert_passed, by_case, once_per_run, torchrun

from torch_tpu import _plugin
from torch_tpu.distributed import _multi_process

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(os.environ.get("TORCH_TPU_BUILD_DIR", ROOT / "build")) / "node_shim_plugin.so"
CASES = [
    "client_started_as_one_node",
    "key_value_between_processes",
    "xla_engine_needs_a_spanning_client",
]


@pytest.fixture(scope="session")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    assert SHIM.exists(), f"{SHIM} is built with the extension (cmake --build build)"

    def launch() -> list[dict[str, dict[str, Any]]]:
        folder: Path = tmp_path_factory.mktemp("multi_process_client")
        env = {
            "TORCH_TPU_PJRT_PLUGIN": str(SHIM),
            "TORCH_TPU_SHIM_TARGET": str(_plugin.resolve("cpu")[1]),
            "TORCH_TPU_SHIM_REPORT": str(folder / "shim"),
            "TORCH_TPU_DIST_ENGINE": "xla",
        }
        return by_case(
            torchrun("multi_process_client_worker.py", folder / "results", timeout=180, env=env)
        )

    return once_per_run(tmp_path_factory, "multi_process_client", launch)


@pytest.mark.parametrize("case", CASES)
def test_multi_process_client(case: str, results: list[dict[str, dict[str, Any]]]) -> None:
    assert_passed(results, case)


TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}


@pytest.mark.parametrize(
    ("kind", "env", "engine", "options"),
    [
        ("cpu", TORCHRUN_ENV, "host", {}),
        ("cuda", TORCHRUN_ENV, "xla", {"node_id": 1, "num_nodes": 4, "visible_devices": [1]}),
        # libtpu finds its slice's processes itself.
        ("tpu", TORCHRUN_ENV, "xla", {}),
        ("custom", {**TORCHRUN_ENV, "TORCH_TPU_DIST_ENGINE": "xla"}, "xla",
         {"node_id": 1, "num_nodes": 4}),
        ("cuda", {**TORCHRUN_ENV, "TORCH_TPU_DIST_ENGINE": "host"}, "host", {}),
        ("cuda", {"RANK": "0", "WORLD_SIZE": "1"}, "xla", {}),  # one process: a plain client
    ],
)  # fmt: skip
def test_engine_and_client_options_per_plugin(
    kind: str, env: dict[str, str], engine: str, options: dict[str, Any]
) -> None:
    assert _multi_process.engine_for(kind, env) == engine
    assert _multi_process.client_options(kind, env) == options


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="TORCH_TPU_DIST_ENGINE='nccl'; expected 'host' or 'xla'"):
        _multi_process.engine_for("cpu", {"TORCH_TPU_DIST_ENGINE": "nccl"})


def test_xla_engine_without_a_rendezvous_address_says_what_is_missing() -> None:
    with pytest.raises(RuntimeError, match="MASTER_ADDR, MASTER_PORT is not set"):
        _multi_process.key_value_store({"RANK": "0", "WORLD_SIZE": "2"})


ONE_RANK = textwrap.dedent(
    """
    import json, sys, torch, torch_tpu, torch.distributed as dist
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    x = torch.arange(-3.0, 3.0, device="tpu").reshape(2, 3)
    before = torch_tpu.metrics()["downloads"]
    avg = x.clone(); dist.all_reduce(avg, op=dist.ReduceOp.AVG)
    pre = x.clone(); dist.all_reduce(pre, op=dist._make_nccl_premul_sum(3.0))
    flags = torch.tensor([True, False], device="tpu"); dist.all_reduce(flags)
    gathered = torch.empty(2, 3, device="tpu"); dist.all_gather_into_tensor(gathered, x)
    scattered = torch.empty(2, 3, device="tpu"); dist.reduce_scatter_tensor(scattered, x * 2)
    moved = torch.empty(2, 3, device="tpu"); dist.all_to_all_single(moved, x + 1)
    signed = torch.tensor([-0.0, 1.0], device="tpu"); dist.broadcast(signed, 0)
    work = dist.all_reduce(x.clone(), async_op=True)
    work.wait()
    # FSDP2's case: the gather's output is a buffer the input is a view of.
    buffer = torch.arange(4.0, device="tpu"); dist.all_gather_into_tensor(buffer, buffer[:4])
    downloads = torch_tpu.metrics()["downloads"] - before
    out = [avg, pre, flags, gathered, scattered, moved, signed, work.result()[0], buffer]
    json.dump({"downloads": downloads, "out": [t.cpu().tolist() for t in out],
               "signbit": bool(torch.signbit(signed[0]).item())}, sys.stdout)
    """
)


def test_xla_engine_over_one_rank_runs_on_the_device() -> None:
    env = {**os.environ, "TORCH_TPU_DIST_ENGINE": "xla"}
    done = subprocess.run(
        [sys.executable, "-c", ONE_RANK], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-4000:]
    import json

    got = json.loads(done.stdout.strip().splitlines()[-1])
    x = torch.arange(-3.0, 3.0).reshape(2, 3)
    expected = [x, x * 3, torch.tensor([True, False]), x, x * 2, x + 1, torch.tensor([-0.0, 1.0]),
                x, torch.arange(4.0)]  # fmt: skip
    for i, (value, want) in enumerate(zip(got["out"], expected, strict=True)):
        torch.testing.assert_close(torch.tensor(value, dtype=want.dtype), want, msg=f"output {i}")
    assert got["signbit"], "broadcast turned -0.0 into 0.0"
    # The host engine would have copied each collective's tensors to the host.
    assert got["downloads"] == 0, got
