"""Each overlap event of a set, teacher-forced: did the checkpoint do what the data does?

`venus validate --by-event`. Validation's "overlap events ... (holds ...)" counts single
decisions, mixing the easy events (background speech, an aside while the assistant
waits) with the hard one (an aside while it speaks), and stops at the event's deciding
chunk, while a hold can also go wrong a chunk or two after the user stops
(docs/training-log.md, sixteenth and seventeenth rounds). This counts whole events, by
what they are and what the data does about them:

- **held** (``continue_speaking`` over a reply: a backchannel, an aside, background
  speech): every chunk of the overlap decided as the data's (speaking), and also the
  ``AFTER_CHUNKS`` chunks after it where the data goes on speaking ("and after");
- **cut** (an interruption: ``yield_floor``, ``stop_output``, ``revise_response``):
  the deciding chunk does not speak, as the data;
- **kept listening** (``await_input``: an aside while the assistant waits): the deciding
  chunk does not speak.

A model's decision is the control token with the highest logit at each decision position
(greedy, as `venus eval duplex --temperature 0`): "speaks" is ``speak`` or ``turn_eos``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from venus.export.model.venus import VenusModel
from venus.train.batch import collate, embeddings
from venus.train.data import Example
from venus.train.layout import AFTER_CHUNKS

__all__ = ["EventOutcome", "by_event", "event_lines", "event_outcomes", "group_of", "speaks"]

CUTTING = frozenset({"yield_floor", "stop_output", "revise_response"})
SPEAKING = frozenset({"speak", "turn_eos"})


@dataclass(frozen=True)
class EventOutcome:
    """One overlap event: its group (``group_of``), whether the model did as the data did
    (``right``) and, for a hold, also through the chunks after it (``right_after``)."""

    group: str
    right: bool
    right_after: bool


def speaks(model: VenusModel, example: Example, control: Sequence[int]) -> list[bool]:
    """Per chunk of ``example``, teacher-forced: whether the model's greedy decision speaks."""
    batch = collate([example])
    n = batch.ids.shape[1]
    empty = model.backbone.new_cache(1)
    with torch.no_grad():
        emb = embeddings(model, batch)
        logits = model.backbone(emb, batch.mask, torch.arange(n)[None], empty.keys,
                                empty.values)[0][0]  # fmt: skip
    at = batch.decision[0].nonzero()[:, 0]
    picked = logits[at][:, list(control)].argmax(dim=1)
    return [bool(p != 0) for p in picked]  # listen is control[0]


def group_of(event: Mapping[str, Any], speaking: bool) -> str | None:
    """The name an event is counted under, or None for one that asks nothing checked here."""
    kind, action = str(event.get("kind")), str(event.get("action"))
    if action == "continue_speaking" and speaking:
        return {"other_directed": "aside while speaking"}.get(kind, kind)
    if action == "await_input" and not speaking:
        return "aside while waiting"
    if action in CUTTING and kind == "interruption":
        return f"interruption: {event.get('intent') or action}"
    return None


def event_outcomes(
    chunks: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]], said: Sequence[bool]
) -> list[EventOutcome]:
    """The outcome of each overlap event of a trajectory (its ``chunks`` and ``events``)
    given the model's per-chunk decisions ``said`` (True: speaks)."""
    data = [str(c["decision"]) in SPEAKING for c in chunks]
    in_reply = [False] + [
        d and str(c["decision"]) != "turn_eos" for d, c in zip(data, chunks, strict=True)
    ]
    spans: dict[int, list[int]] = {}
    for k, chunk in enumerate(chunks[: len(said)]):
        for i in chunk["events"]:
            spans.setdefault(int(i), []).append(k)
    out = []
    for i, ks in sorted(spans.items()):
        group = group_of(events[i], in_reply[ks[0]])
        if group is None:
            continue
        if group.startswith(("interruption", "aside while waiting")):
            deciding = next((k for k in ks if chunks[k].get("action")), ks[-1])
            right = said[deciding] == data[deciding]
            out.append(EventOutcome(group, right, right))
            continue
        right = all(said[k] == data[k] for k in ks)
        after = range(ks[-1] + 1, min(ks[-1] + 1 + AFTER_CHUNKS, len(said)))
        right_after = right and all(said[k] for k in after if data[k])
        out.append(EventOutcome(group, right, right_after))
    return out


def by_event(
    model: VenusModel,
    examples: Iterable[Example],
    trajectories: Mapping[str, Mapping[str, Any]],
    control: Sequence[int],
) -> dict[str, dict[str, int]]:
    """Every event's outcome, counted by group: ``{group: {"events", "right",
    "right_after"}}`` (``trajectories``: sample id -> its trajectory; examples whole,
    not cropped)."""
    counts: dict[str, dict[str, int]] = {}
    for e in examples:
        events = trajectories[e.sample_id].get("events", [])
        if not events:
            continue
        for o in event_outcomes(e.chunks, events, speaks(model, e, control)):
            c = counts.setdefault(o.group, {"events": 0, "right": 0, "right_after": 0})
            c["events"] += 1
            c["right"] += o.right
            c["right_after"] += o.right_after
    return dict(sorted(counts.items()))


def event_lines(counts: Mapping[str, Mapping[str, int]]) -> list[str]:
    """``by_event``'s counts in words, a line a group."""
    lines = []
    for group, c in counts.items():
        n, right, after = c["events"], c["right"], c["right_after"]
        if group == "aside while waiting" or group.startswith("interruption"):
            verb = "kept listening" if group == "aside while waiting" else "stopped"
            lines.append(f"{group}: {verb} in {right} of {n}")
        else:
            lines.append(f"{group}: held through {right} of {n}, and the {AFTER_CHUNKS} "
                         f"chunks after in {after}")  # fmt: skip
    return lines
