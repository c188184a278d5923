"""Ray Train on tpu: a ``TorchTrainer`` with two workers, each with one tpu device and a
``tpu_dist`` group, trains a small model with DDP or FSDP2; batches come from Ray Data straight
onto the device; metrics and checkpoints go through ``ray.train.report``; a worker killed
mid-run is replaced and the run resumes from its last checkpoint.

Without TPU hosts, ``fake_tpu_cluster()`` starts a local Ray cluster whose node advertises four
TPU chips and the node labels a v5e host carries, so Ray Train's own ``use_tpu=True`` path runs:
it reserves the TPU resources, picks the ``tpu_dist`` backend and calls torch_tpu's loader in
each worker. ``--device cpu`` runs the same recipe on CPU with Gloo, the reference.

    python recipes/ray/train.py tpu-ddp cpu-ddp tpu-fsdp-kill4 --out /tmp/ray_runs

runs each named run on one cluster (``-kill4``: a worker dies at epoch 4) and prints one JSON
line: per run, the loss after each epoch, the backend and where batches landed, the run's time,
and the time to recover when a worker was killed; and the labels Ray gave the fake host.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

ROWS, FEATURES, EPOCHS = 256, 16, 8
# A v5e host of the smallest multi-chip topology Ray accepts, 2x2: four single-core chips, two
# per worker.
FAKE_TPU_HOST = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-4",
    "TPU_TOPOLOGY": "2x2",
    "TPU_WORKER_ID": "0",
    "TPU_NAME": "fake-v5e-slice",
}


def fake_tpu_cluster(runtime_env: dict[str, Any] | None = None) -> Any:
    """A one-node local cluster that Ray takes for a v5e host with 4 chips; `runtime_env`
    is the job's (e.g. a PYTHONPATH its actors import from)."""
    import ray
    from ray.cluster_utils import Cluster

    # Ray reads a host's TPU type, topology and name from GKE's variables first; set, they keep
    # it from asking the cloud metadata service.
    os.environ.update(FAKE_TPU_HOST)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 4, "resources": {"TPU": 4}},
    )
    ray.init(
        address=cluster.address,
        include_dashboard=False,
        runtime_env=runtime_env,
    )
    return cluster


def arrays() -> tuple[Any, Any]:
    """The regression data: ROWS inputs and their targets."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, FEATURES), dtype=np.float32)
    y = (x @ rng.standard_normal((FEATURES, 1), dtype=np.float32)).astype(np.float32)
    return x, y


def dataset() -> Any:
    import ray

    x, y = arrays()
    # Rows hold input and target together: nothing relies on two datasets' orders agreeing.
    return ray.data.from_items([{"data": xi, "target": yi} for xi, yi in zip(x, y, strict=True)])


def make_model(device: Any) -> Any:
    """The model, seeded: every worker and the single-process reference start alike."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(device)


def make_optimizer(model: Any) -> Any:
    import torch

    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train_loop_per_worker(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from ray import train
    from ray.train import Checkpoint
    from ray.train.torch import get_device
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_state_dict,
        set_state_dict,
    )

    device = get_device()
    model = make_model(device)
    if config["strategy"] == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
    optimizer = make_optimizer(model)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)

    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            saved = torch.load(Path(folder) / "state.pt", weights_only=False)
        set_state_dict(
            model,
            optimizer,
            model_state_dict=saved["model"],
            optim_state_dict=saved["optimizer"],
            options=StateDictOptions(full_state_dict=True),
        )
        start = saved["epoch"] + 1

    rank = train.get_context().get_world_rank()
    shard = train.get_dataset_shard("train")
    for epoch in range(start, EPOCHS):
        kill = config.get("kill_at_epoch")
        marker = Path(config["out"]) / "killed"
        if kill == epoch and rank == 1 and not marker.exists():
            marker.write_text(str(time.time()))
            os._exit(1)  # a worker dies mid-run
        # One batch per worker and epoch: the step's gradient is the mean over all rows, however
        # Ray Data splits them, so runs are comparable.
        for batch in shard.iter_torch_batches(
            batch_size=ROWS // 2, device=device, prefetch_batches=1
        ):
            loss = torch.nn.functional.mse_loss(model(batch["data"]), batch["target"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        metrics = {
            "epoch": epoch,
            "loss": mean_loss.item() / dist.get_world_size(),
            "time": time.time(),
            "backend": dist.get_backend(),
            "batch_device": batch["data"].device.type,
        }
        model_state, optimizer_state = get_state_dict(model, optimizer, options=full)
        with tempfile.TemporaryDirectory() as folder:
            if rank == 0:
                state = {"model": model_state, "optimizer": optimizer_state, "epoch": epoch}
                torch.save(state, Path(folder) / "state.pt")
            train.report(
                metrics, checkpoint=Checkpoint.from_directory(folder) if rank == 0 else None
            )


def parse_run(name: str) -> dict[str, Any]:
    """ "tpu-ddp", "cpu-fsdp", "tpu-ddp-kill4" (a worker dies at epoch 4) -> the run's settings."""
    device, strategy, *kill = name.split("-")
    if device not in ("tpu", "cpu") or strategy not in ("ddp", "fsdp") or len(kill) > 1:
        raise ValueError(f"bad run name {name!r}: DEVICE-STRATEGY[-killEPOCH]")
    kill_at = int(kill[0].removeprefix("kill")) if kill else None
    return {"name": name, "device": device, "strategy": strategy, "kill_at_epoch": kill_at}


def fit(run: dict[str, Any], out: Path) -> dict[str, Any]:
    """One TorchTrainer run on the current cluster; returns its losses per epoch and more."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out.mkdir(parents=True, exist_ok=True)
    tpu = run["device"] == "tpu"
    scaling = ScalingConfig(
        num_workers=2,
        use_tpu=tpu,
        topology="2x2" if tpu else None,
        accelerator_type="TPU-V5LITEPOD" if tpu else None,
        resources_per_worker={"TPU": 2, "CPU": 1} if tpu else {"CPU": 1},
    )
    kill_at = run["kill_at_epoch"]
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"strategy": run["strategy"], "out": str(out), "kill_at_epoch": kill_at},
        scaling_config=scaling,
        datasets={"train": dataset()},
        run_config=RunConfig(
            name=run["name"],
            storage_path=str(out / "storage"),
            failure_config=FailureConfig(max_failures=0 if kill_at is None else 1),
            # The CPU reference does not load torch_tpu: FSDP2 would take tpu for the accelerator.
            worker_runtime_env={"env_vars": {} if tpu else {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}},
        ),
    )
    started = time.time()
    rows = trainer.fit().metrics_dataframe.sort_values("time").to_dict("records")
    losses = {int(row["epoch"]): row["loss"] for row in rows}  # a rerun epoch's last report wins
    summary: dict[str, Any] = {
        "losses": [losses[e] for e in sorted(losses)],
        "backend": rows[0]["backend"],
        "batch_device": rows[0]["batch_device"],
        "seconds": time.time() - started,
    }
    marker = out / "killed"
    if marker.exists():
        killed = float(marker.read_text())
        summary["recovery_s"] = min(row["time"] for row in rows if row["time"] > killed) - killed
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="+", type=parse_run, help="DEVICE-STRATEGY[-killEPOCH], e.g. tpu-ddp-kill4"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import ray

    cluster = fake_tpu_cluster()
    try:
        results = {run["name"]: fit(run, args.out / run["name"]) for run in args.runs}
        results["node_labels"] = ray.nodes()[0]["Labels"]
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
