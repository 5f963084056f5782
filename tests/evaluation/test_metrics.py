"""The label and latency definitions on hand-made segments (exact answers)."""

from __future__ import annotations

import pytest

from venus.evaluation.metrics import (
    Behaviour,
    Rules,
    TimelineHints,
    Why,
    label_overlap,
    pause_take_over,
    turn_taking,
)
from venus.evaluation.vad import Segment

W = Segment(2.0, 3.0)  # the overlap window of most cases
D = 12.0  # the recording's duration


def segs(*pairs: tuple[float, float]) -> list[Segment]:
    return [Segment(a, b) for a, b in pairs]


def test_respond_yielded_and_answered() -> None:
    o = label_overlap(segs((0.0, 2.6), (3.5, 6.0)), W, D)
    assert (o.label, o.why) == (Behaviour.RESPOND, Why.YIELDED_AND_ANSWERED)
    assert o.speaking_at_start
    assert o.stop_s == pytest.approx(2.6)
    assert o.stop_latency_s == pytest.approx(0.6)
    assert o.response_onset_s == pytest.approx(3.5)
    assert o.response_latency_s == pytest.approx(0.5)
    assert o.take_over and o.take_over_latency_s == pytest.approx(0.5)


def test_respond_with_a_stop_after_the_window_within_grace() -> None:
    o = label_overlap(segs((0.0, 4.4), (5.2, 7.0)), W, D)  # stops 1.4 s after e (chunk grid)
    assert o.label is Behaviour.RESPOND
    assert o.stop_latency_s == pytest.approx(2.4)
    assert o.response_latency_s == pytest.approx(2.2)


def test_resume_kept_speaking_through_the_window() -> None:
    o = label_overlap(segs((0.0, 8.0)), W, D)
    assert (o.label, o.why) == (Behaviour.RESUME, Why.KEPT_SPEAKING)
    assert o.stop_latency_s is None and o.response_latency_s is None
    assert not o.take_over


def test_resume_stopped_briefly_and_carried_on() -> None:
    o = label_overlap(segs((0.0, 2.3), (2.7, 8.0)), W, D)  # a 0.4 s pause: no stop
    assert (o.label, o.why) == (Behaviour.RESUME, Why.KEPT_SPEAKING)
    assert o.stop_latency_s is None


def test_resume_restarted_while_the_user_still_spoke() -> None:
    o = label_overlap(segs((0.0, 2.1), (2.7, 8.0)), Segment(2.0, 4.0), D)
    assert (o.label, o.why) == (Behaviour.RESUME, Why.RESTARTED_DURING_OVERLAP)
    assert o.stop_latency_s == pytest.approx(0.1)
    assert o.response_latency_s is None  # the restart is before e


def test_uncertain_silent_at_the_overlap_start() -> None:
    o = label_overlap(segs((0.0, 1.0), (5.0, 7.0)), W, D)
    assert (o.label, o.why) == (Behaviour.UNCERTAIN, Why.SILENT_AT_START)
    assert not o.speaking_at_start
    assert o.stop_latency_s is None
    assert o.response_latency_s == pytest.approx(2.0)  # measured all the same


def test_uncertain_stopped_and_silent() -> None:
    o = label_overlap(segs((0.0, 2.5), (7.5, 9.0)), W, D)  # 7.5 > e + horizon (7.0)
    assert (o.label, o.why) == (Behaviour.UNCERTAIN, Why.STOPPED_SILENT)
    assert o.stop_latency_s == pytest.approx(0.5)
    assert o.response_latency_s is None


def test_no_output_speech() -> None:
    o = label_overlap([], W, D)
    assert (o.label, o.why) == (Behaviour.UNCERTAIN, Why.NO_OUTPUT_SPEECH)
    assert o.stop_latency_s is None and o.response_latency_s is None
    assert not o.take_over and not o.speaking_at_start


