"""``train.listen_only``: the audio encoder and its listening head trained alone.

The listening loss (``heard.py``) shares the joint run with the decision, text and
speech losses, and sat on CTC's blank plateau for 600 steps there (docs/training-log.md,
third round); alone it reached 75% CER in 375 steps, and venus-tiny's listening stage
left the plateau between steps 250 and 500 (ninth round). A listen-only run is the first of two
stages: it trains the audio encoder and the head on the user's turns, nothing else,
and its checkpoint starts the full recipe (``venus train --init``, which also takes the
head from its ``train/state.pt``).

A step does not run whole samples. Each user turn becomes a ``Segment``: its chunks'
log-mel, from ``left_context_chunks`` chunks before the turn (the window the daemon's
encoder has there) to ``POST_S`` after it, and the turn's text. The encoder computes
each chunk from its own window (``encode_chunk_frames``), so a segment's frames over
the turn are the ones the full sample would give; zero chunks padded after a shorter
segment change none of them. ``batch_size`` counts turns here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from venus.export.model.venus import VenusModel
from venus.train.augment import MelAugment, augment_mel
from venus.train.batch import MEL_FRAMES_PER_S, Losses
from venus.train.data import Example
from venus.train.heard import (
    POST_S,
    PRE_S,
    Heard,
    HeardResult,
    ListenHead,
    character_errors,
    heard_loss,
    shifted,
)

__all__ = ["Segment", "listen_losses", "listening_line", "measure_listening", "segments"]

NO_AUGMENT = MelAugment()  # the log-mel as it is


@dataclass(frozen=True)
class Segment:
    """One user turn with the log-mel it is heard in (module doc)."""

    mel: NDArray[np.float32]  # [n_mels, chunks * mel frames per chunk]
    heard: Heard  # in the segment's chunk units
    chunks: int


def segments(examples: Sequence[Example], model: VenusModel) -> list[Segment]:
    """Every whole user turn of ``examples``, as a ``Segment``, in order."""
    per_mel = model.cfg.mel_frames_per_chunk
    chunk_s = per_mel / MEL_FRAMES_PER_S
    left = model.audio_encoder.cfg.left_context_chunks
    out = []
    for e in examples:
        n = e.mel.shape[1] // per_mel
        for h in shifted(e.heard, e.start, n):
            lo = max(0, math.floor(h.start - PRE_S / chunk_s) - left)
            hi = min(n, math.ceil(h.end + POST_S / chunk_s))
            if hi <= lo:
                continue
            mel = e.mel[:, lo * per_mel : hi * per_mel]
            turn = Heard(h.start - lo, h.end - lo, h.text, h.labels)
            out.append(Segment(mel, turn, hi - lo))
    return out


def _collate(segs: Sequence[Segment]) -> tuple[Tensor, list[int]]:
    """The segments' log-mel, zero-padded to the longest: ([B, n_mels, frames], chunks)."""
    longest = max(s.mel.shape[1] for s in segs)
    mel = np.zeros((len(segs), segs[0].mel.shape[0], longest), np.float32)
    for i, s in enumerate(segs):
        mel[i, :, : s.mel.shape[1]] = s.mel
    return torch.from_numpy(mel), [s.chunks for s in segs]


def listen_losses(
    model: VenusModel,
    head: ListenHead,
    segs: Sequence[Segment],
    augment: MelAugment = NO_AUGMENT,
    generator: torch.Generator | None = None,
) -> Losses:
    """The listening loss of ``segs`` as the run's ``Losses`` (no decision or text: their
    counts are 0), their log-mel changed by ``augment`` with ``generator``'s draws (the
    segments' own frames only; ``augment.py``). An empty batch cannot happen: every
    segment holds its turn."""
    mel, chunks = _collate(segs)
    if augment:
        frames = [s.mel.shape[1] for s in segs]
        mel = augment_mel(mel, frames, augment, generator or torch.Generator())
    heard = _heard(model, head, segs, mel, chunks)
    zero = heard.loss.new_zeros(())
    return Losses(heard.loss, zero, zero, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, heard=heard)


def _heard(
    model: VenusModel, head: ListenHead, segs: Sequence[Segment], mel: Tensor, chunks: list[int]
) -> HeardResult:
    """The listening loss of ``segs`` over their collated log-mel (``_collate``)."""
    per_mel = model.cfg.mel_frames_per_chunk
    device = next(model.parameters()).device
    _tokens, frames = model.audio_encoder.encode_chunk_frames(mel.to(device))
    result = heard_loss(head, frames, [(s.heard,) for s in segs], chunks,
                        model.audio_encoder.frames_per_chunk,
                        chunk_s=per_mel / MEL_FRAMES_PER_S)  # fmt: skip
    if result is None:  # every segment spans its turn's frames (segments())
        raise AssertionError("listening batch without a turn")
    return result


def measure_listening(
    model: VenusModel, head: ListenHead, segs: Sequence[Segment], size: int
) -> dict[str, float]:
    """The listening figures on ``segs`` (no gradient): CTC loss per turn, the character
    error rate of the head's greedy transcripts, and the turns counted."""
    was = model.training
    model.eval()
    ctc = edits = chars = 0.0
    with torch.no_grad():
        for i in range(0, len(segs), size):
            part = segs[i : i + size]
            heard = _heard(model, head, part, *_collate(part))
            ctc += float(heard.loss) * heard.turns
            for ref, hyp in zip(heard.texts, heard.transcripts(), strict=True):
                e, c = character_errors(ref, hyp)
                edits, chars = edits + e, chars + c
    model.train(was)
    return {
        "ctc_loss": ctc / len(segs) if segs else 0.0,
        "heard_cer": edits / chars if chars else 0.0,
        "heard_turns": float(len(segs)),
    }


def listening_line(step: int, m: dict[str, float]) -> str:
    return (
        f"train: validation at step {step}: user speech CER {100 * m['heard_cer']:.1f}% "
        f"(CTC {m['ctc_loss']:.3f}, {m['heard_turns']:.0f} turns)"
    )
