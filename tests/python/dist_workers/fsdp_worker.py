"""torchrun worker: FSDP2, DTensor and tensor parallelism on tpu through tpu_dist, each compared
with the same computation in one process on the CPU. Each case writes one JSON line to
$DIST_RESULTS.<rank>."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from training_common import BATCH, TPU, compare, finish, gpt, lm_loss, make_data, reference, start

import torch_tpu


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def train_fsdp(
    data: list[torch.Tensor],
    rank: int,
    world: int,
    *,
    reshard_after_forward: bool = True,
    mp_policy: MixedPrecisionPolicy | None = None,
    clip: float | None = None,
    compiled: bool = False,
    compiled_model: bool = False,
) -> tuple[list[float], dict[str, torch.Tensor]]:
    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    model = gpt().to(TPU)
    kwargs = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.compile(lm_loss, backend="tpu") if compiled else lm_loss
    # The whole model compiled (forward and backward graphs); FSDP2's hooks run eagerly.
    forward = torch.compile(model, backend="tpu") if compiled_model else model
    per_rank = BATCH // world
    losses = []
    for batch in data:
        local = batch[rank * per_rank : (rank + 1) * per_rank].to(TPU)
        opt.zero_grad()
        loss = loss_fn(forward, local)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        mean = loss.detach().float().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
    return losses, {k: full(v) for k, v in model.named_parameters()}


def dtensor_redistribution(world: int) -> None:
    mesh = init_device_mesh("tpu", (world,))
    g = torch.Generator().manual_seed(3)
    value = torch.randn(4 * world, 6, generator=g)
    placements = {"shard0": Shard(0), "shard1": Shard(1), "replicate": Replicate()}
    for src_name, src in placements.items():
        for dst_name, dst in placements.items():
            d = distribute_tensor(value.to(TPU), mesh, [src])
            assert d.to_local().device.type == "tpu"
            moved = d.redistribute(mesh, [dst])
            torch.testing.assert_close(full(moved), value, msg=f"{src_name} -> {dst_name}")
    # Partial: each rank holds a share; reducing to Replicate or Shard sums them.
    for dst_name, dst in (("replicate", Replicate()), ("shard0", Shard(0))):
        share = value / world
        partial = DTensor.from_local(share.to(TPU), mesh, [Partial()])
        torch.testing.assert_close(full(partial.redistribute(mesh, [dst])), value, msg=dst_name)


def dtensor_ops(world: int) -> None:
    mesh = init_device_mesh("tpu", (world,))
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(4 * world, 8, generator=g), torch.randn(8, 5, generator=g)
    da = distribute_tensor(a.to(TPU), mesh, [Shard(0)])
    db = distribute_tensor(b.to(TPU), mesh, [Replicate()])
    torch.testing.assert_close(full(da @ db), a @ b)
    torch.testing.assert_close(full((da * 2 + 1).sum(dim=0)), (a * 2 + 1).sum(dim=0))


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def tensor_parallel(world: int) -> None:
    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    ref = MLP()
    tp = MLP()
    tp.load_state_dict(ref.state_dict())
    tp = parallelize_module(tp.to(TPU), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(5))
    ref_out = ref(x)
    tp_out = tp(x.to(TPU))
    torch.testing.assert_close(full(tp_out), ref_out.detach(), rtol=1e-5, atol=1e-5)
    ref_out.square().sum().backward()
    tp_out.square().sum().backward()
    for (name, p_ref), (_, p_tp) in zip(ref.named_parameters(), tp.named_parameters(), strict=True):
        torch.testing.assert_close(full(p_tp.grad), p_ref.grad, rtol=1e-4, atol=1e-5, msg=name)


class Norm(torch.nn.Module):
    """LayerNorm -> Linear(up) -> Linear(down) -> head over a vocab: exercises sequence
    parallelism (the norm runs on sequence shards) and loss parallelism (vocab-sharded logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        self.head = torch.nn.Linear(16, 12, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return self.head(self.down(torch.nn.functional.gelu(self.up(h))))


def sequence_and_loss_parallel(world: int) -> None:
    from torch.distributed.tensor.parallel import SequenceParallel, loss_parallel

    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    ref = Norm()
    tp = Norm()
    tp.load_state_dict(ref.state_dict())
    plan = {
        "norm": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Replicate()),
        "head": ColwiseParallel(use_local_output=False),
    }
    tp = parallelize_module(tp.to(TPU), mesh, plan)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 4 * world, 16, generator=g)
    target = torch.randint(0, 12, (2, 4 * world), generator=g)
    ref_loss = torch.nn.functional.cross_entropy(ref(x).reshape(-1, 12), target.reshape(-1))
    ref_loss.backward()
    # SequenceParallel takes the input sharded along the sequence.
    local = x.chunk(world, dim=1)[dist.get_rank()].to(TPU)
    logits = tp(DTensor.from_local(local, mesh, [Shard(1)]))
    with loss_parallel():
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 12), target.reshape(-1).to(TPU))
        loss.backward()
    torch.testing.assert_close(full(loss), ref_loss.detach(), rtol=1e-5, atol=1e-5)
    for (name, p_ref), (_, p_tp) in zip(ref.named_parameters(), tp.named_parameters(), strict=True):
        torch.testing.assert_close(full(p_tp.grad), p_ref.grad, rtol=1e-4, atol=1e-5, msg=name)


