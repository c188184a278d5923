"""Eager modes side by side, from one run: Strict, Debug and DeferAndFuse on tpu, and torch
CPU eager.

    .venv/bin/python bench/eager_modes.py

Prints: dispatch overhead per op; an elementwise chain of 50 ops over 4M floats; a small
transformer training step; a tiny GPT's greedy generate loop (static KV cache); and, where
transformers is installed, compiles per token of Hugging Face's generate with its default
dynamic cache.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

import torch_tpu
from torch_tpu.testing.tiny_gpt import TinyGPT, tiny_lm_training_step

MODES = ("strict", "debug", "defer_and_fuse")


def timed(fn: Callable[[], object], sync: Callable[[], None], repeats: int = 5) -> float:
    """Median seconds of fn() followed by sync(), after one warm-up. The result is held until
    after the sync: a result nobody holds is dead code that DeferAndFuse never computes."""
    result = fn()
    sync()
    del result
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        sync()
        samples.append(time.perf_counter() - start)
        del result
    return statistics.median(samples)


def tpu_sync() -> None:
    torch.tpu.synchronize()


def no_sync() -> None:
    pass


def chain(a: torch.Tensor) -> torch.Tensor:
    """50 cheap elementwise ops: each reads and writes the whole array, so memory traffic,
    which fusion removes, dominates."""
    for _ in range(10):
        a = a * 1.0001
        a = a + 0.5
        a = torch.maximum(a, a * 0.5)
        a = a - 0.25
    return torch.tanh(a) + a


def row(
    name: str, values: dict[str, float], unit: str, base: str, higher_is_better: bool = False
) -> None:
    """One table row; the ratios say how many times faster than `base` each mode is."""
    cells = " ".join(f"{values.get(k, float('nan')):>14.3f}" for k in (*MODES, "cpu eager"))
    ratios = " ".join(
        f"{(values[k] / values[base] if higher_is_better else values[base] / values[k]):>6.2f}x"
        for k in MODES
    )
    print(f"{name:<34} {cells}   {unit:<10} {ratios}")


def main() -> None:
    header = " ".join(f"{k:>14}" for k in (*MODES, "cpu eager"))
    print(f"{'':<34} {header}   {'unit':<10} speed vs {'strict'}: " + " ".join(MODES))

    # 1. Dispatch overhead: a 4x4 add, enqueue only (a cache hit every time).
    a_cpu = torch.randn(4, 4)
    a = a_cpu.to("tpu")
    overhead: dict[str, float] = {}
    for mode in MODES:
        torch_tpu.set_eager_mode(mode)
        overhead[mode] = timed(lambda: [a + a for _ in range(2000)], tpu_sync) / 2000 * 1e6
    overhead["cpu eager"] = (
        timed(lambda: [a_cpu + a_cpu for _ in range(2000)], no_sync) / 2000 * 1e6
    )
    torch_tpu.set_eager_mode("strict")
    row("dispatch: add 4x4 (per op)", overhead, "us/op", "strict")

    # 2. Elementwise chain over 4M floats.
    x_cpu = torch.randn(4 * 1024 * 1024)
    x = x_cpu.to("tpu")
    chains: dict[str, float] = {}
    for mode in MODES:
        torch_tpu.set_eager_mode(mode)
        chains[mode] = timed(lambda: chain(x), tpu_sync) * 1e3
    chains["cpu eager"] = timed(lambda: chain(x_cpu), no_sync) * 1e3
    torch_tpu.set_eager_mode("strict")
    row("elementwise chain, 50 ops x 4M f32", chains, "ms", "strict")

    # 3. A small transformer's training step (forward, backward, AdamW, loss.item()).
    steps: dict[str, float] = {}
    for mode in MODES:
        torch_tpu.set_eager_mode(mode)
        step = tiny_lm_training_step("tpu")
        step()
        steps[mode] = timed(step, tpu_sync) * 1e3
    torch_tpu.set_eager_mode("strict")
    steps["cpu eager"] = timed(tiny_lm_training_step("cpu"), no_sync) * 1e3
    row("transformer training step", steps, "ms/step", "strict")

    # 4. Greedy generate with a static KV cache: tokens per second.
    torch.manual_seed(0)
    cpu_model = TinyGPT(dim=64).eval()
    tpu_model = TinyGPT(dim=64).eval().to("tpu")
    tpu_model.load_state_dict(cpu_model.state_dict())
    prompt, new_tokens = [1, 2, 3, 4], 24
    tokens_per_s: dict[str, float] = {}
    compiles_per_token: dict[str, float] = {}
    for mode in MODES:
        torch_tpu.set_eager_mode(mode)
        tpu_model.generate(prompt, new_tokens)  # warm
        torch_tpu.reset_metrics()
        seconds = timed(lambda: tpu_model.generate(prompt, new_tokens), tpu_sync, repeats=3)
        tokens_per_s[mode] = new_tokens / seconds
        compiles_per_token[mode] = torch_tpu.metrics()["compiles"] / (4 * new_tokens)
    torch_tpu.set_eager_mode("strict")
    tokens_per_s["cpu eager"] = new_tokens / timed(
        lambda: cpu_model.generate(prompt, new_tokens), no_sync, repeats=3
    )
    row("tiny GPT generate (static cache)", tokens_per_s, "tokens/s", "strict", True)
    tokens_per_s_speed = tokens_per_s["defer_and_fuse"] / tokens_per_s["strict"]
    print(
        f"{'  compiles per token after warm-up':<34} "
        + " ".join(f"{compiles_per_token[m]:>14.2f}" for m in MODES)
    )

    # 5. Hugging Face generate with the default dynamic cache (shapes grow every token).
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("\n(transformers not installed: skipping the dynamic-cache row)")
    else:
        config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=128)
        torch.manual_seed(0)
        hf = GPT2LMHeadModel(config).eval().to("tpu")
        ids = torch.tensor([[1, 2, 3, 4]], device="tpu")
        per_token: dict[str, float] = {}
        for mode in MODES:
            torch_tpu.set_eager_mode(mode)
            torch_tpu._C._clear_cache()  # each mode starts cold: every compile is counted
            torch_tpu.reset_metrics()
            hf.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)
            per_token[mode] = torch_tpu.metrics()["compiles"] / 16
        torch_tpu.set_eager_mode("strict")
        print(
            f"{'HF GPT-2 generate, dynamic cache':<34} "
            + " ".join(f"{per_token[m]:>14.2f}" for m in MODES)
            + "   compiles/token (cold cache, 16 new tokens)"
        )

    print(
        f"\nDeferAndFuse vs Strict: chain {chains['strict'] / chains['defer_and_fuse']:.2f}x, "
        f"training step {steps['strict'] / steps['defer_and_fuse']:.2f}x, "
        f"generate {tokens_per_s_speed:.2f}x"
    )


if __name__ == "__main__":
    main()
