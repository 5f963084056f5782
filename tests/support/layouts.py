"""The training tests' layout builder: the tiny preset's special tokens, text as bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def byte_builder() -> Callable[..., Any]:
    """A ``layout_builder`` for the tiny preset that encodes text one token a byte, with 8
    vision tokens a frame and 16 text tokens a chunk."""
    from venus.export.model.config import PRESETS
    from venus.train.data import layout_builder

    mc = PRESETS["tiny"]()
    return layout_builder(mc.special_token_ids, lambda t: list(t.encode()),
                          audio_tokens=mc.audio_tokens_per_chunk, vision_tokens=8,
                          max_text_tokens=16)  # fmt: skip
