"""What the serving tests share: prompts and transformers' CPU reference."""

from __future__ import annotations

from pathlib import Path

PROMPTS = [
    "the device",
    "a token of the model cache batch request with a queue",
    "greedy",
    "prefix block page decode prefill sample greedy router load metric gauge latency",
]


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
