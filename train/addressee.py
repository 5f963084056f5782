"""Whom the speech a chunk hears is for: an auxiliary loss at the decision positions.

The decision an overlap event calls for (yield to an interruption, carry on through an
aside) depends on whom the words were said to. A linear probe on the shipped venus-tiny
(docs/training-log.md, eighteenth round) found that the audio tokens of the event
separate an aside from an interruption far better (83-87% of held-out events, balanced)
than the backbone's hidden state at the decision does (68-73%, and the model's own
decisions 68%): the words are heard, but the decision does not read them. The decision
loss says so in one chunk per event; this loss says it in every chunk in which someone
speaks. A linear head (``AddresseeHead``) reads the backbone's hidden state at each
chunk's decision position and cross-entropy scores the class of the speech heard in that
chunk (``CLASSES``); chunks in which nobody but the assistant speaks are not scored. Nearly
nine in ten scored chunks are speech to the assistant (the user's questions), and a head
that always says so is right as often: the classes are weighted by the inverse of their
share of the training set's chunks (``class_weights``), so that the few chunks of asides
count as much in all as the many of questions, and validation reports the mean of the
classes' recalls (chance 25%).

Like the listening head (heard.py) it exists only in training: the checkpoint and the
engines never see it, so the daemon's computation is unchanged; only what the backbone
learns to keep at its decisions is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

__all__ = [
    "CLASSES",
    "NONE",
    "AddresseeHead",
    "addressee_loss",
    "balanced_accuracy",
    "chunk_addressees",
    "class_weights",
]

# the class of a turn's role; the assistant's own turns have none
CLASSES = ("to the assistant", "to someone else", "backchannel", "background")
ROLE_CLASS = {
    "question": 0, "request": 0, "interruption": 0,
    "aside": 1,
    "backchannel": 2,
    "tv_line": 3, "room_speech": 3,
}  # fmt: skip
NONE = -1  # a chunk nobody but the assistant speaks in


class AddresseeHead(nn.Module):
    """Hidden state at a decision -> logits over ``CLASSES``; ``weights`` (a buffer: a
    resumed run keeps its own) weigh the classes in the loss."""

    def __init__(self, hidden: int, weights: Tensor | None = None) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, len(CLASSES))
        self.weights: Tensor
        self.register_buffer("weights", torch.ones(len(CLASSES)) if weights is None else weights)

    def forward(self, hidden: Tensor) -> Tensor:
        out: Tensor = self.proj(hidden)
        return out


def chunk_addressees(
    turns: Iterable[Mapping[str, Any]], chunks: int, chunk_s: float
) -> tuple[int, ...]:
    """Per chunk, the class of the speech heard in it (``ROLE_CLASS``), or ``NONE``:
    of the turns a chunk hears any of, the one that ends last (the most recent words)."""
    best: list[tuple[float, int]] = [(-1.0, NONE)] * chunks
    for t in turns:
        cls = ROLE_CLASS.get(str(t.get("role")), NONE)
        if cls == NONE:
            continue
        start, end = float(t["start_s"]), float(t["end_s"])
        first = max(0, int(start // chunk_s))
        for k in range(first, min(chunks, int(end // chunk_s) + 1)):
            if start < (k + 1) * chunk_s and end > k * chunk_s and end > best[k][0]:
                best[k] = (end, cls)
    return tuple(cls for _, cls in best)


def class_weights(per_example: Iterable[tuple[int, ...]]) -> Tensor:
    """Each class's weight: the scored chunks over (classes x that class's chunks), so that
    every class counts alike in all; 1 for a class the examples lack."""
    counts = torch.zeros(len(CLASSES))
    for labels in per_example:
        for c in labels:
            if c != NONE:
                counts[c] += 1
    total = float(counts.sum())
    return torch.where(counts > 0, total / (len(CLASSES) * counts.clamp(min=1)), 1.0)


def addressee_loss(
    head: AddresseeHead, hidden: Tensor, labels: Tensor
) -> tuple[Tensor, tuple[int, ...], tuple[int, ...]]:
    """Cross-entropy of ``head`` on ``hidden`` [D, H] against ``labels`` [D] (``NONE``
    not scored), its classes weighted by ``head.weights``; -> (loss, chunks scored per
    class, right per class). The loss is 0 with a gradient path when nothing is scored."""
    scored = labels != NONE
    none = (0,) * len(CLASSES)
    if not bool(scored.any()):
        return head(hidden[:0]).sum() * 0, none, none
    logits = head(hidden[scored])
    target = labels[scored]
    hit = logits.argmax(dim=1) == target
    per = torch.bincount(target, minlength=len(CLASSES))
    right = torch.bincount(target[hit], minlength=len(CLASSES))
    loss = F.cross_entropy(logits, target, weight=head.weights)
    return loss, tuple(int(x) for x in per), tuple(int(x) for x in right)


def balanced_accuracy(scored: Iterable[float], right: Iterable[float]) -> float:
    """The mean of the classes' recalls, over the classes that were scored."""
    recalls = [r / n for n, r in zip(scored, right, strict=True) if n]
    return sum(recalls) / len(recalls) if recalls else 0.0
