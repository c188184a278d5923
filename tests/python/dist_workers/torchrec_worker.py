"""torchrun worker: TorchRec's DLRM sharded by DistributedModelParallel over tpu_dist, trained
on TorchRec's RandomRecDataset, against the same model, plan and batches sharded over Gloo on
the CPU (fbgemm's CPU kernels): the loss of every step and every local parameter shard at the
end (with "+checkpoint" after the optimizer: read back from a torch.distributed.checkpoint of
the tpu run into a freshly sharded model). Cases come from $TORCHREC_CASES (comma-separated
"sharding-optimizer"); each writes one JSON line to $DIST_RESULTS.<rank>."""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
from torchrec.datasets.random import RandomRecDataset
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise
from torchrec.distributed.types import ShardingEnv, ShardingPlan
from torchrec.models.dlrm import DLRM, DLRMTrain
from training_common import finish, start

KEYS = ["f0", "f1", "f2", "f3"]
DIM, ROWS, DENSE_IN, BATCH = 8, 64, 13, 8
STEPS = int(os.environ.get("TORCHREC_STEPS", "20"))
OPTIMIZERS = {
    "sgd": {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1},
    "rowwise_adagrad": {
        "optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        "learning_rate": 0.1,
        "eps": 1e-8,
    },
}


def tables() -> list[EmbeddingBagConfig]:
    """Three tables, the first read by two features (a shared table)."""
    features = [KEYS[:2], [KEYS[2]], [KEYS[3]]]
    return [
        EmbeddingBagConfig(
            name=f"t{i}", embedding_dim=DIM, num_embeddings=ROWS, feature_names=names
        )
        for i, names in enumerate(features)
    ]


def dlrm(device: torch.device) -> DLRMTrain:
    """TorchRec's DLRM; its tables on `device` (meta: materialised by sharding)."""
    ebc = EmbeddingBagCollection(tables=tables(), device=device)
    model = DLRM(
        embedding_bag_collection=ebc,
        dense_in_features=DENSE_IN,
        dense_arch_layer_sizes=[16, DIM],
        over_arch_layer_sizes=[16, 1],
        dense_device=torch.device("cpu") if device.type == "meta" else device,
    )
    return DLRMTrain(model)


def initial_state() -> dict[str, torch.Tensor]:
    """One full set of weights (on the CPU) that both runs start from."""
    torch.manual_seed(0)
    return {k: v.detach().clone() for k, v in dlrm(torch.device("cpu")).state_dict().items()}


def planned(sharding: str, pg: dist.ProcessGroup, world: int) -> ShardingPlan:
    """The planner's plan with every table sharded `sharding`-wise, for the CPU (TorchRec plans
    for cpu, cuda and mtia; torch_tpu places a CPU plan's shards on tpu). Row-wise, which the
    planner offers for cuda and mtia only, is TorchRec's own row_wise() plan for the CPU."""
    if sharding == "row_wise":
        ebc = dlrm(torch.device("meta")).model.sparse_arch.embedding_bag_collection
        module_plan = construct_module_sharding_plan(
            ebc,
            {config.name: row_wise() for config in tables()},
            sharder("sgd"),
            local_size=world,
            world_size=world,
            device_type="cpu",
        )
        return checked(
            ShardingPlan({"model.sparse_arch.embedding_bag_collection": module_plan}),
            sharding,
            world,
        )
    kernel = "dense" if sharding == "data_parallel" else "fused"
    constraints = {
        # min_partition: column-wise shards of half a row, so that each rank holds one.
        config.name: ParameterConstraints(
            sharding_types=[sharding], compute_kernels=[kernel], min_partition=DIM // 2
        )
        for config in tables()
    }
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=world, compute_device="cpu"), constraints=constraints
    )
    plan = planner.collective_plan(dlrm(torch.device("meta")), [sharder("sgd")], pg)
    return plan if sharding == "data_parallel" else checked(plan, sharding, world)


