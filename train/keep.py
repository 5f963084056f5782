"""Which validated step the exportable checkpoint holds (``train.keep``).

With ``train.keep = "last"`` every validation takes the checkpoint; with
``"balanced_events"`` only one that beats every earlier validation on the overlap events,
holds and the rest weighed apiece (``validation.balanced_events``), so a run that drifts
toward holding through everything late on keeps its better step (docs/training-log.md,
twenty-first round). ``state.pt`` records ``Kept.best`` so that a resumed run keeps
choosing among the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from venus.train.loop import TrainResult

__all__ = ["Kept"]


@dataclass
class Kept:
    """Which validated step the exportable checkpoint holds (``train.keep``): ``best`` is
    its step, score and validation (kept in ``state.pt`` to resume with)."""

    keep: str
    best: dict[str, Any] | None = None

    def score(self, metrics: dict[str, float]) -> float | None:
        """A validation's standing (higher is better); None takes every step ("last", or a
        validation split without overlap events)."""
        if self.keep == "balanced_events" and metrics.get("events"):
            return metrics["balanced_event_accuracy"]
        return None

    def offer(self, step: int, metrics: dict[str, float]) -> str:
        """Take ``step`` if it beats the checkpoint (the earliest of equals stays): "" when
        taken, else the line saying why the checkpoint stays."""
        score = self.score(metrics)
        if self.best is None or score is None or score > self.best["score"]:
            self.best = {"step": step, "score": score, "metrics": metrics}
            return ""
        return (f"train: the checkpoint stays step {self.best['step']}'s (train.keep = "
                f"{self.keep}: {100 * self.best['score']:.1f}%, this step "
                f"{100 * score:.1f}%)")  # fmt: skip

    def result(self, last: TrainResult) -> TrainResult:
        """``last`` (the run as it ended) with the checkpoint's step and validation."""
        if self.best is None:  # stopped before the first validation
            return last
        return replace(last, metrics=self.best["metrics"], kept=self.best["step"])

    def which(self, last: int) -> str:
        """The checkpoint's step in words, when it is not ``last``."""
        if self.best is None or self.best["step"] == last:
            return ""
        return f", step {self.best['step']}'s (train.keep = {self.keep})"
