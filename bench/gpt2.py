"""Where compute matters: a GPT-2-small-sized model training with bf16 autocast and AdamW, in
tokens/s and MFU, on tpu (compiled, DeferAndFuse, Strict) next to what a user would run
instead: torch CUDA eager and inductor where CUDA is visible (a GPU machine), torch CPU eager
(the CPU size only) and jax.jit (the same model in jax, from the same parameters).

    .venv/bin/python bench/gpt2.py                      # the CPU-sized variant (this machine)
    python3 bench/gpt2.py --size small --steps 20       # GPT-2 small (scripts/device_check.sh)

The model is torch_tpu.testing.tiny_gpt.TinyGPT (pre-norm blocks, GELU MLP, learned positions)
with its head tied to the token embedding as GPT-2's is: at ``--size small`` 12 layers, 768
wide, 12 heads, 1024 positions and a 50304-token vocabulary, 124M parameters. Each column
builds the model from the same seed, checks its first loss against torch CPU eager in float32
(bf16 tolerance), warms up, then times ``--steps`` steps without reading anything back until
the last one. Columns run one after another (not interleaved), each freeing its model before
the next, so that a GPU holds one model at a time. jax computes the whole forward in bf16 from
float32 master parameters (autocast keeps norms and softmax in float32: the same matmuls).

MFU: (6 N + 12 L d T) FLOPs per token (N parameters without the position table, L layers, d
width, T tokens per sequence: PaLM's estimate, as nanoGPT computes it) over the chip's dense
bf16 peak (``--peak-tflops``, else known from the GPU's name); "-" where the peak is unknown.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import torch_tpu
from torch_tpu.testing.tiny_gpt import TinyGPT

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (its set-up: jax's own XLA flags; its jax GPT and AdamW)

jax, jnp = peers.jax, peers.jnp
Array = jax.Array


@dataclass(frozen=True)
class Size:
    vocab: int
    dim: int
    heads: int
    layers: int
    seq: int
    batch: int


SIZES = {
    "cpu": Size(vocab=512, dim=128, heads=4, layers=2, seq=64, batch=8),
    "small": Size(vocab=50304, dim=768, heads=12, layers=12, seq=1024, batch=16),
}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}
LR = 3e-4


def make_model(size: Size) -> TinyGPT:
    torch.manual_seed(0)
    model = TinyGPT(
        vocab=size.vocab, dim=size.dim, heads=size.heads, layers=size.layers, max_len=size.seq
    )
    model.head.weight = model.embed.weight  # tied, as GPT-2's
    nn.init.normal_(model.embed.weight, std=0.02)  # GPT-2's scale: the tied logits start small
    return model


def batch(size: Size) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.randint(
        0, size.vocab, (size.batch, size.seq + 1), generator=torch.Generator().manual_seed(1)
    )
    return data[:, :-1], data[:, 1:]


def flops_per_token(model: nn.Module, size: Size) -> float:
    params = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    return 6.0 * params + 12.0 * size.layers * size.dim * size.seq


@dataclass
class Column:
    label: str
    device: str  # "tpu", "cuda", "cpu" or "jax"
    backend: str | None = None
    mode: str = "strict"


def sync(device: str) -> None:
    if device == "tpu":
        torch.tpu.synchronize()
    elif device == "cuda":
        torch.cuda.synchronize()


def torch_step(column: Column, size: Size) -> Callable[[], torch.Tensor]:
    model = make_model(size).to(column.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    inputs, targets = (t.to(column.device) for t in batch(size))
    autocast_device = "tpu" if column.device == "tpu" else column.device

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        with torch.autocast(autocast_device, dtype=torch.bfloat16):
            logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        return loss

    return torch.compile(step, backend=column.backend) if column.backend else step


def jax_step(size: Size) -> Callable[[], object]:
    model = make_model(size)
    # The tied head is the embedding: one parameter, as in torch.
    params = {name: jnp.asarray(p.detach().numpy()) for name, p in model.named_parameters()}

    def loss_fn(
        p: dict[str, peers.jax.Array], inputs: peers.jax.Array, targets: peers.jax.Array
    ) -> peers.jax.Array:
        low = {name: value.astype(jnp.bfloat16) for name, value in p.items()}
        low["head.weight"] = low["embed.weight"]
        logits = peers.jax_gpt_forward(low, inputs, heads=size.heads).astype(jnp.float32)
        return peers.jax_cross_entropy(logits, targets)

    zeros = {name: jnp.zeros_like(p) for name, p in params.items()}
    state: list[peers.AdamState] = [
        (params, zeros, {n: jnp.zeros_like(p) for n, p in params.items()}, jnp.zeros(()))
    ]
    inputs, targets = (jnp.asarray(t.numpy()) for t in batch(size))
    jitted = jax.jit(functools.partial(peers.jax_adamw_step, loss_fn=loss_fn), donate_argnums=0)

    def step() -> object:
        state[0], loss = jitted(state[0], inputs, targets)
        return loss

    return step


def measure(column: Column, size: Size, warmup: int, steps: int, reference: float) -> float:
    """Tokens per second over `steps` steps, after checking the first loss."""
    if column.device == "tpu":
        torch_tpu.set_eager_mode(column.mode)  # type: ignore[arg-type]
    try:
        step = jax_step(size) if column.device == "jax" else torch_step(column, size)
        first = float(step().detach()) if column.device != "jax" else float(step())  # type: ignore[union-attr, arg-type]
        if abs(first - reference) > 2e-2 * abs(reference):
            raise AssertionError(f"first loss {first:.5f}, torch CPU float32 {reference:.5f}")
        for _ in range(warmup):
            last = step()
        wait(column, last)
        start = time.perf_counter()
        for _ in range(steps):
            last = step()
        wait(column, last)
        seconds = time.perf_counter() - start
    finally:
        if column.device == "tpu":
            torch_tpu.set_eager_mode("strict")
        gc.collect()
    return steps * size.batch * size.seq / seconds


def wait(column: Column, last: object) -> None:
    if column.device == "jax":
        jax.block_until_ready(last)
    else:
        sync(column.device)


def columns(size_name: str) -> list[Column]:
    chosen = [
        Column("tpu compiled", "tpu", backend="tpu"),
        Column("tpu DeferAndFuse", "tpu", mode="defer_and_fuse"),
        Column("tpu Strict", "tpu"),
    ]
    if torch.cuda.is_available():
        chosen += [
            Column("torch CUDA eager", "cuda"),
            Column("torch CUDA inductor", "cuda", "inductor"),
        ]
    if size_name == "cpu":
        chosen.append(Column("torch CPU eager", "cpu"))
    return [*chosen, Column("jax.jit", "jax")]


def peak_tflops(given: float | None) -> float | None:
    if given is not None:
        return given
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        for key, value in PEAK_BF16_TFLOPS.items():
            if key in name:
                return value
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per column")
    parser.add_argument("--warmup", type=int, default=3, help="steps after the checked first")
    parser.add_argument("--columns", help="comma-separated column labels (default: all)")
    parser.add_argument("--peak-tflops", type=float, help="the chip's dense bf16 peak")
    args = parser.parse_args()
    size = SIZES[args.size]

    reference_model = make_model(size)
    inputs, targets = batch(size)
    reference = nn.functional.cross_entropy(
        reference_model(inputs).flatten(0, 1), targets.flatten()
    ).item()
    per_token = flops_per_token(reference_model, size)
    params = sum(p.numel() for p in reference_model.parameters())
    del reference_model
    peak = peak_tflops(args.peak_tflops)
    print(
        f"GPT ({args.size}): {size.layers} layers x {size.dim}, {size.heads} heads, "
        f"{size.batch}x{size.seq} tokens, vocab {size.vocab}, {params / 1e6:.1f}M parameters; "
        f"bf16 autocast, AdamW; first loss (torch CPU float32) {reference:.4f}"
    )
    wanted = None if args.columns is None else {c.strip() for c in args.columns.split(",")}
    results: dict[str, float | str] = {}
    for column in columns(args.size):
        if wanted is not None and column.label not in wanted:
            continue
        try:
            results[column.label] = measure(column, size, args.warmup, args.steps, reference)
        except Exception as error:  # a failed column is reported, not fatal
            results[column.label] = f"err: {type(error).__name__}: {str(error)[:100]}"
        print(f"  {column.label:<20} {results[column.label]}", flush=True)

    jax_rate = results.get("jax.jit")
    # x jax.jit: tokens/s over jax's (>1: faster than jax).
    print(f"\n{'column':<22}{'tokens/s':>12}{'MFU':>8}{'x jax.jit':>11}")
    for label, rate in results.items():
        if isinstance(rate, str):
            print(f"{label:<22}{rate}")
            continue
        mfu = f"{100 * rate * per_token / (peak * 1e12):.1f}%" if peak else "-"
        ratio = f"{rate / jax_rate:.2f}x" if isinstance(jax_rate, float) else "-"
        print(f"{label:<22}{rate:>12.0f}{mfu:>8}{ratio:>11}")


if __name__ == "__main__":
    main()
