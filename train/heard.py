"""The listening loss: CTC on the audio encoder's frames over the user's words.

The tiny model often answers another question than the one asked (docs/training-log.md,
"Second round"): the decision and text losses reach the audio encoder only through the
backbone, and say little about which words were spoken. This auxiliary loss says it
directly. A linear head (``ListenHead``) reads the encoder's 50 Hz frames (before the
5x pooling into the backbone's tokens) over each user turn, from ``PRE_S`` before its
start to ``POST_S`` after its end, and CTC (``torch.nn.functional.ctc_loss``) scores
the turn's text, spelt in ``ALPHABET``. The head exists only in training: the
checkpoint and the exported engines never see it, so the daemon's computation is
unchanged; only what the encoder learns to put in its frames is.

Characters, not the tokenizer's pieces: the encoder gives 50 frames a second and users
speak about 16 characters a second (at most about 40), while the backbone's tokens come at
10 a second and the BPE pieces at up to 19. Turns are those of speaker ``user``; the
other people in the room and the background are not transcribed. A turn counts only when
the example holds all of it (a crop may start inside one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from venus.errors import VenusError

__all__ = [
    "ALPHABET",
    "Heard",
    "HeardResult",
    "ListenHead",
    "character_errors",
    "heard_loss",
    "heard_turns",
    "normalise",
    "shifted",
    "turn_frames",
]

ALPHABET = " 'abcdefghijklmnopqrstuvwxyz0123456789"  # class i + 1; 0 is CTC's blank
BLANK = 0
PRE_S = 0.1  # frames read before a turn's start
POST_S = 0.3  # and after its end (the encoder sees only the past: the last word needs it)
SPEAKER = "user"
ROUNDING = 1e-6  # frames (turn_frames)


@dataclass(frozen=True)
class Heard:
    """One user turn: its span in chunks (from the trajectory's start, or from the
    example's once ``shifted``), its normalised text and that text's classes."""

    start: float
    end: float
    text: str
    labels: tuple[int, ...]


def normalise(text: str) -> str:
    """Lower case, ``ALPHABET``'s characters only (others become spaces), single spaces."""
    kept = "".join(c if c in ALPHABET else " " for c in text.lower())
    return re.sub(r" +", " ", kept).strip()


def heard_turns(turns: Iterable[Mapping[str, Any]], chunk_s: float) -> tuple[Heard, ...]:
    """The user's turns in a trajectory, in chunk units."""
    out = []
    for t in turns:
        text = normalise(str(t.get("text", "")))
        if t.get("speaker") != SPEAKER or not text:
            continue
        labels = tuple(ALPHABET.index(c) + 1 for c in text)
        out.append(Heard(float(t["start_s"]) / chunk_s, float(t["end_s"]) / chunk_s, text, labels))
    return tuple(out)


def shifted(heard: Sequence[Heard], start: int, chunks: int) -> tuple[Heard, ...]:
    """The turns an example starting at trajectory chunk ``start``, ``chunks`` long,
    holds whole, in its own chunk units."""
    return tuple(
        Heard(h.start - start, h.end - start, h.text, h.labels)
        for h in heard
        if h.start >= start and h.end <= start + chunks
    )


class ListenHead(nn.Module):
    """Encoder frame -> log-probabilities over blank + ``ALPHABET`` (training only)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, len(ALPHABET) + 1)

    def forward(self, frames: Tensor) -> Tensor:
        out: Tensor = self.proj(frames).log_softmax(dim=-1)
        return out


@dataclass
class HeardResult:
    loss: Tensor  # CTC, per target character, averaged over the turns
    turns: int
    log_probs: Tensor  # [T, N, classes], detached
    lengths: list[int]  # frames per turn
    rows: list[int]  # per turn: its batch row
    said: list[Heard]  # per turn: the turn, in its row's chunks

    @property
    def texts(self) -> list[str]:
        """What was said, per turn."""
        return [h.text for h in self.said]

    def transcripts(self) -> list[str]:
        """Greedy CTC decoding (best class per frame, repeats merged, blanks dropped)."""
        best = self.log_probs.argmax(dim=-1).T.tolist()  # [N, T]
        out = []
        for row, n in zip(best, self.lengths, strict=True):
            chars, last = [], BLANK
            for c in row[:n]:
                if c not in (last, BLANK):
                    chars.append(ALPHABET[c - 1])
                last = c
            out.append(re.sub(r" +", " ", "".join(chars)).strip())
        return out


def turn_frames(h: Heard, chunks: int, frames_per_chunk: int, chunk_s: float) -> tuple[int, int]:
    """The encoder frames [lo, hi) read for turn ``h`` of a ``chunks``-chunk example:
    from ``PRE_S`` before it to ``POST_S`` after it, within the example."""
    pre, post = PRE_S / chunk_s * frames_per_chunk, POST_S / chunk_s * frames_per_chunk
    # Within ROUNDING of a frame's edge is on it: a turn's span in another example's chunk
    # units (``shifted``) has its float error and must read the same frames.
    lo = max(0, math.floor(h.start * frames_per_chunk - pre + ROUNDING))
    hi = math.ceil(h.end * frames_per_chunk + post - ROUNDING)
    return lo, min(chunks * frames_per_chunk, hi)


def heard_loss(
    head: ListenHead,
    frames: Tensor,
    heard: Sequence[Sequence[Heard]],
    chunks: Sequence[int],
    frames_per_chunk: int,
    chunk_s: float = 1.0,
) -> HeardResult | None:
    """CTC over every turn of ``heard`` (per batch row, in that row's chunk units; the row
    is ``chunks`` long) on ``frames`` [B, max chunks * frames_per_chunk, d]; None when the
    batch holds no turn."""
    spans: list[tuple[int, int, int, Heard]] = []
    for row, (turns, n) in enumerate(zip(heard, chunks, strict=True)):
        for h in turns:
            lo, hi = turn_frames(h, n, frames_per_chunk, chunk_s)
            if hi > lo:
                spans.append((row, lo, hi, h))
    if not spans:
        return None
    x = nn.utils.rnn.pad_sequence([frames[r, lo:hi] for r, lo, hi, _ in spans])  # [T, N, d]
    log_probs = head(x)
    lengths = [hi - lo for _, lo, hi, _ in spans]
    targets = torch.tensor(
        [c for *_, h in spans for c in h.labels], dtype=torch.long, device=log_probs.device
    )
    loss = F.ctc_loss(
        log_probs,
        targets,
        torch.tensor(lengths, dtype=torch.long),
        torch.tensor([len(h.labels) for *_, h in spans], dtype=torch.long),
        blank=BLANK,
        reduction="mean",
        zero_infinity=True,  # a turn spoken faster than the frames can spell scores 0
    )
    return HeardResult(
        loss,
        len(spans),
        log_probs.detach(),
        lengths,
        [r for r, *_ in spans],
        [h for *_, h in spans],
    )


def character_errors(reference: str, heard: str) -> tuple[int, int]:
    """(edits, reference characters) between two normalised texts (``jiwer``)."""
    try:
        import jiwer
    except ImportError as exc:  # the export extra has it; a hand-made environment may not
        raise VenusError(
            "train.ctc_weight's validation counts character errors with jiwer: "
            "pip install 'realtime-venus[export]' (or jiwer)"
        ) from exc

    if not reference or not heard:
        return len(heard or reference), len(reference)
    out = jiwer.process_characters(reference, heard)
    return out.substitutions + out.deletions + out.insertions, len(reference)
