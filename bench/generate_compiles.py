"""Compiles of a first greedy `generate` (a fresh process, an empty compile cache) as the
answer grows: a tiny Qwen3, without a cache (use_cache=False: the whole sequence rerun each
token, docs/design/buckets.md), with transformers' static cache (its decoding step compiled)
and with its default dynamic cache, in Strict and DeferAndFuse, with eager size buckets on
(the default) and off (TORCH_TPU_SIZE_BUCKETS=0). generate grows input_ids and positions by
torch.cat each token, and the dynamic cache its keys and values; at exact sizes each new
length compiles the cats, the ops reading the tensors' ends and attention (without a cache,
every op of the model), with buckets a few per power of two of the length. Every run's tokens
are checked against CPU.
On a GPU or TPU a compile of even a tiny program costs tens of ms, so these counts are most of
a first long answer's time there.

    .venv/bin/python bench/generate_compiles.py [--tokens 10 40 80] [--caches none static dynamic]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = (  # (cache, eager mode); "none": use_cache=False, the whole sequence rerun each token
    ("none", "strict"),
    ("static", "strict"),
    ("static", "defer_and_fuse"),
    ("dynamic", "strict"),
    ("dynamic", "defer_and_fuse"),
)


def run_one(cache: str, mode: str, checkpoints: list[int]) -> None:
    """In this process: one generate to the longest checkpoint, the compiles at each."""
    import torch
    import transformers

    import torch_tpu

    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=max(checkpoints) + 16,
    )
    cpu_model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model = copy.deepcopy(cpu_model).to("tpu")
    ids = torch.randint(0, 128, (1, 8))
    tokens = max(checkpoints)
    options: dict[str, object] = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    if cache == "static":
        options["cache_implementation"] = "static"
    if cache == "none":
        options["use_cache"] = False
    counts: dict[int, int] = {}
    start = torch_tpu.metrics()["compiles"]

    class Counter:
        """A streamer: generate hands it each new token, after the prompt."""

        seen = -1

        def put(self, value: torch.Tensor) -> None:
            self.seen += 1
            if self.seen in checkpoints:
                counts[self.seen] = torch_tpu.metrics()["compiles"] - start

        def end(self) -> None:
            pass

    with torch_tpu.eager_mode(mode):  # type: ignore[arg-type]
        out = model.generate(ids.to("tpu"), streamer=Counter(), **options).cpu()
    same = torch.equal(out, cpu_model.generate(ids, **options))
    print(json.dumps({"counts": counts, "same": same}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[10, 20, 40, 80])
    parser.add_argument("--caches", nargs="+", default=["none", "static", "dynamic"])
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # cache, mode: a child run
    args = parser.parse_args()
    if args.one:
        run_one(args.one[0], args.one[1], args.tokens)
        return
    head = " | ".join(f"{n} tokens" for n in args.tokens)
    print(f"| cache | mode | buckets | {head} | tokens equal CPU's |")
    print("|---|---|---|" + "---|" * len(args.tokens) + "---|")
    for cache, mode in CONFIGS:
        if cache not in args.caches:
            continue
        for buckets in ("off", "on"):
            env = dict(os.environ, TORCH_TPU_CACHE_DIR=tempfile.mkdtemp())
            env.pop("TPU_DEFER_AND_FUSE", None)
            if buckets == "off":
                env["TORCH_TPU_SIZE_BUCKETS"] = "0"
            command = [sys.executable, __file__, "--one", cache, mode, "--tokens"]
            done = subprocess.run(
                command + [str(n) for n in args.tokens],
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
                check=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            cells = " | ".join(str(result["counts"].get(str(n), "-")) for n in args.tokens)
            print(f"| {cache} | {mode} | {buckets} | {cells} | {result['same']} |")


if __name__ == "__main__":
    main()
