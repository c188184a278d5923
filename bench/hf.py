"""Hugging Face on tpu next to CPU, from one run.

    .venv/bin/python bench/hf.py [--layers 8] [--new-tokens 16]

Prints three tables:
- loading a saved Llama (about 200 MB of float32 weights) with from_pretrained: peak host
  memory growth (anonymous and file-backed resident memory) and device memory
  (torch.tpu.max_memory_allocated) for device_map="tpu" next to loading on the CPU. On the CPU
  plugin device buffers are host memory, so they count in the anonymous column too;
- greedy generate of a Llama of about 100 M parameters (built from a config): tokens/s on tpu
  in Strict, DeferAndFuse, and with the compiled static cache, next to CPU eager;
- transformers.Trainer steps/s on tpu next to CPU on a small Llama.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import torch
import transformers

import torch_tpu

TPU = torch.device("tpu")


def llama_config(layers: int, hidden: int = 768) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 192 or 1,
        max_position_embeddings=512,
    )


def resident_bytes() -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes of this process. Loading maps the safetensors
    file: its pages are file-backed (page cache, reclaimable); copies are anonymous."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["RssAnon"], fields["RssFile"]


class PeakRss:
    """Samples the process's resident memory every millisecond while the block runs."""

    def __enter__(self) -> PeakRss:
        self.base = self.peak = resident_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._take()
            time.sleep(0.001)

    def _take(self) -> None:
        now = resident_bytes()
        self.peak = (max(self.peak[0], now[0]), max(self.peak[1], now[1]))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def growth_mb(self, kind: int) -> float:
        return (self.peak[kind] - self.base[kind]) / 2**20


def bench_loading(directory: Path) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(llama_config(layers=2))
    model.save_pretrained(directory)
    size_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    del model
    print(f"\n## Loading a saved Llama ({size_mb:.0f} MB of weights, safetensors)\n")
    print(
        "| device_map | seconds | peak host growth, anonymous (MB) | peak host growth, file"
        " pages (MB) | peak device (MB) |"
    )
    print("|---|---|---|---|---|")
    for device_map in ("cpu", "tpu"):
        torch.tpu.reset_peak_memory_stats()
        device_before = torch.tpu.memory_allocated()
        start = time.perf_counter()
        with PeakRss() as rss:
            loaded = transformers.AutoModelForCausalLM.from_pretrained(
                directory, device_map=device_map
            )
            torch.tpu.synchronize()
        seconds = time.perf_counter() - start
        device_mb = (torch.tpu.max_memory_allocated() - device_before) / 2**20
        print(
            f"| {device_map} | {seconds:.2f} | {rss.growth_mb(0):.0f} | {rss.growth_mb(1):.0f}"
            f" | {device_mb:.0f} |"
        )
        del loaded


def tokens_per_second(
    model: torch.nn.Module, ids: torch.Tensor, new_tokens: int, **kw
) -> tuple[float, float, int]:
    """Tokens/s of a warm generate, and the first (cold) call's seconds and compiles."""
    options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **kw)
    compiles = torch_tpu.metrics()["compiles"] if ids.device.type == "tpu" else 0
    start = time.perf_counter()
    model.generate(ids, **options).cpu()  # the first call compiles
    first = time.perf_counter() - start
    if ids.device.type == "tpu":
        compiles = torch_tpu.metrics()["compiles"] - compiles
    start = time.perf_counter()
    model.generate(ids, **options).cpu()
    return new_tokens * ids.shape[0] / (time.perf_counter() - start), first, compiles


def bench_generate(layers: int, new_tokens: int) -> None:
    torch.manual_seed(0)
    cpu_model = transformers.AutoModelForCausalLM.from_config(llama_config(layers)).eval()
    params = sum(p.numel() for p in cpu_model.parameters()) / 1e6
    ids = torch.randint(0, 32000, (1, 16))
    print(f"\n## Greedy generate, Llama {params:.0f} M parameters, {new_tokens} new tokens\n")
    # The first call's compiles grow with log2 of the length (size buckets), not per token.
    print("| run | tokens/s | vs CPU eager | first call s | first call compiles |")
    print("|---|---|---|---|---|")
    cpu, cpu_first, _ = tokens_per_second(cpu_model, ids, new_tokens)
    print(f"| CPU eager | {cpu:.1f} | 1.00x | {cpu_first:.2f} | - |")
    model = cpu_model.to(TPU)
    tpu_ids = ids.to(TPU)
    runs = (
        ("tpu Strict", "strict", {}),
        ("tpu DeferAndFuse", "defer_and_fuse", {}),
        ("tpu compiled static cache", "strict", {"cache_implementation": "static"}),
    )
    for label, mode, options in runs:
        torch_tpu.set_eager_mode(mode)
        rate, first, compiles = tokens_per_second(model, tpu_ids, new_tokens, **options)
        print(f"| {label} | {rate:.1f} | {rate / cpu:.2f}x | {first:.2f} | {compiles} |")
    torch_tpu.set_eager_mode("strict")


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, count: int, length: int) -> None:
        self.ids = torch.randint(0, 32000, (count, length), generator=torch.Generator())

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def trainer_steps_per_second(use_cpu: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(llama_config(layers=2, hidden=256))
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=4,
        max_steps=steps,
        learning_rate=1e-4,
        report_to=[],
        save_strategy="no",
        use_cpu=use_cpu,
        disable_tqdm=True,
        logging_steps=steps,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenDataset(256, 64))
    trainer.train()  # warm-up (compiles every op once)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenDataset(256, 64))
    start = time.perf_counter()
    trainer.train()
    return steps / (time.perf_counter() - start)


def bench_trainer(steps: int) -> None:
    print(f"\n## transformers.Trainer, Llama 2x256, batch 4 x 64 tokens, {steps} steps\n")
    print("| device | steps/s | vs CPU |")
    print("|---|---|---|")
    cpu = trainer_steps_per_second(use_cpu=True, steps=steps)
    print(f"| CPU | {cpu:.2f} | 1.00x |")
    tpu = trainer_steps_per_second(use_cpu=False, steps=steps)
    print(f"| tpu (Strict) | {tpu:.2f} | {tpu / cpu:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8, help="generate model depth")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--trainer-steps", type=int, default=10)
    args = parser.parse_args()
    print(f"plugin: {torch_tpu.plugin_path()}")
    with tempfile.TemporaryDirectory() as directory:
        bench_loading(Path(directory))
    bench_generate(args.layers, args.new_tokens)
    bench_trainer(args.trainer_steps)


if __name__ == "__main__":
    main()
