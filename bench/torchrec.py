"""TorchRec on tpu, side by side from one run:

1. a DLRM training step (TorchRec's DLRM and RandomRecDataset, sharded by
   DistributedModelParallel on 2 processes) on tpu through tpu_dist, per sharding, next to the
   same step on CPU tensors with Gloo (fbgemm's CPU kernels): samples/s over both ranks, and on
   tpu the executions, host syncs and compiles per step once warm;
2. lookups only: pooled embedding lookups/s of one EmbeddingBagCollection with a 1M-row
   table (forward, no grad), on tpu and on the CPU, in one process.

    .venv/bin/python bench/torchrec.py          # launches itself under torchrun (2 ranks)

Batches cycle through a few generated ones (RandomRecDataset's num_generated_batches), so the
warm steps meet lengths already compiled for; the count of compiles per warm step says so. The
"jagged" rows give every step a new batch of 1 to 8 ids a feature per sample (TorchRec's
default gives every sample exactly `ids_per_feature`), so each step meets new index counts:
their compiles per step are what size buckets leave (docs/design/buckets.md, Jagged indices).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

# This file is named like the package it measures: drop its folder from the import path (a
# script's folder comes first) so that `import torchrec` finds TorchRec.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from fbgemm_gpu.split_embedding_configs import EmbOptimType  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor  # noqa: E402
from torchrec.datasets.random import RandomRecDataset  # noqa: E402
from torchrec.distributed import DistributedModelParallel  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology  # noqa: E402
from torchrec.distributed.types import ShardingEnv  # noqa: E402
from torchrec.models.dlrm import DLRM, DLRMTrain  # noqa: E402

import torch_tpu  # noqa: E402

TABLES, ROWS, DIM, DENSE_IN, BATCH, IDS = 8, 10_000, 32, 13, 256, 8
WARMUP, STEPS, CYCLE = 4, 10, 4
SHARDINGS = ["table_wise", "column_wise", "data_parallel"]


def dlrm() -> DLRMTrain:
    tables = [
        EmbeddingBagConfig(
            name=f"t{i}", embedding_dim=DIM, num_embeddings=ROWS, feature_names=[f"f{i}"]
        )
        for i in range(TABLES)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    return DLRMTrain(
        DLRM(
            embedding_bag_collection=ebc,
            dense_in_features=DENSE_IN,
            dense_arch_layer_sizes=[64, DIM],
            over_arch_layer_sizes=[64, 1],
            dense_device=torch.device("cpu"),
        )
    )


def sharded(device: torch.device, pg: dist.ProcessGroup, sharding: str) -> torch.nn.Module:
    kernel = "dense" if sharding == "data_parallel" else "fused"
    constraints = {
        f"t{i}": ParameterConstraints(
            sharding_types=[sharding], compute_kernels=[kernel], min_partition=DIM // 2
        )
        for i in range(TABLES)
    }
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.01}
    )
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=dist.get_world_size(pg), compute_device="cpu"),
        constraints=constraints,
    )
    plan = planner.collective_plan(dlrm(), [sharder], pg)
    return DistributedModelParallel(
        dlrm(), env=ShardingEnv.from_process_group(pg), device=device, plan=plan, sharders=[sharder]
    )


def step_seconds(
    device: torch.device, pg: dist.ProcessGroup, sharding: str, jagged: bool = False
) -> dict[str, float]:
    model = sharded(device, pg, sharding)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cycle = WARMUP + STEPS if jagged else CYCLE
    data = iter(
        RandomRecDataset(
            keys=[f"f{i}" for i in range(TABLES)],
            batch_size=BATCH,
            hash_size=ROWS,
            ids_per_feature=IDS,
            num_dense=DENSE_IN,
            manual_seed=dist.get_rank(),
            num_generated_batches=cycle,
            min_ids_per_feature=1 if jagged else None,
        )
    )
    batches = [next(data).to(device) for _ in range(cycle)]

    def step(i: int) -> None:
        opt.zero_grad()
        loss, _ = model(batches[i % cycle])
        loss.backward()
        opt.step()

    for i in range(WARMUP):
        step(i)
    sync = torch.tpu.synchronize if device.type == "tpu" else lambda: None
    sync()
    before = torch_tpu.metrics()
    samples = []
    for i in range(WARMUP, WARMUP + STEPS):
        dist.barrier(pg)
        start = time.perf_counter()
        step(i)
        sync()
        samples.append(time.perf_counter() - start)
    after = torch_tpu.metrics()
    per_step = {k: (after[k] - before[k]) / STEPS for k in ("executions", "host_syncs", "compiles")}
    return {"seconds": statistics.median(samples), **per_step}


def training_table(gloo: dist.ProcessGroup) -> list[str]:
    world = dist.get_world_size()
    header = f"{'DLRM step, 2 ranks (batch 256/rank, 8 tables x 10k x 32)':<58}"
    lines = [
        header + f"{'samples/s':>10} {'vs Gloo':>8} {'exec/step':>10} {'syncs/step':>11}"
        f" {'compiles/step':>14}"
    ]
    for sharding, jagged in [(s, False) for s in SHARDINGS] + [("table_wise", True)]:
        name = sharding + (", jagged" if jagged else "")
        cpu = step_seconds(torch.device("cpu"), gloo, sharding, jagged)
        tpu = step_seconds(torch.device("tpu"), dist.group.WORLD, sharding, jagged)
        tpu_rate, cpu_rate = world * BATCH / tpu["seconds"], world * BATCH / cpu["seconds"]
        lines.append(
            f"{'tpu, tpu_dist, ' + name:<58}{tpu_rate:>10.0f} {tpu_rate / cpu_rate:>7.2f}x"
            f" {tpu['executions']:>10.0f} {tpu['host_syncs']:>11.0f} {tpu['compiles']:>14.1f}"
        )
        lines.append(f"{'cpu, Gloo, ' + name:<58}{cpu_rate:>10.0f} {1.0:>7.2f}x")
    return lines


def lookup_table() -> list[str]:
    """Pooled lookups/s for one 1M-row table, forward only."""
    rows, dim, batch, ids = 1_000_000, 64, 4096, 20
    config = EmbeddingBagConfig(
        name="big", embedding_dim=dim, num_embeddings=rows, feature_names=["f"]
    )
    g = torch.Generator().manual_seed(0)
    lengths = torch.full((batch,), ids)
    values = torch.randint(0, rows, (batch * ids,), generator=g)
    lines = [
        f"{'lookups only: 1M x 64 table, 4096 bags of 20 ids':<58}{'lookups/s':>12} {'vs CPU':>8}"
    ]
    rates = {}
    for device in (torch.device("cpu"), torch.device("tpu")):
        ebc = EmbeddingBagCollection(tables=[config], device=device)
        features = KeyedJaggedTensor.from_lengths_sync(
            keys=["f"], values=values, lengths=lengths
        ).to(device)
        sync = torch.tpu.synchronize if device.type == "tpu" else lambda: None
        with torch.no_grad():
            for _ in range(2):
                ebc(features)
            sync()
            samples = []
            for _ in range(10):
                start = time.perf_counter()
                ebc(features)
                sync()
                samples.append(time.perf_counter() - start)
        rates[device.type] = batch / statistics.median(samples)
    for name in ("tpu", "cpu"):
        lines.append(f"{name:<58}{rates[name]:>12.0f} {rates[name] / rates['cpu']:>7.2f}x")
    return lines


def worker() -> None:
    dist.init_process_group("tpu_dist")
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    gloo = dist.new_group(backend="gloo")
    tables = [training_table(gloo)]
    if dist.get_rank() == 0:
        tables.append(lookup_table())
        for table in tables:
            print("\n".join(table))
            print()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    if "LOCAL_RANK" in os.environ:
        worker()
        return
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node=2", __file__]
    sys.exit(subprocess.call(command, env={"OMP_NUM_THREADS": "1", **os.environ}))


if __name__ == "__main__":
    main()
