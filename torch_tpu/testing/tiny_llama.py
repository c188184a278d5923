"""A small Llama saved as a local model directory, for serving tests and benches without hub
access: a Hugging Face config, seeded weights (safetensors), a byte-level BPE tokenizer trained
here on generated text, and a chat template."""

from __future__ import annotations

import random
from pathlib import Path

VOCAB_SIZE = 512
_WORDS = (
    "the a of to in on for with device tensor compile graph kernel token model cache batch "
    "request server stream queue prefix block page decode prefill sample greedy router load "
    "metric gauge latency throughput"
).split()
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def _sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 40))) for _ in range(count)]


def make_tiny_llama(
    root: str | Path, *, layers: int = 2, hidden: int = 64, initializer_range: float = 0.5
) -> Path:
    """Writes the model directory under ``root`` (idempotent) and returns its path. Every
    size shares one tokenizer (trained from the same seeded text), so a small one can draft
    for a larger one. `initializer_range` is the weights' standard deviation: the default's
    wide logits make greedy decoding independent of summation order; a narrower one gives
    logits closer together, as trained models have."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from torch_tpu.testing.bpe import train_byte_level_bpe

    suffix = "" if initializer_range == 0.5 else f"-init{initializer_range:g}"
    path = Path(root) / f"tiny-llama-{layers}x{hidden}{suffix}"
    if (path / "model.safetensors").exists() and (path / "tokenizer.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)

    special = ["<s>", "</s>"]
    tokenizer = train_byte_level_bpe(_sentences(500, seed=0), VOCAB_SIZE, special)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=special[0], eos_token=special[1]
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        # Wide weights make the next-token logits far apart, so greedy decoding picks the
        # same token under any summation order.
        initializer_range=initializer_range,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, safe_serialization=True)
    return path
