"""Diffusers' diffusion transformer (DiT, ``DiTTransformer2DModel``), tiny and randomly
initialized, trained under FSDP2 on tpu with tpu_dist (or on CPU with Gloo, the reference).

Run under torchrun, e.g.::

    torchrun --nproc-per-node 2 recipes/diffusion/train_dit.py --device tpu --steps 10 --out /tmp/d

Each step is DiT's own training objective: class-conditional latents noised at a random
timestep of a linear beta schedule (DDPM), the transformer predicting the noise (the first half
of its learned-sigma output), mean squared error, AdamW. Every rank draws the same model (seed
0, on CPU, then moved) and its own share of each step's batch from one generator, so runs on
either device see the same numbers. ``--out`` gets ``losses.json`` (the loss averaged over the
ranks, per step) and ``steps.json`` (when each was logged, in seconds, and on tpu the running
counts of executions and host syncs), both from rank 0.

TorchTitan 0.3.0's own diffusion recipe (``torchtitan.models.flux``) needs the FLUX.1
autoencoder, T5-XXL and CLIP from the Hugging Face hub and the cc12m data: not runnable on a
machine without hub access. Needs the hf extra (diffusers).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

SAMPLE, CHANNELS, CLASSES, TIMESTEPS = 16, 4, 10, 1000
LABEL_DROPOUT = 0.1  # DiT's class_dropout_prob


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["tpu", "cpu"], default="tpu")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4, help="local batch size per rank")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="process group timeout (s)")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def tiny_dit(layers: int) -> Any:
    """A DiT-XL/2-shaped model at toy size: 16x16x4 latents in 2x2 patches (64 tokens), 2 heads
    of 32, adaptive layer norm conditioned on the timestep and the class."""
    from diffusers import DiTTransformer2DModel
    from diffusers.models.embeddings import LabelEmbedding

    model = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=32,
        in_channels=CHANNELS,
        out_channels=2 * CHANNELS,  # noise and the learned variance, as DiT
        num_layers=layers,
        sample_size=SAMPLE,
        patch_size=2,
        num_embeds_ada_norm=CLASSES,
    )
    # The label dropout of classifier-free guidance draws from the device's generator, which
    # differs between devices: batch() drops the same labels from its CPU generator instead.
    for module in model.modules():
        if isinstance(module, LabelEmbedding):
            module.dropout_prob = 0.0
    return model


def batch(step: int, rank: int, size: int, world: int) -> dict[str, Any]:
    """Step `step`'s global batch (one generator, the same on every device), `rank`'s share."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    total = size * world
    latents = torch.randn(total, CHANNELS, SAMPLE, SAMPLE, generator=g)
    noise = torch.randn(total, CHANNELS, SAMPLE, SAMPLE, generator=g)
    timesteps = torch.randint(0, TIMESTEPS, (total,), generator=g)
    labels = torch.randint(0, CLASSES, (total,), generator=g)
    # DiT's classifier-free guidance: 10% of the labels become the null class.
    labels = torch.where(torch.rand(total, generator=g) < LABEL_DROPOUT, CLASSES, labels)
    alphas = torch.cumprod(1 - torch.linspace(1e-4, 0.02, TIMESTEPS), 0)[timesteps]
    scale = alphas.sqrt()[:, None, None, None]
    noisy = scale * latents + (1 - alphas).sqrt()[:, None, None, None] * noise
    share = slice(rank * size, (rank + 1) * size)
    return {
        "noisy": noisy[share],
        "noise": noise[share],
        "timesteps": timesteps[share],
        "labels": labels[share],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.device == "cpu":
        # The reference runs without torch_tpu: loaded, it would be the accelerator of CPU
        # tensors' collectives.
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    timeout = datetime.timedelta(seconds=args.timeout)
    if args.device == "tpu":
        import torch_tpu

        dist.init_process_group("tpu_dist", timeout=timeout)
        torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
        device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    else:
        dist.init_process_group("gloo", timeout=timeout)
        device = torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = tiny_dit(args.layers).to(device)
    mesh = init_device_mesh(device.type, (world,))
    # A unit a block, but the first block stays with the root's parameters: DiT's output layer
    # calls its timestep and class embedding again after the blocks have run.
    for block in model.transformer_blocks[1:]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    losses: list[float] = []
    per_step: dict[str, list[float]] = {"logged_at": []}
    for step in range(args.steps):
        inputs = {k: v.to(device) for k, v in batch(step, rank, args.batch, world).items()}
        optimizer.zero_grad()
        output = model(
            inputs["noisy"], timestep=inputs["timesteps"], class_labels=inputs["labels"]
        ).sample
        loss = F.mse_loss(output[:, :CHANNELS], inputs["noise"])
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        losses.append(mean.item() / world)
        per_step["logged_at"].append(time.perf_counter())
        if args.device == "tpu":
            metrics = torch_tpu.metrics()
            for name in ("executions", "host_syncs"):
                per_step.setdefault(name, []).append(metrics[name])
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "losses.json").write_text(json.dumps(losses))
        (args.out / "steps.json").write_text(json.dumps(per_step))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
