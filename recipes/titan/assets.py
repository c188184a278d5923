"""Small stand-ins for the files TorchTitan keeps outside its wheel.

TorchTitan's debug recipe reads a tokenizer from ``tests/assets/tokenizer`` and a tiny C4 sample
from ``tests/assets/c4_test``; neither ships in ``torchtitan==0.3.0``'s wheel, and this machine
has no hub access. ``make_assets(dir)`` writes both, deterministically: a byte-level BPE
tokenizer trained here on generated text (at most 2048 tokens, the debug model's vocabulary;
the small corpus fills about 500), and a JSON-lines corpus that
``datasets.load_dataset(dir, split="train")`` reads offline.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

VOCAB_SIZE = 2048
_WORDS = (
    "the a an of to in on for with by from tensor device compile graph kernel shard gather "
    "reduce scatter layer attention token model train step loss gradient optimizer weight "
    "batch sequence rank process mesh parallel data pipeline checkpoint resume seed value "
    "memory cache buffer stream event host compute matrix vector scalar float integer"
).split()


def _sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(20, 120))]
        lines.append(" ".join(words).capitalize() + ".")
    return lines


def make_assets(root: str | Path) -> tuple[Path, Path]:
    """Writes ``root/tokenizer`` and ``root/c4_test``; returns their paths. Idempotent."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(root)
    tokenizer_dir, dataset_dir = root / "tokenizer", root / "c4_test"
    if (tokenizer_dir / "tokenizer.json").exists() and (dataset_dir / "train.jsonl").exists():
        return tokenizer_dir, dataset_dir
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    dataset_dir.mkdir(parents=True, exist_ok=True)

    documents = _sentences(2000, seed=0)
    # (torch_tpu.testing.bpe trains the same way, but importing torch_tpu would load the device
    # into the CPU reference run, which must run without it: see compat.select_device.)
    special = ["<|begin_of_text|>", "<|end_of_text|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
    config = {
        "bos_token": special[0],
        "eos_token": special[1],
        "add_bos_token": True,
        "add_eos_token": True,
    }
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps(config))

    with open(dataset_dir / "train.jsonl", "w") as out:
        for text in documents:
            out.write(json.dumps({"text": text}) + "\n")
    return tokenizer_dir, dataset_dir
