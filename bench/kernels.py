"""jax functions as ops next to the same math written with PyTorch ops, on tpu, from one run.

    .venv/bin/python bench/kernels.py [--iters 50]

Rows: RMSNorm and softmax over a [256, 4096] float32 tensor, forward and forward+backward, in
Strict and DeferAndFuse (each call read back with .cpu()), and compiled (torch.compile with
backend "tpu"); then the host cost of one cached call of a tiny op (4 elements) enqueued in
Strict mode, a built-in add next to a jax op doing the same add. Medians in milliseconds (µs for
dispatch); the ratio is jax op / torch ops. jax.jit on jax's own CPU runtime is the peer column.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch

import torch_tpu
from torch_tpu.kernels import jax_op


def rmsnorm_jax(x: Any, w: Any) -> Any:
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w


def softmax_jax(x: Any) -> Any:
    return jax.nn.softmax(x, axis=-1)


def rmsnorm_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def softmax_torch(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def median_ms(fn: Callable[[], Any], iters: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def forward_backward(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> Callable[[], Any]:
    leaves = [a.detach().clone().requires_grad_() for a in args]

    def step() -> Any:
        for leaf in leaves:
            leaf.grad = None
        fn(*leaves).sum().backward()
        return leaves[0].grad.cpu()

    return step


def runner(
    fn: Callable[..., torch.Tensor], mode: str, backward: bool, inputs: list[torch.Tensor]
) -> Callable[[], Any]:
    if mode == "compiled":
        fn = torch.compile(fn, backend="tpu")
    if backward:
        return forward_backward(fn, *inputs)
    return lambda: fn(*inputs).cpu()


def jax_peer(fn: Callable[..., Any], backward: bool, *args: torch.Tensor) -> Callable[[], Any]:
    arrays = [jnp.asarray(a.numpy()) for a in args]
    argnums = tuple(range(len(arrays)))
    compiled = jax.jit(jax.grad(lambda *a: fn(*a).sum(), argnums) if backward else fn)
    return lambda: jax.block_until_ready(compiled(*arrays))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    tpu = torch.device("tpu")
    x, w = torch.randn(256, 4096), torch.randn(4096)
    workloads = {
        "rmsnorm": (rmsnorm_torch, jax_op(rmsnorm_jax), rmsnorm_jax, (x, w)),
        "softmax": (softmax_torch, jax_op(softmax_jax), softmax_jax, (x,)),
    }
    print(
        f"{'workload':<22}{'mode':<14}{'torch ops ms':>14}{'jax op ms':>11}{'ratio':>8}"
        f"{'jax.jit cpu ms':>16}"
    )
    for name, (torch_fn, op, jax_fn, inputs) in workloads.items():
        on_tpu = [t.to(tpu) for t in inputs]
        for backward in (False, True):
            label = f"{name} {'fwd+bwd' if backward else 'fwd'}"
            peer = median_ms(jax_peer(jax_fn, backward, *inputs), args.iters)
            for mode in ("strict", "defer_and_fuse", "compiled"):
                with torch_tpu.eager_mode("strict" if mode == "compiled" else mode):
                    torch_ms = median_ms(runner(torch_fn, mode, backward, on_tpu), args.iters)
                    jax_ms = median_ms(runner(op, mode, backward, on_tpu), args.iters)
                print(
                    f"{label:<22}{mode:<14}{torch_ms:>14.3f}{jax_ms:>11.3f}"
                    f"{jax_ms / torch_ms:>7.2f}x{peer:>16.3f}"
                )

    add = jax_op(lambda a, b: a + b)
    a, b = torch.ones(4, device=tpu), torch.ones(4, device=tpu)
    calls = 2000
    with torch_tpu.eager_mode("strict"):
        per_call = {}
        for label, fn in (("built-in add", torch.add), ("jax op add", add)):
            for _ in range(10):
                fn(a, b)
            torch.tpu.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn(a, b)
            per_call[label] = (time.perf_counter() - start) / calls * 1e6
            torch.tpu.synchronize()
    print()
    print(f"{'dispatch (cached, Strict)':<28}{'µs per call':>12}")
    for label, us in per_call.items():
        print(f"{label:<28}{us:>12.2f}")
    ratio = per_call["jax op add"] / per_call["built-in add"]
    print(f"{'ratio jax op / built-in':<28}{ratio:>11.2f}x")


if __name__ == "__main__":
    main()
