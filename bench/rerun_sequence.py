"""A sequence rerun whole at every step as it grows by a word: pytorch/examples'
word_language_model generate with its Transformer (sequence first, no KV cache; its default
sizes: 200 wide, 2 heads, 2 layers, a 10,000-word vocabulary here), one word sampled per step.
Each step meets a new length: at exact sizes every op compiles anew; with eager size buckets
(the default) the tensors computed from the grown tokens stay in buckets
(docs/design/buckets.md, Sequences rerun whole). Per configuration, in a fresh process with an
empty compile cache: the first 70 words' time (lengths up to 70 meet the buckets up to 128),
then ms, compiles and executions per word over the next `--words` (lengths inside the bucket of
128), beside torch's own CPU eager.

    .venv/bin/python bench/rerun_sequence.py [--words 50]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

WARM = 70  # words before the measured ones
CONFIGS = (  # (device, eager size buckets)
    ("cpu", "-"),
    ("tpu", "off"),
    ("tpu", "on"),
)


def run_one(device: str, words: int) -> None:
    import torch
    import torch.nn.functional as F
    from torch import nn

    import torch_tpu

    class Model(nn.Module):
        def __init__(self, tokens: int = 10_000, width: int = 200) -> None:
            super().__init__()
            self.width = width
            self.embed = nn.Embedding(tokens, width)
            self.register_buffer("positions", torch.randn(5000, 1, width) * 0.1)
            layer = nn.TransformerEncoderLayer(width, 2, width, dropout=0.2)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.decoder = nn.Linear(width, tokens)

        def forward(self, source: torch.Tensor) -> torch.Tensor:
            x = self.embed(source) * math.sqrt(self.width)
            x = x + self.positions[: x.size(0)]
            return F.log_softmax(self.decoder(self.encoder(x)), dim=-1)

    torch.manual_seed(0)
    model = Model().eval().to(device)
    ids = torch.randint(10_000, (1, 1)).to(device)

    def counts() -> dict[str, int]:
        return torch_tpu.metrics() if device == "tpu" else {"compiles": 0, "executions": 0}

    marks = []
    with torch.no_grad():
        for word in range(WARM + words):
            if word in (0, WARM):
                marks.append((time.perf_counter(), counts()))
            weights = model(ids)[-1].squeeze().exp().cpu()
            token = torch.multinomial(weights, 1)[0]
            ids = torch.cat([ids, torch.tensor([[token]]).to(device)], 0)
    end, last = time.perf_counter(), counts()
    (start, _), (middle, mid) = marks
    print(
        json.dumps(
            {
                "first_s": middle - start,
                "ms": (end - middle) / words * 1e3,
                "compiles": (last["compiles"] - mid["compiles"]) / words,
                "executions": (last["executions"] - mid["executions"]) / words,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=50)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # device: a child run
    args = parser.parse_args()
    if args.one:
        run_one(args.one, args.words)
        return
    print(
        f"| device | size buckets | first {WARM} words (s) | ms/word after | "
        "compiles/word | executions/word | vs CPU eager |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    cpu_ms = None
    for device, buckets in CONFIGS:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=tempfile.mkdtemp())
        if buckets == "off":
            env["TORCH_TPU_SIZE_BUCKETS"] = "0"
        done = subprocess.run(
            [sys.executable, __file__, "--one", device, "--words", str(args.words)],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        cpu_ms = cpu_ms or result["ms"]
        print(
            f"| {device} | {buckets} | {result['first_s']:.1f} | {result['ms']:.1f} | "
            f"{result['compiles']:.2f} | {result['executions']:.0f} | "
            f"{result['ms'] / cpu_ms:.1f}x |"
        )


if __name__ == "__main__":
    main()
