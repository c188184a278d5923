"""What the serving tests share: prompts and transformers' CPU reference."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PROMPTS = [
    "the device",
    "a token of the model cache batch request with a queue",
    "greedy",
    "prefix block page decode prefill sample greedy router load metric gauge latency",
]


def tiny_engine(model: Path, **options: Any) -> Any:
    """vLLM's offline engine over a tiny test model with the tests' small budget (float32, 256
    tokens, 8 sequences, a 32 MiB KV cache, seed 0), its engine core in this process so that
    torch_tpu.metrics() count its compiles; `options` add to or replace LLM's arguments."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    settings: dict[str, Any] = {
        "dtype": "float32",
        "max_model_len": 256,
        "max_num_batched_tokens": 256,
        "max_num_seqs": 8,
        "kv_cache_memory_bytes": 32 << 20,
        "seed": 0,
    }
    return LLM(model=str(model), **{**settings, **options})


def cpu_greedy(model_dir: Path, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """transformers' greedy generate on CPU: the reference tokens (EOS included, then stop)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    results = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        results.append(out[0, ids.shape[1] :].tolist())
    return results


def make_deeper_llama(draft_dir: Path, root: Path, extra_layers: int, scale: float) -> Path:
    """A larger Llama that a small one (`draft_dir`) can draft for: the small one's weights
    and tokenizer, plus `extra_layers` seeded layers whose outputs (attention's o_proj and the
    MLP's down_proj) are scaled by `scale`. At 0 the extra layers add nothing and the larger
    model predicts what the small one does; above 0 it departs from it now and then."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    path = root / f"deeper-{draft_dir.name}-{extra_layers}-{scale:g}"
    if (path / "model.safetensors").exists():
        return path
    small = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
    config = small.config
    config.num_hidden_layers += extra_layers
    torch.manual_seed(1)
    large = LlamaForCausalLM(config)
    missing, _ = large.load_state_dict(small.state_dict(), strict=False)
    assert all(".layers." in name for name in missing), missing
    with torch.no_grad():
        for layer in large.model.layers[-extra_layers:]:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)
    large.save_pretrained(path, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (draft_dir / name).exists():
            shutil.copy(draft_dir / name, path / name)
    return path
