"""The PJRT client of a process in a ``tpu_dist`` job, for the XLA engine.

The XLA engine compiles each collective into a program over every rank's device, so the PJRT
client must know the other processes before the first tensor exists: it is created at import
with them. libtpu finds the processes of its slice by itself. The XLA CUDA plugin is told its
node id and the node count (one process, one GPU, one node), and exchanges its start-up data
(devices, NCCL ids) through a key-value store: the c10d store torchrun already runs, which the
process group's rendezvous uses too. The CPU plugin has no cross-process transport: there the
host engine runs.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import Any

ENGINE_VAR = "TORCH_TPU_DIST_ENGINE"
ENGINES = ("host", "xla")
# Plugins whose clients span processes, and so run the XLA engine unless told otherwise.
_XLA_BY_DEFAULT = ("tpu", "cuda")
# Plugins that take a node id and count at client creation (a plugin given by path is
# assumed to follow the CUDA plugin's convention).
_TAKES_NODE_OPTIONS = ("cuda", "custom")
KEY_PREFIX = "torch_tpu/pjrt_client"


def requested_engine(env: Mapping[str, str] = os.environ) -> str | None:
    """The engine ``TORCH_TPU_DIST_ENGINE`` asks for, or None where it is unset."""
    engine = env.get(ENGINE_VAR, "").strip()
    if not engine:
        return None
    if engine not in ENGINES:
        raise ValueError(f"tpu_dist: {ENGINE_VAR}={engine!r}; expected 'host' or 'xla'")
    return engine


def engine_for(kind: str, env: Mapping[str, str] = os.environ) -> str:
    """The engine a job on the ``kind`` plugin runs: the requested one, else per plugin."""
    return requested_engine(env) or ("xla" if kind in _XLA_BY_DEFAULT else "host")


def _world(env: Mapping[str, str]) -> tuple[int, int, int]:
    return (
        int(env.get("RANK", "0")),
        int(env.get("WORLD_SIZE", "1")),
        int(env.get("LOCAL_RANK", "0")),
    )


def client_options(kind: str, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The PJRT_Client_Create options that make this process one node of the job; empty
    where the job has one process, runs the host engine, or the plugin needs none."""
    rank, world, local_rank = _world(env)
    if world <= 1 or engine_for(kind, env) != "xla" or kind not in _TAKES_NODE_OPTIONS:
        return {}
    options: dict[str, Any] = {"node_id": rank, "num_nodes": world}
    if kind == "cuda":
        # One GPU per process, as with NCCL: the others are other nodes' devices.
        options["visible_devices"] = [local_rank]
    return options


def key_value_store(env: Mapping[str, str] = os.environ) -> Any:
    """A c10d store the processes share, for the client's start-up exchange: torchrun's agent
    store, or (launched without one) a store rank 0 serves at MASTER_ADDR:MASTER_PORT, which
    the process group's rendezvous then shares (both are multi-tenant)."""
    import torch.distributed as dist

    rank, world, _ = _world(env)
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise RuntimeError(
            f"tpu_dist: the XLA engine starts the PJRT client with the other processes, through "
            f"the store at MASTER_ADDR:MASTER_PORT, but {', '.join(missing)} is not set; launch "
            f"with torchrun, or set {ENGINE_VAR}=host"
        )
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    timeout = datetime.timedelta(seconds=float(env.get("TORCH_TPU_DIST_START_TIMEOUT", "300")))
    store = dist.TCPStore(
        env["MASTER_ADDR"],
        int(env["MASTER_PORT"]),
        world,
        is_master=not agent and rank == 0,
        timeout=timeout,
        multi_tenant=True,
    )
    # A restarted job (torchrun --max-restarts) starts over with fresh keys.
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"{KEY_PREFIX}/{restart}/", store)


def client_setup(kind: str, env: Mapping[str, str] = os.environ) -> tuple[dict[str, Any], Any]:
    """(options, key-value store or None) for this process's client."""
    options = client_options(kind, env)
    if not options:
        return {}, None
    from .. import _C

    return options, _C._PjrtKeyValueStore(key_value_store(env))