def checked(plan: ShardingPlan, sharding: str, world: int) -> ShardingPlan:
    """`plan`, once it is seen to shard as asked, with shards on every rank."""
    shards = [
        shard
        for module in plan.plan.values()
        for parameter in module.values()  # type: ignore[attr-defined]
        for shard in parameter.sharding_spec.shards
    ]
    if sharding == "column_wise":  # the planner did split rows into column blocks
        assert {shard.shard_sizes[1] for shard in shards} == {DIM // 2}, shards
    if sharding == "row_wise":  # each table's rows split over the ranks
        assert {shard.shard_sizes[0] for shard in shards} == {ROWS // world}, shards
    assert {shard.placement.rank() for shard in shards} == set(range(world)), shards
    return plan


def sharder(optimizer: str) -> EmbeddingBagCollectionSharder:
    fused = OPTIMIZERS[optimizer.removesuffix("+checkpoint")]
    return EmbeddingBagCollectionSharder(fused_params=dict(fused))


def load(model: torch.nn.Module, full: dict[str, torch.Tensor]) -> None:
    """Copies `full` into the model: each local shard gets its slice."""
    with torch.no_grad():
        for name, value in model.state_dict().items():
            source = full[name.removeprefix("module.")]
            if isinstance(value, ShardedTensor):
                for shard in value.local_shards():
                    piece = source
                    for dim, (offset, size) in enumerate(
                        zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes, strict=True)
                    ):
                        piece = piece.narrow(dim, offset, size)
                    shard.tensor.copy_(piece)
            else:
                value.copy_(source)


def local_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter this rank holds (local shards of the tables), on the CPU."""
    state = {}
    for name, value in model.state_dict().items():
        if isinstance(value, ShardedTensor):
            for i, shard in enumerate(value.local_shards()):
                state[f"{name}#{i}"] = shard.tensor.detach().cpu()
        else:
            state[name] = value.detach().cpu()
    return state


def sharded_model(
    device: torch.device, pg: dist.ProcessGroup, sharding: str, optimizer: str
) -> DistributedModelParallel:
    # "auto": DistributedModelParallel plans by itself (on tpu through torch_tpu's planning).
    plan = None if sharding == "auto" else planned(sharding, pg, dist.get_world_size(pg))
    return DistributedModelParallel(
        dlrm(torch.device("meta")),
        env=ShardingEnv.from_process_group(pg),
        device=device,
        plan=plan,
        sharders=[sharder(optimizer)],
    )


def train(
    device: torch.device,
    pg: dist.ProcessGroup,
    sharding: str,
    optimizer: str,
    rank: int,
    checkpoint: str | None = None,
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """STEPS steps; with `checkpoint`, the trained model is saved there (torch.distributed.
    checkpoint, ShardedTensors and all) and the state returned is a fresh model's after
    loading it back."""
    model = sharded_model(device, pg, sharding, optimizer)
    load(model, initial_state())
    # The fused tables update themselves in backward and leave no gradient for this optimizer;
    # data-parallel tables are ordinary (all-reduced) parameters.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = iter(
        RandomRecDataset(
            keys=KEYS,
            batch_size=BATCH,
            hash_size=ROWS,
            ids_per_feature=3,
            min_ids_per_feature=0,
            num_dense=DENSE_IN,
            manual_seed=100 + rank,
        )
    )
    losses = []
    for _ in range(STEPS):
        batch = next(data).to(device)
        opt.zero_grad()
        loss, _ = model(batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if checkpoint is None:
        return losses, local_state(model)
    dcp.save(model.state_dict(), checkpoint_id=checkpoint, process_group=pg)
    fresh = sharded_model(device, pg, sharding, optimizer)
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=checkpoint, process_group=pg)
    fresh.load_state_dict(state)
    return losses, local_state(fresh)


def compare(sharding: str, optimizer: str, rank: int, gloo: Any) -> None:
    want_losses, want_state = train(torch.device("cpu"), gloo, sharding, optimizer, rank)
    # "checkpoint": the tpu run's state is read back from a checkpoint of it.
    checkpoint = None
    if optimizer.endswith("+checkpoint"):
        checkpoint = os.path.join(os.environ["DIST_TMP"], f"{sharding}-{optimizer}")
    got_losses, got_state = train(
        torch.device("tpu"), dist.group.WORLD, sharding, optimizer, rank, checkpoint
    )
    torch.testing.assert_close(
        torch.tensor(got_losses), torch.tensor(want_losses), rtol=1e-4, atol=1e-5
    )
    assert got_state.keys() == want_state.keys(), (got_state.keys(), want_state.keys())
    for name, value in want_state.items():
        torch.testing.assert_close(got_state[name], value, rtol=1e-4, atol=1e-5, msg=name)


def main() -> None:
    rank, _world, results = start()
    gloo = dist.new_group(backend="gloo")
    for case in os.environ.get("TORCHREC_CASES", "table_wise-sgd").split(","):
        sharding, optimizer = case.split("-")
        results.case(case, functools.partial(compare, sharding, optimizer, rank, gloo))
    finish(results)


if __name__ == "__main__":
    main()
