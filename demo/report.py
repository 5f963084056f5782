"""What the assistant did in ``venus demo``'s scenario, in words.

Each of the user's turns beside what the assistant did about it, judged as ``venus eval
duplex`` judges an overlap (on the assistant's speech in ``output.wav``, found by the
evaluation's VAD), and each delegation the model made and result it was given, from the
timeline. Where the scenario's data says what an assistant should do (an overlap's
``action``; a turn is answered), ``met`` says whether this one did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from venus.daemon.frontend.timeline import ChunkRecord
from venus.evaluation.metrics import Behaviour, action_met, label_overlap
from venus.evaluation.vad import Segment, model_segments

__all__ = ["Moment", "behaviour", "render_behaviour"]

ANSWER_WITHIN_S = 4.0  # a turn counts as answered when the assistant speaks by then
TOLERANCE_S = 0.1  # the VAD's edges
QUOTE_CHARS = 70
OVERLAPS = ("backchannel", "interruption")


@dataclass(frozen=True)
class Moment:
    """One thing that happened: a user turn and the response, a call, a result."""

    at_s: float
    what: str  # the user's turn kind, "delegation" or "result"
    line: str  # said in words
    met: bool | None  # did what the data calls for; None where it says nothing


def behaviour(
    scenario: Mapping[str, Any],
    records: Sequence[ChunkRecord],
    output: npt.NDArray[np.float32],
    rate: int,
    capabilities: Mapping[str, str],
) -> list[Moment]:
    """The moments of a run, in time order. ``output``: the assistant's audio (mono, from
    t = 0); ``capabilities``: the journal's item ids to capability names."""
    duration = float(scenario["duration_s"])
    speech = model_segments(output, rate)
    moments = [_turn(e, speech, records, duration) for e in scenario["events"]]
    for r in records:
        for d in r.delegations:
            call = f"{d.name}({_args(d.arguments)})" if d.valid else f"malformed: {d.error}"
            moments.append(Moment(r.start_s, "delegation", f"delegated {call}", None))
        for res in r.results:
            name = capabilities.get(res.item_id, "an unknown item")
            said = _reply_from(records, r.start_s)
            then = f"; then said {said!r}" if said else "; said nothing after it"
            moments.append(Moment(r.start_s, "result", f"got the {name} result{then}", None))
    return sorted(moments, key=lambda m: m.at_s)


def render_behaviour(moments: Sequence[Moment], scenario: Mapping[str, Any]) -> str:
    """The moments as lines, and a tally of the turns that did what the data calls for."""
    lines = ["what the assistant did:"]
    for m in moments:
        mark = {True: "ok ", False: "-- ", None: "   "}[m.met]
        lines.append(f"  {mark}{m.at_s:6.1f} s  {m.line}")
    judged = [m for m in moments if m.met is not None]
    calls = sum(m.what == "delegation" for m in moments)
    lines.append(
        f"  {sum(bool(m.met) for m in judged)} of {len(judged)} user turns handled as the "
        f"data's assistant does; {calls} delegations made (the data's assistant makes "
        f"{len(scenario.get('answers', []))})"
    )
    return "\n".join(lines) + "\n"


def _turn(
    e: Mapping[str, Any], speech: Sequence[Segment], records: Sequence[ChunkRecord], end: float
) -> Moment:
    start, stop = float(e["start_s"]), float(e["end_s"])
    heard = f"user {e['kind']} {_quote(str(e['text']))}: "
    if e["kind"] in OVERLAPS:
        outcome = label_overlap(speech, Segment(start, stop), end)
        if outcome.label is Behaviour.RESUME:
            did = "kept talking"
        elif outcome.label is Behaviour.RESPOND:
            did = f"stopped and answered {outcome.response_latency_s or 0.0:.1f} s after"
        else:
            did = f"neither kept talking nor answered ({outcome.why.value.replace('_', ' ')})"
        met = action_met(e.get("action"), outcome)
        wants = f"; the data's assistant: {str(e['action']).replace('_', ' ')}"
        return Moment(start, str(e["kind"]), heard + did + wants, met)
    # speaking while the user speaks: a reply begun in the turn, or one running into it
    over = any(s.start_s < stop - TOLERANCE_S and s.end_s > start + TOLERANCE_S for s in speech)
    onset = next(
        (s.start_s for s in speech if stop - TOLERANCE_S <= s.start_s <= stop + ANSWER_WITHIN_S),
        None,
    )
    quiet = "talked over it" if over else "quiet while the user spoke"
    if onset is None:
        answer = f"no answer within {ANSWER_WITHIN_S:g} s"
    else:
        said = _reply_from(records, onset - 1.0)
        answer = f"answered {max(0.0, onset - stop):.1f} s after" + (f": {said!r}" if said else "")
    return Moment(
        start, str(e["kind"]), f"{heard}{quiet}; {answer}", not over and onset is not None
    )


def _reply_from(records: Sequence[ChunkRecord], from_s: float) -> str:
    """The text of the first reply spoken in a chunk starting at or after ``from_s``."""
    first = next((r for r in records if r.start_s >= from_s and r.reply_id is not None), None)
    if first is None:
        return ""
    return _cut("".join(r.text for r in records if r.reply_id == first.reply_id).strip())


def _cut(text: str) -> str:
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


def _quote(text: str) -> str:
    return repr(_cut(text))


def _args(arguments: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in (arguments or {}).items())
