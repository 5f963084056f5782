"""Choosing the next token from logits, built from named parts (whisper-style).

A ``Sampler`` applies an optional ``LogitBias`` (e.g. toward ``<|listen|>``), then an
optional ``Constraint`` (e.g. the control decision is made among control tokens only),
then a ``choose`` strategy (``Greedy`` or ``TopP``)::

    Sampler(bias=LogitBias({listen: 1.5}), constraint=Constraint(control_ids), choose=Greedy())

Logits are one row ``[vocab]`` (float, any precision); scores are float64 internally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from venus.errors import EngineError

Scores = NDArray[np.float64]


class Choice(Protocol):
    """Picks one token id from scores [vocab] (-inf marks tokens that must not be chosen)."""

    def __call__(self, scores: Scores) -> int: ...


@dataclass(frozen=True)
class Greedy:
    """The highest score (the lowest id among ties)."""

    def __call__(self, scores: Scores) -> int:
        return int(np.argmax(scores))


@dataclass
class TopP:
    """Nucleus sampling: softmax(scores / temperature), then draw from the smallest set of
    most probable tokens whose probabilities sum to at least ``top_p``.

    ``rng`` is this stream's seeded generator (same seed, same draws).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise EngineError(f"TopP temperature {self.temperature} must be > 0; use Greedy()")
        if not 0 < self.top_p <= 1:
            raise EngineError(f"TopP top_p {self.top_p} must be in (0, 1]")

    def probabilities(self, scores: Scores) -> Scores:
        """softmax(scores / temperature) [vocab], 0 where the score is -inf."""
        z = scores / self.temperature
        e = np.exp(z - np.max(z))
        out: Scores = e / e.sum()
        return out

    def nucleus(self, scores: Scores) -> NDArray[np.intp]:
        """Token ids of the nucleus, most probable first."""
        probs = self.probabilities(scores)
        order = np.argsort(-probs, kind="stable")
        order = order[probs[order] > 0]
        cumulative = np.cumsum(probs[order])
        keep = int(np.searchsorted(cumulative, self.top_p, side="left")) + 1
        return order[: min(keep, order.size)]

    def __call__(self, scores: Scores) -> int:
        ids = self.nucleus(scores)
        p = self.probabilities(scores)[ids]
        return int(self.rng.choice(ids, p=p / p.sum()))


@dataclass(frozen=True)
class LogitBias:
    """Adds ``bias[token]`` to that token's score (negative values discourage it)."""

    bias: Mapping[int, float]

    def __call__(self, scores: Scores) -> Scores:
        for token, value in self.bias.items():
            _check_id(token, scores.size, "LogitBias")
            scores[token] += value
        return scores


@dataclass(frozen=True)
class Constraint:
    """Only ``allowed`` token ids may be chosen (the rest get -inf)."""

    allowed: frozenset[int]

    @classmethod
    def of(cls, ids: Iterable[int]) -> Constraint:
        return cls(frozenset(int(i) for i in ids))

    def __call__(self, scores: Scores) -> Scores:
        if not self.allowed:
            raise EngineError("Constraint allows no token; give it at least one id")
        ids = np.fromiter(sorted(self.allowed), dtype=np.intp)
        for token in (int(ids[0]), int(ids[-1])):
            _check_id(token, scores.size, "Constraint")
        out = np.full_like(scores, -np.inf)
        out[ids] = scores[ids]
        return out


@dataclass
class Sampler:
    """bias -> constraint -> choose. Call with logits [vocab] -> token id."""

    choose: Choice = field(default_factory=Greedy)
    bias: LogitBias | None = None
    constraint: Constraint | None = None

    def scores(self, logits: NDArray[Any]) -> Scores:
        """The scores ``choose`` sees: float64 logits after bias and constraint."""
        if logits.ndim != 1:
            raise EngineError(f"sampler got logits of shape {logits.shape}; pass one row [vocab]")
        scores: Scores = np.array(logits, dtype=np.float64)
        if np.isnan(scores).any() or np.isposinf(scores).any():
            raise EngineError(
                "sampler got NaN or +inf logits; the engine output is broken (re-export it, "
                "or use fp32 precision if fp16 overflows)"
            )
        if self.bias is not None:
            scores = self.bias(scores)
        if self.constraint is not None:
            scores = self.constraint(scores)
        if not np.isfinite(scores).any():
            raise EngineError("every token is excluded (all scores -inf); relax the constraint")
        return scores

    def __call__(self, logits: NDArray[Any]) -> int:
        return self.choose(self.scores(logits))


def _check_id(token: int, vocab: int, what: str) -> None:
    if not 0 <= token < vocab:
        raise EngineError(f"{what}: token id {token} is outside the vocabulary [0, {vocab})")