def test_speaking_at_start_within_tolerance() -> None:
    ended_just_before = label_overlap(segs((0.0, 1.95), (3.4, 5.0)), W, D)
    assert ended_just_before.speaking_at_start
    assert ended_just_before.stop_latency_s == 0.0
    assert ended_just_before.label is Behaviour.RESPOND
    started_just_after = label_overlap(segs((2.08, 8.0)), W, D)
    assert started_just_after.label is Behaviour.RESUME
    too_late = label_overlap(segs((2.3, 8.0)), W, D)
    assert too_late.why is Why.SILENT_AT_START


def test_overlap_at_the_very_end_clips_the_horizon() -> None:
    end = Segment(9.0, 9.8)
    kept = label_overlap(segs((5.0, 10.0)), end, 10.0)  # speaks to the end of the file
    assert (kept.label, kept.horizon_clipped) == (Behaviour.RESUME, True)
    assert kept.stop_latency_s is None  # never stopped within the file
    stopped = label_overlap(segs((5.0, 9.5)), end, 10.0)
    assert (stopped.label, stopped.why) == (Behaviour.UNCERTAIN, Why.STOPPED_SILENT)
    assert stopped.stop_latency_s == pytest.approx(0.5)
    answered = label_overlap(segs((5.0, 9.3), (9.85, 10.0)), end, 10.0)
    assert answered.label is Behaviour.RESPOND  # a response cut by the file's end counts
    assert answered.response_latency_s == pytest.approx(0.05)
    assert not answered.take_over  # too short for a v1 turn


def test_timeline_hints_are_confirmed_or_contradicted() -> None:
    model = segs((0.0, 2.6), (3.5, 6.0))
    agreed = label_overlap(model, W, D, hints=TimelineHints(Behaviour.RESPOND))
    assert (agreed.label, agreed.confirmed) == (Behaviour.RESPOND, True)
    contradicted = label_overlap(model, W, D, hints=TimelineHints(Behaviour.RESUME))
    assert (contradicted.label, contradicted.why) == (Behaviour.UNCERTAIN, Why.NOT_CONFIRMED)
    assert contradicted.audio_label is Behaviour.RESPOND
    assert contradicted.confirmed is False
    assert label_overlap(model, W, D).confirmed is None


def test_rules_change_the_thresholds_and_are_checked() -> None:
    model = segs((0.0, 2.6), (3.5, 6.0))
    assert label_overlap(model, W, D, rules=Rules(pause_s=1.0)).label is Behaviour.RESUME
    late = segs((0.0, 2.6), (6.5, 8.0))
    assert label_overlap(late, W, D, rules=Rules(horizon_s=2.0)).why is Why.STOPPED_SILENT
    with pytest.raises(ValueError, match="grace_s"):
        Rules(grace_s=-1.0)


def test_v1_take_over_needs_a_turn_of_one_second() -> None:
    short = label_overlap(segs((0.0, 2.6), (3.5, 4.2)), W, D)
    assert short.label is Behaviour.RESPOND and not short.take_over
    resumed = label_overlap(segs((0.0, 2.1), (2.7, 8.0)), Segment(2.0, 4.0), D)
    assert resumed.take_over  # v1 counts any new turn after the interruption began
    assert resumed.take_over_latency_s == pytest.approx(-1.3)


def test_v1_pause_handling_and_turn_taking() -> None:
    pause = Segment(3.0, 5.0)
    assert pause_take_over(segs((6.0, 9.0)), pause).take_over is False  # after the pause
    assert pause_take_over(segs((3.5, 3.9)), pause).take_over is False  # a short blip
    took = pause_take_over(segs((3.5, 6.0)), pause)
    assert took.take_over and took.latency_s == pytest.approx(-1.5)
    turn = turn_taking(segs((1.0, 1.5), (4.2, 7.0)), 4.0)
    assert turn.take_over and turn.onset_s == 4.2 and turn.latency_s == pytest.approx(0.2)
    assert turn_taking([], 4.0).take_over is False
