"""Validation of a `venus train` run: the held-out examples teacher-forced, summed into
the figures ``train/metrics.json``, ``history.jsonl`` and the progress line report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from venus.export.model.venus import VenusModel
from venus.train.addressee import CLASSES, AddresseeHead, balanced_accuracy
from venus.train.batch import MEL_FRAMES_PER_S, collate, forward_losses
from venus.train.data import Example
from venus.train.heard import Heard, ListenHead, character_errors

__all__ = ["evaluate", "validation_line"]

# the sums ``evaluate`` keeps: the ``Losses`` count each adds up
COUNTS = {
    "d": "decisions", "d_right": "decisions_right", "speak": "speak_targets",
    "speak_right": "speak_right", "said": "speak_said", "t": "text_tokens",
    "t_right": "text_right", "o": "opening_tokens", "o_right": "opening_right",
    "f": "first_tokens", "f_right": "first_right", "c": "choice_tokens",
    "c_right": "choice_right", "arg": "argument_tokens", "arg_right": "argument_right",
    "v": "argument_values", "v_right": "argument_values_right",
    "turns": "turns", "turns_right": "turns_right",
    "e": "events", "e_right": "events_right", "h": "holds", "h_right": "holds_right",
    "a": "afters", "a_right": "afters_right", "r": "reading_tokens", "r_right": "reading_right",
    "cp": "copied_tokens", "cp_right": "copied_right",
}  # fmt: skip


def evaluate(
    model: VenusModel,
    examples: Sequence[Example],
    control: Sequence[int],
    size: int,
    speech_ids: tuple[int, int] | None = None,
    listen: ListenHead | None = None,
    addressee: AddresseeHead | None = None,
    heard_turns: list[dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Validation figures: losses, control accuracy (and its majority-class chance),
    speak precision / recall, the decisions where an overlap event is decided (speaking or
    not as the data does; and of those, the holds that carry on through it; and the
    decisions carrying on in the two chunks after a hold), next-text-token accuracy (of a
    reply's first chunk, and of its first token: which answer was chosen; of the token
    naming a call's capability: which tool it picked; and of its argument values, whole
    and by token); with ``speech_ids``, the speech decoder's loss and next-unit accuracy,
    teacher-forced and closed loop (fed its own units, as in the daemon); with ``listen``,
    the listening loss and the character error rate of its greedy transcripts of the
    user's turns (and, into ``heard_turns``, each turn: its sample, its span in seconds,
    what was said, what the head heard and the turn's CER); with ``addressee``, how often
    its head names whom a chunk's speech is for."""
    was = model.training
    device = next(model.parameters()).device
    model.eval()
    sums = dict.fromkeys(("decision", "text", "speech", "s", "s_right", "ctc", "heard",
                          "edits", "chars", "s_closed", *COUNTS), 0.0)  # fmt: skip
    whom = [[0.0] * len(CLASSES), [0.0] * len(CLASSES)]  # scored, right: per class
    with torch.no_grad():
        for i in range(0, len(examples), size):
            batch = collate(examples[i : i + size], speech_ids).to(device)
            losses = forward_losses(model, batch, control, listen=listen, closed_loop=True,
                                    addressee=addressee)  # fmt: skip
            heard = losses.heard
            if heard is not None:
                sums["ctc"] += float(heard.loss.detach()) * heard.turns
                sums["heard"] += heard.turns
                for hyp, row, turn in zip(heard.transcripts(), heard.rows, heard.said,
                                          strict=True):  # fmt: skip
                    edits, chars = character_errors(turn.text, hyp)
                    sums["edits"] += edits
                    sums["chars"] += chars
                    if heard_turns is not None:
                        heard_turns.append(_turn(examples[i + row], turn, hyp, edits, chars,
                                                 model.cfg.mel_frames_per_chunk))  # fmt: skip
            if losses.speech is not None:
                sums["speech"] += float(losses.speech) * losses.speech_tokens
                sums["s"] += losses.speech_tokens
                sums["s_right"] += losses.speech_right
                sums["s_closed"] += losses.speech_closed_right
            sums["decision"] += float(losses.decision) * losses.decisions
            sums["text"] += float(losses.text) * losses.text_tokens
            for key, name in COUNTS.items():
                sums[key] += getattr(losses, name)
            for k, (n, r) in enumerate(zip(losses.addressed, losses.addressed_right, strict=True)):
                whom[0][k] += n
                whom[1][k] += r
    model.train(was)

    def ratio(a: float, b: float) -> float:
        return a / b if b else 0.0

    listened = sums["d"] - sums["speak"]
    speech = {}
    if listen is not None:
        speech = {
            "ctc_loss": ratio(sums["ctc"], sums["heard"]),
            "heard_cer": ratio(sums["edits"], sums["chars"]),
            "heard_turns": sums["heard"],
        }
    if addressee is not None:
        speech["addressee_accuracy"] = balanced_accuracy(whom[0], whom[1])
        speech["addressed"] = sum(whom[0])
        speech["aside_recall"] = ratio(whom[1][1], whom[0][1])
        speech["asides_addressed"] = whom[0][1]
    if speech_ids is not None:
        speech |= {
            "speech_loss": ratio(sums["speech"], sums["s"]),
            "speech_accuracy": ratio(sums["s_right"], sums["s"]),
            "speech_closed_accuracy": ratio(sums["s_closed"], sums["s"]),
            "speech_tokens": sums["s"],
        }
    return speech | {
        "decision_loss": ratio(sums["decision"], sums["d"]),
        "text_loss": ratio(sums["text"], sums["t"]),
        "control_accuracy": ratio(sums["d_right"], sums["d"]),
        "control_chance": ratio(max(listened, sums["speak"]), sums["d"]),
        "speak_recall": ratio(sums["speak_right"], sums["speak"]),
        "speak_precision": ratio(sums["speak_right"], sums["said"]),
        "turn_accuracy": ratio(sums["turns_right"], sums["turns"]),
        "event_accuracy": ratio(sums["e_right"], sums["e"]),
        "balanced_event_accuracy": balanced_events(sums),
        "hold_accuracy": ratio(sums["h_right"], sums["h"]),
        "after_hold_accuracy": ratio(sums["a_right"], sums["a"]),
        "after_holds": sums["a"],
        "events": sums["e"],
        "holds": sums["h"],
        "text_accuracy": ratio(sums["t_right"], sums["t"]),
        "opening_accuracy": ratio(sums["o_right"], sums["o"]),
        "first_token_accuracy": ratio(sums["f_right"], sums["f"]),
        "call_accuracy": ratio(sums["c_right"], sums["c"]),
        "reading_accuracy": ratio(sums["r_right"], sums["r"]),
        "reading_tokens": sums["r"],
        "copied_accuracy": ratio(sums["cp_right"], sums["cp"]),
        "copied_tokens": sums["cp"],
        "replies": sums["f"],
        "calls": sums["c"],
        "argument_accuracy": ratio(sums["arg_right"], sums["arg"]),
        "argument_tokens": sums["arg"],
        "argument_value_accuracy": ratio(sums["v_right"], sums["v"]),
        "argument_values": sums["v"],
        "decisions": sums["d"],
        "text_tokens": sums["t"],
    }


