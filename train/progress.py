"""What a `venus train` run reports as it goes: a record per step in ``history.jsonl``,
the progress line, and the curves (``loss.png``)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from venus.train.batch import Losses
from venus.train.runlog import pyplot

__all__ = ["Pace", "plot_history", "step_line", "step_record"]


def step_record(step: int, total: float, losses: Losses, lr: float) -> dict[str, float]:
    """A step's line of ``history.jsonl``: the losses it computed (a listen-only step
    has no decision or text loss, ``listen.py``)."""
    record = {"step": step, "loss": round(total, 5), "lr": lr}
    if losses.decisions:
        record |= {"decision_loss": round(float(losses.decision), 5),
                   "text_loss": round(float(losses.text), 5)}  # fmt: skip
    if losses.speech is not None:
        record["speech_loss"] = round(float(losses.speech), 5)
    if losses.heard is not None:
        record["ctc_loss"] = round(float(losses.heard.loss.detach()), 5)
    if losses.addressee is not None:
        record["addressee_loss"] = round(float(losses.addressee), 5)
    return record


class Pace:
    """Seconds a step over the run's recent steps (about the last ``window_s``), for the
    progress line and its ETA. An average since the start carried every pause for the rest
    of the run: a process stopped for a test run, a validation, a busy machine. Here a
    pause weighs on the rate for ``window_s`` and fades."""

    def __init__(self, step: int, window_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.window_s, self.clock = window_s, clock
        self.marks: deque[tuple[float, int]] = deque([(clock(), step)])

    def rate(self, step: int) -> float:
        """Seconds a step from the oldest mark in the window to now, at ``step``."""
        now = self.clock()
        self.marks.append((now, step))
        while len(self.marks) > 2 and now - self.marks[1][0] >= self.window_s:
            self.marks.popleft()
        then, first = self.marks[0]
        return (now - then) / max(1, step - first)


def step_line(step: int, steps: int, total: float, losses: Losses, rate: float) -> str:
    parts = []
    if losses.decisions:
        parts += [f"decision {float(losses.decision):.3f}", f"text {float(losses.text):.3f}"]
    if losses.speech is not None:
        parts.append(f"speech {float(losses.speech):.3f}")
    if losses.heard is not None:
        parts.append(f"ctc {float(losses.heard.loss.detach()):.3f}")
    if losses.addressee is not None:
        parts.append(f"addressee {float(losses.addressee):.3f}")
    return (
        f"train: step {step}/{steps} loss {total:.3f} ({', '.join(parts)}), "
        f"{rate:.2f} s/step, ETA {rate * (steps - step):.0f} s"
    )


def plot_history(history: Path, png: Path) -> bool:
    """Training losses per step and validation figures per checkpoint, as a PNG; False
    (and a warning) without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    rows = [json.loads(line) for line in history.read_text("utf-8").splitlines() if line]
    steps = [r for r in rows if "loss" in r]
    vals = [r for r in rows if "validation" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for key, label in (("loss", "total"), ("decision_loss", "decision"), ("text_loss", "text"),
                       ("speech_loss", "speech"), ("ctc_loss", "listening (CTC)"),
                       ("addressee_loss", "addressee")):  # fmt: skip
        have = [r for r in steps if key in r]
        if have:
            a.plot([r["step"] for r in have], [r[key] for r in have], label=label, linewidth=0.8)
    a.set_xlabel("step")
    a.set_ylabel("training loss")
    a.legend()
    for key in ("control_accuracy", "control_chance", "speak_recall", "turn_accuracy",
                "hold_accuracy", "after_hold_accuracy", "text_accuracy", "opening_accuracy",
                "first_token_accuracy", "call_accuracy", "reading_accuracy", "speech_accuracy",
                "speech_closed_accuracy", "heard_cer", "addressee_accuracy"):  # fmt: skip
        have = [r for r in vals if key in r["validation"]]
        if have:
            b.plot([r["step"] for r in have], [r["validation"][key] for r in have], marker="o",
                   label=key.replace("_", " "))  # fmt: skip
    b.set_xlabel("step")
    b.set_ylabel("validation")
    b.set_ylim(0, 1)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return True
