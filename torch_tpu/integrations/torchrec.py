"""TorchRec's ``DistributedModelParallel`` on ``tpu``.

TorchRec plans and places tables for three compute devices: cpu, cuda and mtia. A tpu runs
TorchRec's tables with fbgemm's CPU code path (the "host" TBE layout, whose ops are registered
for tpu in :mod:`torch_tpu.integrations.fbgemm`), so it is planned as a CPU is, and the plan's
shards are then placed on each rank's tpu. Two things in TorchRec need a word for that, and
this module says it when TorchRec is imported:

- ``DistributedModelParallel(model, device=torch.device("tpu"))`` without a plan plans with a
  CPU topology (its own planner refuses "tpu") and places the shards on tpu; a plan given for
  the CPU ("rank:r/cpu") is placed on tpu the same way.
- Data-parallel tables: TorchRec builds fbgemm's dense TBE on the CPU wherever CUDA and MTIA
  are absent; on tpu its weights move to the device after construction.

:func:`plan_for_tpu` and :func:`place_on_tpu` are the same steps for a user's own planner.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from . import after_import


def place_on_tpu(plan: Any) -> Any:
    """Moves every shard of ``plan`` (a TorchRec ``ShardingPlan``) placed on "cpu" onto its
    rank's tpu (``rank:r/tpu:r``, one chip per process); returns the plan."""
    from torch.distributed.remote_device import _remote_device

    for module in plan.plan.values():
        for parameter in module.values():
            spec = parameter.sharding_spec
            if spec is None or not hasattr(spec, "shards"):
                continue
            for shard in spec.shards:
                device = shard.placement.device()
                if device.type == "cpu":
                    rank = shard.placement.rank()
                    shard.placement = _remote_device(f"rank:{rank}/tpu:{rank}")
    return plan


def plan_for_tpu(
    module: torch.nn.Module,
    sharders: list[Any] | None = None,
    pg: dist.ProcessGroup | None = None,
    constraints: dict[str, Any] | None = None,
) -> Any:
    """TorchRec's ``EmbeddingShardingPlanner`` for ``module`` on tpu ranks: planned with a CPU
    topology over ``pg`` (default: the world), its shards placed on tpu."""
    from torchrec.distributed.comm import get_local_size
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.sharding_plan import get_default_sharders

    group = pg if pg is not None else dist.GroupMember.WORLD
    if group is None:
        raise RuntimeError("plan_for_tpu: torch.distributed is not initialised")
    world = dist.get_world_size(group)
    topology = Topology(
        world_size=world, local_world_size=get_local_size(world), compute_device="cpu"
    )
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    chosen = get_default_sharders() if sharders is None else sharders
    return place_on_tpu(planner.collective_plan(module, chosen, group))


def _patch_model_parallel(module: ModuleType) -> None:
    model_parallel = module.DistributedModelParallel
    original = model_parallel.__init__
    if getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        names = ("env", "device", "plan", "sharders")
        bound = dict(zip(names, args, strict=False)) | kwargs
        device = bound.get("device")
        if device is not None and torch.device(device).type == "tpu":
            env = bound.get("env")
            pg = env.process_group if env is not None else None
            if bound.get("plan") is None:
                bound["plan"] = plan_for_tpu(module, bound.get("sharders"), pg)
            else:
                place_on_tpu(bound["plan"])
            args = ()
            kwargs = bound
        original(self, module, *args, **kwargs)

    __init__._torch_tpu = True  # type: ignore[attr-defined]
    model_parallel.__init__ = __init__


def _patch_dense_tables(module: ModuleType) -> None:
    dense = module.BatchedDenseEmbeddingBag
    original = dense.__init__
    if getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def __init__(  # noqa: N807
        self: Any,
        config: Any,
        pg: Any = None,
        device: torch.device | None = None,
        sharding_type: Any = None,
    ) -> None:
        original(self, config, pg, device, sharding_type)
        if device is None or device.type != "tpu":
            return
        # fbgemm's dense TBE was built on the CPU (no CUDA here): move it, and the per-table
        # views TorchRec keeps of its flat weight, to the device.
        self._emb_module.to(device)
        self._param_per_table = dict(
            module._gen_named_parameters_by_table_dense(
                self._emb_module, self.table_name_to_count.copy(), self._config
            )
        )

    __init__._torch_tpu = True  # type: ignore[attr-defined]
    dense.__init__ = __init__


def _patch_sharded_tensor_device(module: ModuleType) -> None:
    """A ShardedTensor with no shard on this rank (a table-wise table held by another rank)
    names its device from the process group: the CPU for Gloo, else ``torch.cuda``'s current
    device, which fails without CUDA. Where tpu is the accelerator it is the current tpu."""
    table = module._SHARDED_OPS
    getter = torch.Tensor.device.__get__  # type: ignore[attr-defined]
    original = table[getter]
    if getattr(original, "_torch_tpu", False):
        return

    @module._sharded_op_impl(getter)
    def device(types: Any, args: tuple = (), kwargs: Any = None, pg: Any = None) -> Any:
        sharded = args[0]
        gloo = pg is not None and pg._get_backend_name() == "gloo"
        accelerator = torch.accelerator.current_accelerator()
        if not sharded.local_shards() and not gloo and accelerator is not None:
            if accelerator.type == "tpu":
                return torch.device("tpu", torch.tpu.current_device())
        return original(types, args, kwargs, pg)

    table[getter]._torch_tpu = True


def install() -> None:
    after_import("torch.distributed._shard.sharded_tensor", _patch_sharded_tensor_device)
    after_import("torchrec.distributed.model_parallel", _patch_model_parallel)
    after_import("torchrec.distributed.batched_embedding_kernel", _patch_dense_tables)
