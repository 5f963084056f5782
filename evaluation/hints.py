"""The timeline's half of an overlap label: what the daemon did, from its chunk records.

Audio alone cannot tell an answer from a continuation after a pause; the timeline can,
since every chunk names the reply its speech belongs to (``reply_id``) and says when
playback was cut (``playback_stopped``). So ``venus eval duplex`` decides each overlap
from the timeline and lets the output audio confirm it
(:func:`venus.evaluation.metrics.label_overlap` with :class:`TimelineHints`).

**Playback, rebuilt from the records** (offline timing, ``docs/timeline.md``): chunk ``k``
covers ``[start_s, start_s + chunk_s)``; the speech it decoded enters the playback queue
at its boundary ``b = start_s + chunk_s`` and plays after what is queued, one speech
token being ``SPEECH_TOKEN_S`` (40 ms: S3 tokens, 25 per second of audio). So the queue
runs to ``q = max(q, b) + tokens * 40 ms``; a reply *plays* from its first audible chunk's
start in the queue to where its queued speech runs out, or to the boundary of the chunk
that yielded (a ``listen`` that ends the reply, ``reply_ended``, or ``playback_stopped``:
a cut), whichever is first; a yield empties the queue. After a ``turn_eos`` the queued
speech plays out.

**The rule** (same thresholds and case order as the audio's, :class:`Rules`; ``[s, e]``
the scored window, ``D`` the input's duration, ``tol`` the tolerance):

- *current reply*: the reply playing at some point of ``[s - tol, s + tol]``;
- none -> **UNCERTAIN** (nothing was playing when the user spoke);
- it plays on to the grace end ``min(e + grace_s, D - tol)`` -> **RESUME** (not cut, and
  still speaking: gaps inside one reply do not matter);
- it stopped before (cut, or its speech ran out), and the next reply starts playing
  before ``e - tol``, while the user still speaks -> **RESUME** (went on over the user);
- the next reply starts in ``[e - tol, min(e + horizon_s, D)]`` -> **RESPOND** (stopped,
  then a new reply: the answer);
- otherwise -> **UNCERTAIN** (stopped, and silent until the horizon).

The audio then confirms the label or turns it into UNCERTAIN (``Why.NOT_CONFIRMED``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from venus.daemon.frontend.timeline import ChunkRecord
from venus.evaluation.metrics import DEFAULT_RULES, Behaviour, Rules, TimelineHints
from venus.evaluation.vad import Segment

__all__ = ["SPEECH_TOKEN_S", "Playback", "reply_playbacks", "timeline_hints"]

SPEECH_TOKEN_S = 0.04  # one S3 speech token: 25 tokens per second of audio


@dataclass(frozen=True)
class Playback:
    """When one reply was heard, on the input's clock (seconds)."""

    reply_id: int
    start_s: float  # its first speech leaves the queue
    end_s: float  # its queued speech ran out, or the cut
    cut: bool  # ended by a yield (not by turn_eos, nor by the end of the input)


def reply_playbacks(records: Sequence[ChunkRecord], chunk_s: float) -> tuple[Playback, ...]:
    """Every reply that was heard, in order (module doc)."""
    spans: dict[int, list[float]] = {}  # reply id -> [start, end]
    cut: set[int] = set()
    queue_end = 0.0
    for r in sorted(records, key=lambda r: r.index):
        boundary = r.start_s + chunk_s
        if r.playback_stopped or (r.reply_ended and r.decision == "listen"):  # a yield
            for reply, span in spans.items():
                if reply == r.reply_id or span[1] > boundary:
                    span[1] = max(span[0], min(span[1], boundary))
                    cut.add(reply)
            queue_end = min(queue_end, boundary)
        if r.reply_id is not None and r.speech_tokens > 0 and r.decision != "listen":
            start = max(queue_end, boundary)
            queue_end = start + r.speech_tokens * SPEECH_TOKEN_S
            span = spans.setdefault(r.reply_id, [start, queue_end])
            span[1] = queue_end
    return tuple(
        Playback(reply, a, b, reply in cut)
        for reply, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0])
    )


def timeline_hints(
    playbacks: Sequence[Playback],
    window: Segment,
    duration_s: float,
    *,
    rules: Rules = DEFAULT_RULES,
) -> TimelineHints:
    """The timeline's label for the overlap ``window`` (the rule of the module doc)."""
    s, e = window.start_s, window.end_s
    tol = rules.tolerance_s
    grace_end = min(e + rules.grace_s, duration_s - tol)
    horizon = min(e + rules.horizon_s, duration_s)
    current = next((p for p in playbacks if p.start_s <= s + tol and p.end_s >= s - tol), None)
    if current is None:
        return TimelineHints(Behaviour.UNCERTAIN)
    if current.end_s >= grace_end:
        return TimelineHints(Behaviour.RESUME)
    after = next((p for p in playbacks if p.start_s >= current.end_s and p is not current), None)
    if after is not None and after.start_s < e - tol:
        return TimelineHints(Behaviour.RESUME)
    if after is not None and after.start_s <= horizon:
        return TimelineHints(Behaviour.RESPOND)
    return TimelineHints(Behaviour.UNCERTAIN)
