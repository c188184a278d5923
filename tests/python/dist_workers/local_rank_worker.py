"""torchrun worker: a process addresses its one chip as `tpu:LOCAL_RANK`, the way PyTorch's own
examples write it (set_device(local_rank), torch.accelerator.set_device_index(local_rank),
torch.device("tpu", local_rank), DDP(device_ids=[local_rank]), init_process_group(device_id=...),
init_device_mesh). Values are compared with the CPU and with Gloo. Each case writes one JSON
line to $DIST_RESULTS.<rank>."""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP
from training_common import Results

STEPS = 4
TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT", "120")))


def expect_accelerator_error(fn: Callable[[], object], *needles: str) -> None:
    try:
        fn()
    except torch.AcceleratorError as error:
        missing = [n for n in needles if n not in str(error)]
        assert not missing, f"error {str(error)[:400]!r} does not mention {missing}"
    else:
        raise AssertionError(f"no torch.AcceleratorError (expected one mentioning {needles})")


def check_numbering(local_rank: int, local_world: int) -> None:
    # Before any set_device: the process starts on its own chip.
    assert torch.tpu.device_count() == local_world, torch.tpu.device_count()
    assert torch.accelerator.device_count() == local_world
    assert torch.tpu.current_device() == local_rank
    assert torch.accelerator.current_device_index() == local_rank
    assert torch.tpu._local_device_indices() == [local_rank]
    torch.tpu.set_device(local_rank)
    torch.accelerator.set_device_index(local_rank)
    assert torch.tpu.current_device() == local_rank
    host = torch.arange(6.0).reshape(2, 3)
    for device in (torch.device("tpu", local_rank), f"tpu:{local_rank}", "tpu"):
        x = host.to(device)
        assert x.device == torch.device("tpu", local_rank), (device, x.device)
        y = torch.ones(2, 3, device=device) * x + 1
        torch.testing.assert_close(y.cpu(), host + 1)
    with torch.tpu.device(local_rank):
        z = torch.full((3,), 2.0, device="tpu")
    assert z.device.index == local_rank
    torch.testing.assert_close((z @ z).cpu(), torch.tensor(12.0))
    # A fresh thread (autograd's, a data loader's) starts on this chip too.
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(torch.tpu.current_device()))
    worker.start()
    worker.join()
    assert seen == [local_rank], seen
    # torch.manual_seed seeds this process's generators (not its peers' chips) and repeats.
    draws = []
    for _ in range(2):
        torch.manual_seed(3)
        draws.append(torch.rand(4, device="tpu").cpu())
    torch.testing.assert_close(draws[0], draws[1])


def check_other_ranks_chip(local_rank: int, local_world: int) -> None:
    peer = (local_rank + 1) % local_world
    owned = f"drives tpu:{local_rank}"
    expect_accelerator_error(lambda: torch.tpu.set_device(peer), f"local rank {peer}", owned)
    expect_accelerator_error(
        lambda: torch.accelerator.set_device_index(peer), f"local rank {peer}", owned
    )
    expect_accelerator_error(
        lambda: torch.ones(2, device=f"tpu:{peer}"), f"tpu:{peer} is the device of", owned
    )
    expect_accelerator_error(
        lambda: torch.ones(2).to(torch.device("tpu", peer)), f"local rank {peer}", owned
    )
    expect_accelerator_error(
        lambda: torch.tpu.set_device(local_world),
        "invalid device ordinal",
        f"LOCAL_WORLD_SIZE={local_world}",
        owned,
    )
    assert torch.tpu.current_device() == local_rank  # the failed calls changed nothing


def train(
    model: torch.nn.Module, device: torch.device, rank: int, world: int, **ddp: Any
) -> tuple[list[float], dict[str, torch.Tensor]]:
    wrapped = DDP(model.to(device), **ddp)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(STEPS):
        inputs = torch.randn(4 * world, 8, generator=g)
        targets = torch.randn(4 * world, 2, generator=g)
        mine = slice(4 * rank, 4 * (rank + 1))
        opt.zero_grad()
        out = wrapped(inputs[mine].to(device))
        loss = torch.nn.functional.mse_loss(out, targets[mine].to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in wrapped.module.state_dict().items()}


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def check_ddp_against_gloo(local_rank: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    tpu = torch.device("tpu", local_rank)
    got = train(tiny_model(), tpu, rank, world, device_ids=[local_rank])
    # The world group is bound to tpu:LOCAL_RANK (device_id), which its subgroups inherit: name a
    # backend for tpu too, while CPU tensors go through Gloo.
    gloo = dist.new_group(backend="cpu:gloo,tpu:tpu_dist", timeout=TIMEOUT)
    assert gloo._get_backend(torch.device("cpu")).name() == "gloo"
    assert dist.group.WORLD._get_backend(tpu).name() == "tpu_dist"  # the default for tpu
    want = train(tiny_model(), torch.device("cpu"), rank, world, process_group=gloo)
    torch.testing.assert_close(torch.tensor(got[0]), torch.tensor(want[0]), rtol=1e-5, atol=1e-5)
    for name, value in want[1].items():
        torch.testing.assert_close(got[1][name], value, rtol=1e-5, atol=1e-5, msg=name)
    dist.destroy_process_group(gloo)


def check_device_mesh(local_rank: int) -> None:
    world = dist.get_world_size()
    mesh = init_device_mesh("tpu", (world,), mesh_dim_names=("dp",))
    assert mesh.device_type == "tpu"
    x = torch.full((3,), float(dist.get_rank() + 1), device=torch.device("tpu", local_rank))
    dist.all_reduce(x, group=mesh.get_group("dp"))
    torch.testing.assert_close(x.cpu(), torch.full((3,), float(sum(range(1, world + 1)))))
    assert torch.tpu.current_device() == local_rank


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    results = Results(int(os.environ["RANK"]))
    results.case("numbering", lambda: check_numbering(local_rank, local_world))
    results.case("other_ranks_chip", lambda: check_other_ranks_chip(local_rank, local_world))
    # No backend name: the default for tpu (tpu_dist), bound to this process's chip.
    dist.init_process_group(device_id=torch.device("tpu", local_rank), timeout=TIMEOUT)
    results.case("ddp_against_gloo", lambda: check_ddp_against_gloo(local_rank))
    results.case("device_mesh", lambda: check_device_mesh(local_rank))
    results.save()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
