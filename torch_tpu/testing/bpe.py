"""A byte-level BPE tokenizer trained here on given text, for tests, recipes and benches that
must not reach a model hub."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def train_byte_level_bpe(documents: Iterable[str], vocab_size: int, special: list[str]) -> Any:
    """A `tokenizers.Tokenizer` (deterministic for the same documents)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer
