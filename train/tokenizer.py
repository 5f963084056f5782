"""The tiny model's text tokenizer: a byte-level BPE trained on the set's own text.

``venus init`` writes a byte tokenizer (one token a byte, ids 256-511 unused): a chunk's
words then take 16-27 tokens, over the daemon's 16-token text budget. A byte-level BPE
with the same 256 byte symbols and 256 merges learned from the training set's replies,
delegation spans and results fills the text vocabulary (512 for ``tiny``) and halves
that. Every UTF-8 string still encodes and decodes back exactly (the ByteLevel
pre-tokenizer and decoder, as the daemon's ``engines/tokenizer.py`` reads them).
``tokenizers`` (Hugging Face, already a dependency) trains it; its trainer is
deterministic for the same texts in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = ["load_tokenizer", "train_tokenizer"]


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE of ``vocab_size`` ids (256 bytes + merges) over ``texts``."""
    if vocab_size < 256:
        raise ValueError(f"a byte-level BPE needs at least 256 ids, not {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))