class Attention(torch.nn.Module):
    """Grouped-query attention (4 query heads over 2 key/value heads of 4) whose heads follow
    the projections' sharding: `-1` heads is the local count under tensor parallelism."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(16, 16)
        self.k = torch.nn.Linear(16, 8)
        self.v = torch.nn.Linear(16, 8)
        self.o = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, length, _ = x.shape
        q, k, v = (p(x).view(b, length, -1, 4).transpose(1, 2) for p in (self.q, self.k, self.v))
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True
        )
        return self.o(out.transpose(1, 2).reshape(b, length, -1))


def tensor_parallel_attention(world: int) -> None:
    # q/k/v stay DTensors sharded on the heads (use_local_output=False), so the attention op
    # itself runs on DTensors: the fsdp_tp example's Llama.
    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    ref = Attention()
    tp = Attention()
    tp.load_state_dict(ref.state_dict())
    column = ColwiseParallel(use_local_output=False)
    plan = {"q": column, "k": column, "v": column, "o": RowwiseParallel()}
    tp = parallelize_module(tp.to(TPU), mesh, plan)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 6, 16, generator=g)
    masks = {"causal": None, "additive mask": torch.randn(2, 1, 6, 6, generator=g)}
    for name, mask in masks.items():
        ref.zero_grad()
        tp.zero_grad()
        ref_out = ref(x, mask)
        tp_mask = None if mask is None else distribute_tensor(mask.to(TPU), mesh, [Replicate()])
        tp_out = tp(x.to(TPU), tp_mask)
        torch.testing.assert_close(full(tp_out), ref_out.detach(), rtol=1e-5, atol=1e-5, msg=name)
        ref_out.square().sum().backward()
        tp_out.square().sum().backward()
        for (p_name, p_ref), (_, p_tp) in zip(
            ref.named_parameters(), tp.named_parameters(), strict=True
        ):
            torch.testing.assert_close(
                full(p_tp.grad), p_ref.grad, rtol=1e-4, atol=1e-5, msg=f"{name}: {p_name}"
            )


def checkpoint_round_trip(world: int, folder: str) -> None:
    """torch.distributed.checkpoint: save an FSDP2-sharded model from every rank, load it into
    one unsharded model without a process group, change it, save that, and load it back into
    the sharded model."""
    import torch.distributed.checkpoint as dcp

    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    model = gpt().to(TPU)
    fully_shard(model, mesh=mesh)
    expected = {k: full(v) for k, v in model.state_dict().items()}
    dcp.save(model.state_dict(), checkpoint_id=f"{folder}/sharded")
    dist.barrier()
    if dist.get_rank() == 0:
        single = gpt()
        state = {k: torch.zeros_like(v) for k, v in single.state_dict().items()}
        dcp.load(state, checkpoint_id=f"{folder}/sharded", no_dist=True)
        for k, v in expected.items():
            torch.testing.assert_close(state[k], v, msg=k)
        changed = {k: v + 1 for k, v in state.items()}
        dcp.save(changed, checkpoint_id=f"{folder}/single", no_dist=True)
    dist.barrier()
    state = model.state_dict()
    dcp.load(state, checkpoint_id=f"{folder}/single")
    model.load_state_dict(state)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(full(v), expected[k] + 1, msg=k)


def main() -> None:
    rank, world, results = start()
    data = make_data()
    want = reference(gpt, data)
    case = results.case

    def fsdp(tol: float = 1e-4, mode: str = "strict", **kwargs: object) -> Callable[[], None]:
        def run() -> None:
            with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
                got = train_fsdp(data, rank, world, **kwargs)  # type: ignore[arg-type]
            compare(got, want, tol)

        return run

    case("fsdp2-reshard", fsdp())
    case("fsdp2-no_reshard", fsdp(reshard_after_forward=False))
    case("fsdp2-defer_and_fuse", fsdp(mode="defer_and_fuse"))
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    case("fsdp2-bf16_params_fp32_reduce", fsdp(tol=5e-2, mp_policy=bf16))
    case(
        "fsdp2-clip_grad_norm",
        lambda: compare(
            train_fsdp(data, rank, world, clip=0.5), reference(gpt, data, clip=0.5), 1e-4
        ),
    )
    case("fsdp2-compiled", fsdp(compiled=True))
    case("fsdp2-compiled_model", fsdp(compiled_model=True))
    case("dtensor-redistribution", lambda: dtensor_redistribution(world))
    case("dtensor-ops", lambda: dtensor_ops(world))
    case("tensor_parallel-colwise_rowwise", lambda: tensor_parallel(world))
    case("tensor_parallel-sequence_and_loss_parallel", lambda: sequence_and_loss_parallel(world))
    case("tensor_parallel-attention", lambda: tensor_parallel_attention(world))
    case(
        "checkpoint-save_2_load_1_and_back",
        lambda: checkpoint_round_trip(world, os.environ["DIST_TMP"]),
    )
    finish(results)


if __name__ == "__main__":
    main()