def _turn(
    example: Example, turn: Heard, heard: str, edits: int, chars: int, mel_per_chunk: int
) -> dict[str, Any]:
    """One user turn as ``evaluate`` reports it into ``heard_turns``: its span in the
    sample's seconds (``turn`` is in the example's chunks, from ``example.start``)."""
    chunk_s = mel_per_chunk / MEL_FRAMES_PER_S
    return {
        "sample_id": example.sample_id,
        "start_s": round((example.start + turn.start) * chunk_s, 3),
        "end_s": round((example.start + turn.end) * chunk_s, 3),
        "said": turn.text,
        "heard": heard,
        "cer": round(edits / chars, 4) if chars else 0.0,
    }


def balanced_events(sums: dict[str, float]) -> float:
    """The overlap events decided as the data does, the holds (carrying on through an aside,
    a backchannel, background speech) and the rest (yielding to an interruption ...) weighed
    apiece: the mean of the two accuracies, so that holding through everything does not
    score as most events are holds; the plain event accuracy when one side has none."""
    holds, rest = sums["h"], sums["e"] - sums["h"]
    if holds <= 0 or rest <= 0:
        return sums["e_right"] / sums["e"] if sums["e"] else 0.0
    return (sums["h_right"] / holds + (sums["e_right"] - sums["h_right"]) / rest) / 2


