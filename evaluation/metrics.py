"""Per-sample overlap metrics from speech segments: behaviour label, stop and response
latency, and the v1 take-over and turn-taking measures. No ASR, no judge.

Inputs: the model's speech segments (from ``output.wav``, gaps < 0.5 s merged,
:mod:`venus.evaluation.vad`), the overlap window ``[s, e]`` (``metadata.json``
``timestamps``) and the recording's duration ``D`` (the input's). All times in seconds
on the input's clock.

**Definitions** (constants in :class:`Rules`; defaults in brackets):

- *Horizon*: ``H = min(e + horizon_s, D)`` [4 s]; *grace end*: ``G = min(e + grace_s, D)``
  [1.5 s: the daemon speaks on a 1 s chunk grid and a cut lands on the first boundary at
  or after the overlap ends, so up to ~1 s after ``e``, plus VAD tolerance]. Both are
  clipped at the end of the file: an overlap at the very end is judged on what is left.
- *Speaking at the overlap start*: a model segment overlaps ``[s - tol, s + tol]``
  [tol 0.1 s]: it covers ``s``, ends at most ``tol`` before it, or starts at most ``tol``
  after it. That segment is the *current* one.
- *Stop*: the current segment's end, when it ends before ``G`` and before the file's end
  (``D - tol``); a model still speaking at ``G`` did not stop for the overlap (it may end
  its reply later: that is no reaction). **Stop latency** = stop - ``s``, at least 0 (a
  segment that ended within ``tol`` before ``s`` stopped at 0); None when the model was
  not speaking at ``s`` or did not stop by ``G``.
- *Response onset*: the first model segment starting in ``[e - tol, H]`` that is not the
  current one. **Response latency** = onset - ``e`` (from -``tol`` up); None when there is
  none.
- **RESPOND** (yielded and answered): speaking at ``s``, stopped by ``G``, and the next
  segment starts in ``[e - tol, H]``.
- **RESUME** (carried on): speaking at ``s`` and no stop by ``G`` (no pause of 0.5 s or
  more, the model merge gap, inside ``[s, G]``: brief stops are bridged by the merge; a
  segment running to within ``tol`` of the file's end did not stop), or stopped and
  started again before ``e - tol``, while the user was still speaking.
- **UNCERTAIN**: anything else: silent at ``s`` (or no speech in the output at all), or
  stopped and silent until ``H``.

:class:`Why` says which case decided. Audio cannot tell an answer from a continuation
after a pause; the daemon's timeline can. So :func:`label_overlap` takes optional
:class:`TimelineHints`: the label *decided from the timeline* is kept when the audio
*confirms* it (gives the same label) and becomes UNCERTAIN (``Why.NOT_CONFIRMED``)
when it does not. Without hints the audio label stands.

**v1 measures** (a *turn* is a model segment of at least ``turn_min_s`` [1 s], v1's
``turn_duration_threshold``; v1 also counts shorter output of more than 3 words, which
needs ASR): take-over rate (TOR) for interruptions: a turn starting in ``(s + tol, H]``,
its latency onset - ``e``; for pause handling: a turn starting before the user resumes
(``e``); turn-taking: any turn in the output, its latency onset - the reference time.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from venus.evaluation.vad import MODEL_MERGE_GAP_S, Segment, merge_gaps

__all__ = [
    "DEFAULT_RULES",
    "Behaviour",
    "OverlapOutcome",
    "Rules",
    "TimelineHints",
    "TurnOutcome",
    "Why",
    "action_met",
    "label_overlap",
    "pause_take_over",
    "turn_taking",
]


class Behaviour(str, enum.Enum):
    """What the model did about an overlap (Full-Duplex-Bench v1.5's categories)."""

    RESPOND = "RESPOND"  # stopped and answered the overlap
    RESUME = "RESUME"  # carried on with its own reply
    UNCERTAIN = "UNCERTAIN"  # neither, or not decidable


class Why(str, enum.Enum):
    """Which case of the rules decided the label."""

    YIELDED_AND_ANSWERED = "yielded_and_answered"  # RESPOND
    KEPT_SPEAKING = "kept_speaking"  # RESUME: no stop by the grace end
    RESTARTED_DURING_OVERLAP = "restarted_during_overlap"  # RESUME: stopped, went on over the user
    STOPPED_SILENT = "stopped_silent"  # UNCERTAIN: stopped, nothing until the horizon
    SILENT_AT_START = "silent_at_start"  # UNCERTAIN: not speaking when the overlap began
    NO_OUTPUT_SPEECH = "no_output_speech"  # UNCERTAIN: no speech in the output at all
    NOT_CONFIRMED = "not_confirmed"  # UNCERTAIN: the audio contradicts the timeline


@dataclass(frozen=True)
class Rules:
    """The thresholds of the definitions (module doc), in seconds."""

    tolerance_s: float = 0.1  # VAD and window edges
    grace_s: float = 1.5  # a stop counts until e + grace_s
    horizon_s: float = 4.0  # a response counts until e + horizon_s
    pause_s: float = MODEL_MERGE_GAP_S  # shorter model pauses are no stop
    turn_min_s: float = 1.0  # v1: a take-over is at least this much speech

    def __post_init__(self) -> None:
        for name in ("tolerance_s", "grace_s", "horizon_s", "pause_s", "turn_min_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"Rules.{name} must be >= 0, not {getattr(self, name)!r}")


DEFAULT_RULES = Rules()


@dataclass(frozen=True)
class TimelineHints:
    """What the daemon's timeline decided for this overlap (the other half of the label)."""

    label: Behaviour


@dataclass(frozen=True)
class OverlapOutcome:
    """One overlap, scored. Times in seconds; latencies None where undefined."""

    label: Behaviour  # the result: the audio's, or the timeline's when the audio confirms it
    why: Why  # the case that decided ``label``
    audio_label: Behaviour  # decided on the output audio alone
    audio_why: Why  # the case that decided ``audio_label``
    timeline_label: Behaviour | None  # from the hints, when given
    speaking_at_start: bool
    stop_s: float | None  # when the model stopped (input clock)
    response_onset_s: float | None  # when it spoke again after the overlap
    stop_latency_s: float | None  # stop - s
    response_latency_s: float | None  # response onset - e
    take_over: bool  # v1 TOR: a turn (>= turn_min_s) began after s + tol, by the horizon
    take_over_latency_s: float | None  # that turn's onset - e
    horizon_clipped: bool  # e + horizon_s reaches past the end of the file

    @property
    def confirmed(self) -> bool | None:
        """Whether the audio agrees with the timeline; None without hints."""
        return None if self.timeline_label is None else self.timeline_label == self.audio_label


@dataclass(frozen=True)
class TurnOutcome:
    """v1 take-over for one sample: whether the model took a turn, and when."""

    take_over: bool
    onset_s: float | None
    latency_s: float | None  # onset - the reference time (unclamped)


def label_overlap(
    model: Sequence[Segment],
    window: Segment,
    duration_s: float,
    *,
    rules: Rules = DEFAULT_RULES,
    hints: TimelineHints | None = None,
) -> OverlapOutcome:
    """Score one overlap: ``model`` speech segments against ``window`` ``[s, e]`` in a
    recording of ``duration_s`` (definitions in the module doc)."""
    s, e = window.start_s, window.end_s
    tol = rules.tolerance_s
    segs = merge_gaps(model, rules.pause_s)
    horizon = min(e + rules.horizon_s, duration_s)
    grace = min(e + rules.grace_s, duration_s)
    file_end = duration_s - tol

    current = next((g for g in segs if g.start_s <= s + tol and g.end_s >= s - tol), None)
    stop = None
    if current is not None and current.end_s < min(grace, file_end):
        stop = current.end_s
    later = [g for g in segs if g is not current and e - tol <= g.start_s <= horizon]
    response = later[0].start_s if later else None
    turn = next(
        (g for g in segs if s + tol < g.start_s <= horizon and g.duration_s >= rules.turn_min_s),
        None,
    )

    audio_label, audio_why = _decide(segs, current, min(grace, file_end), e - tol, horizon)
    label, why = audio_label, audio_why
    timeline_label = hints.label if hints is not None else None
    if timeline_label is not None:
        label, why = (
            (timeline_label, audio_why)
            if timeline_label == audio_label
            else (Behaviour.UNCERTAIN, Why.NOT_CONFIRMED)
        )
    return OverlapOutcome(
        label=label,
        why=why,
        audio_label=audio_label,
        audio_why=audio_why,
        timeline_label=timeline_label,
        speaking_at_start=current is not None,
        stop_s=stop,
        response_onset_s=response,
        stop_latency_s=None if stop is None else max(0.0, stop - s),
        response_latency_s=None if response is None else response - e,
        take_over=turn is not None,
        take_over_latency_s=None if turn is None else turn.start_s - e,
        horizon_clipped=e + rules.horizon_s > duration_s,
    )


def _decide(
    segs: Sequence[Segment],
    current: Segment | None,
    grace_end: float,
    user_done: float,
    horizon: float,
) -> tuple[Behaviour, Why]:
    if not segs:
        return Behaviour.UNCERTAIN, Why.NO_OUTPUT_SPEECH
    if current is None:
        return Behaviour.UNCERTAIN, Why.SILENT_AT_START
    if current.end_s >= grace_end:  # the grace end, or the end of the file before it
        return Behaviour.RESUME, Why.KEPT_SPEAKING
    after = next((g for g in segs if g.start_s > current.end_s), None)
    if after is not None and after.start_s < user_done:
        return Behaviour.RESUME, Why.RESTARTED_DURING_OVERLAP
    if after is not None and after.start_s <= horizon:
        return Behaviour.RESPOND, Why.YIELDED_AND_ANSWERED
    return Behaviour.UNCERTAIN, Why.STOPPED_SILENT


# metadata.json "action" (our data) -> the outcomes that carry it out
_ACTION_MET = {
    "continue_speaking": (Why.KEPT_SPEAKING, Why.RESTARTED_DURING_OVERLAP),
    "stop_output": (Why.STOPPED_SILENT, Why.YIELDED_AND_ANSWERED),
    "yield_floor": (Why.YIELDED_AND_ANSWERED,),
    "revise_response": (Why.YIELDED_AND_ANSWERED,),
}


def action_met(action: str | None, outcome: OverlapOutcome) -> bool | None:
    """Whether the audio shows the action our data's ``metadata.json`` calls for; None for
    no or an unknown action. ``continue_speaking``: RESUME; ``stop_output``: stopped by
    the grace end (answering or not); ``yield_floor`` and ``revise_response``: RESPOND;
    ``await_input`` (the model was silent): still silent at the overlap start, no turn
    starting after it and no response onset, by the horizon (it did not answer speech
    meant for someone else). Judged on the audio (``audio_why``), hints aside."""
    if action == "await_input":
        return not (
            outcome.speaking_at_start or outcome.take_over or outcome.response_onset_s is not None
        )
    met = _ACTION_MET.get(action or "")
    return None if met is None else outcome.audio_why in met


def pause_take_over(
    model: Sequence[Segment], pause: Segment, *, rules: Rules = DEFAULT_RULES
) -> TurnOutcome:
    """v1 pause handling: the model took over if a turn (a segment of at least
    ``turn_min_s``) starts before the user resumes (``pause.end_s``). Lower is better."""
    turn = next(
        (g for g in model if g.start_s < pause.end_s and g.duration_s >= rules.turn_min_s), None
    )
    if turn is None:
        return TurnOutcome(False, None, None)
    return TurnOutcome(True, turn.start_s, turn.start_s - pause.end_s)


def turn_taking(
    model: Sequence[Segment], reference_s: float, *, rules: Rules = DEFAULT_RULES
) -> TurnOutcome:
    """v1 smooth turn-taking: the model's first turn anywhere in its output, and its onset
    minus ``reference_s`` (where the user's turn ends). v1 counts a negative latency as 0
    in its mean; the caller does (this keeps the sign)."""
    turn = next((g for g in model if g.duration_s >= rules.turn_min_s), None)
    if turn is None:
        return TurnOutcome(False, None, None)
    return TurnOutcome(True, turn.start_s, turn.start_s - reference_s)
