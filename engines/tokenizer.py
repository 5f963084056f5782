"""Text <-> token ids with Hugging Face ``tokenizers`` (``tokenizer.json``, no transformers).

The engine directory holds the checkpoint's ``tokenizer.json`` (``venus export`` copies it
and lists it in the manifest, so it is verified like the graphs). Ids below ``text_vocab``
(the backbone's upstream text vocabulary) are text; Venus's special tokens come after it
(``manifest.special_tokens``) and are the daemon's business, never text: ``decode`` skips
them. ``decode`` also skips ids the tokenizer does not know (a ``venus init`` tokenizer
has only the 256 byte symbols; upstream vocabularies are padded past their last token) and
the upstream tokenizer's own special tokens, so every id the backbone can emit decodes
without error. ``encode`` adds no special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tokenizers import Tokenizer as HFTokenizer

from venus.errors import EngineError

TOKENIZER_FILE: Final = "tokenizer.json"


class Tokenizer:
    """One ``tokenizer.json``, shared by every stream (it holds no per-stream state)."""

    def __init__(self, tokenizer: HFTokenizer, text_vocab: int, source: str) -> None:
        self.hf, self.text_vocab, self.source = tokenizer, text_vocab, source

    @classmethod
    def open(cls, path: Path, text_vocab: int) -> Tokenizer:
        """Load ``path`` (a ``tokenizer.json``); EngineError naming it if missing or corrupt."""
        try:
            tokenizer = HFTokenizer.from_str(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EngineError(f"{path}: no such file; re-run `venus export`") from None
        except (OSError, UnicodeDecodeError) as e:
            raise EngineError(f"{path}: unreadable tokenizer ({e}); re-run `venus export`") from e
        except Exception as e:  # tokenizers raises plain Exception for a bad tokenizer.json
            raise EngineError(
                f"{path}: not a Hugging Face tokenizer.json ({e}); re-run `venus export`"
            ) from e
        return cls(tokenizer, text_vocab, str(path))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added; every id is below ``text_vocab``."""
        ids: list[int] = self.hf.encode(text, add_special_tokens=False).ids
        if ids and max(ids) >= self.text_vocab:
            raise EngineError(
                f"{self.source}: encoding gave id {max(ids)}, outside the backbone's text "
                f"vocabulary of {self.text_vocab}; the tokenizer does not belong to these "
                "engines (re-run `venus export` from the matching checkpoint)"
            )
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special-token ids (>= ``text_vocab``) and unknown ids are skipped."""
        text = [i for i in ids if 0 <= i < self.text_vocab]
        # tokenizers itself skips ids outside its vocabulary, and with skip_special_tokens
        # the upstream's own markup (Qwen's <|im_end|>, ...), which is never to be spoken.
        # Bytes that are not valid UTF-8 on their own (half a character) decode to U+FFFD.
        out: str = self.hf.decode(text, skip_special_tokens=True)
        return out