def validation_line(step: int, m: dict[str, float], what: str = "") -> str:
    """The figures in words; ``what`` replaces "train: validation at step N"."""
    speech = ""
    if "speech_loss" in m:
        speech = f", speech accuracy {100 * m['speech_accuracy']:.1f}%"
        if "speech_closed_accuracy" in m:
            speech += f" ({100 * m['speech_closed_accuracy']:.1f}% closed loop)"
    if "heard_cer" in m:
        speech += f", user speech CER {100 * m['heard_cer']:.1f}%"
    if m.get("addressed"):
        speech += (
            f", whom speech is for {100 * m['addressee_accuracy']:.1f}% of "
            f"{int(m['addressed'])} (classes' mean; asides {100 * m['aside_recall']:.1f}% of "
            f"{int(m['asides_addressed'])})"
        )
    what = what or f"train: validation at step {step}"
    calls = ""
    if m.get("calls"):
        calls = f", a call's tool {100 * m['call_accuracy']:.1f}% of {int(m['calls'])}"
    if m.get("argument_values"):
        calls += (
            f", its argument values {100 * m['argument_value_accuracy']:.1f}% of "
            f"{int(m['argument_values'])} (tokens {100 * m['argument_accuracy']:.1f}%)"
        )
    if m.get("reading_tokens"):
        calls += (
            f", a result read out {100 * m['reading_accuracy']:.1f}% of "
            f"{int(m['reading_tokens'])} tokens (those the result has "
            f"{100 * m.get('copied_accuracy', 0):.1f}% of {int(m.get('copied_tokens', 0))})"
        )
    events = ""
    if m.get("events"):
        events = (
            f", overlap events {100 * m['event_accuracy']:.1f}% of {int(m['events'])} "
            f"(holds {100 * m['hold_accuracy']:.1f}% of {int(m['holds'])}"
        )
        rest = m["events"] - m.get("holds", 0)
        if m.get("holds") and rest > 0 and "balanced_event_accuracy" in m:
            right = m["event_accuracy"] * m["events"] - m["hold_accuracy"] * m["holds"]
            events += (
                f", the rest {100 * right / rest:.1f}% of {int(rest)}, the two apiece "
                f"{100 * m['balanced_event_accuracy']:.1f}%"
            )
        if m.get("after_holds"):
            events += (
                f"; the 2 chunks after a hold {100 * m['after_hold_accuracy']:.1f}% of "
                f"{int(m['after_holds'])}"
            )
        events += ")"
    return (
        f"{what}: control accuracy {100 * m['control_accuracy']:.1f}% "
        f"(chance {100 * m['control_chance']:.1f}%), speak recall "
        f"{100 * m['speak_recall']:.1f}%, turn accuracy {100 * m.get('turn_accuracy', 0):.1f}%"
        f"{events}, "
        f"text accuracy {100 * m['text_accuracy']:.1f}% (a reply's first chunk "
        f"{100 * m.get('opening_accuracy', 0):.1f}%, its first token "
        f"{100 * m.get('first_token_accuracy', 0):.1f}%){calls}{speech}"
    )
