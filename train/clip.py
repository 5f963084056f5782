"""Gradient clipping for ``venus train`` (``train.clip``).

``"all"`` (the default, what every recipe so far used) clips the gradient of every
trained parameter together to a norm of 1. Then the largest gradient sets the scale of
all: when the speech decoder's or the text's is large, the listening head's CTC gradient
on the audio encoder is scaled down with it (docs/training-log.md, third round: the same CTC
alone reached 75% CER in 375 steps, jointly it sat on its plateau for 600).
``"component"`` clips each trained component (``audio_encoder``, ``backbone``, ...) and
the listening head apart, each to a norm of 1, so no component's gradient shrinks
another's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["CLIP_MODES", "MAX_NORM", "clip_gradients"]

CLIP_MODES = ("all", "component")
MAX_NORM = 1.0


def clip_gradients(groups: Mapping[str, Sequence[torch.nn.Parameter]], mode: str) -> None:
    """Clip the gradients of ``groups`` (component name -> its trained parameters) in
    place, together (``"all"``) or each group apart (``"component"``)."""
    if mode == "all":
        torch.nn.utils.clip_grad_norm_([p for g in groups.values() for p in g], MAX_NORM)
    elif mode == "component":
        for params in groups.values():
            torch.nn.utils.clip_grad_norm_(list(params), MAX_NORM)
    else:
        raise ValueError(f"clip mode {mode!r}: not one of {', '.join(CLIP_MODES)}")
