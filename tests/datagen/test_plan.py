"""The plan's types: markers, the linkage table, whole-plan consistency and JSON."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any, get_args

import pytest

from venus.daemon.frontend.delegation import parse_call
from venus.datagen.plan import (
    LINKAGE,
    Acoustics,
    Action,
    Anchor,
    Decision,
    Delegation,
    EventKind,
    Intent,
    OverlapEvent,
    Plan,
    PlanError,
    Segment,
    Turn,
    Voice,
    plain_text,
    resolve,
    segments,
    snap,
)

USER = Voice("espeak-ng", "en-us", 170, 50, 0.0)
ASSISTANT = Voice("flite", "slt", 170, 50, 0.0)
ITEM = "0a1b2c3d"


def _turn(speaker: Any, role: Any, text: str, anchor: Anchor, duration_s: float) -> Turn:
    voice = ASSISTANT if speaker == "assistant" else USER
    return Turn(speaker, role, text, voice, anchor, 0.0, duration_s, None, "near", None)


def _cancel_plan(**changes: Any) -> Plan:
    """A request, the holding line that calls weather, "never mind" over it, the cancel."""
    hold = "Sure, checking the weather in Paris now, one moment."
    turns = [
        _turn("user", "request", "Weather in Paris?", Anchor(None, 0, 0.5, (), 0, False), 2.0),
        _turn("assistant", "holding", hold, Anchor(None, 0, 0, (0,), 0.2, True), 6.0),
        _turn("user", "interruption", "Never mind.", Anchor(1, 0.3, 0, (), 0, False), 1.5),
        _turn("assistant", "acknowledgement", "Okay.", Anchor(None, 0, 0, (2,), 0.2, True), 1.0),
    ]
    event = OverlapEvent("interruption", 2, 1, "cancel_pending", "yield_floor", "cancel", ITEM, 3)
    delegation = Delegation(
        ITEM, "weather", {"city": "Paris", "day": "today"}, "call", None, 1, 8.0, None,
        "cancelled", "", 3, None,
    )  # fmt: skip
    fields: dict[str, Any] = {"turns": turns, "events": (event,), "delegations": (delegation,)}
    fields.update(changes)
    category = fields.pop("category", "delegation")
    timed = tuple(resolve(fields["turns"], fields["events"], 1.0))
    acoustics = Acoustics("pink", 12.0, None, -12.0, 0.7, ())
    return Plan(
        "1-000000", 1, 0, 0, "audio", category, 10.0, 1.0, timed, tuple(fields["events"]),
        tuple(fields["delegations"]), None, acoustics,
    )  # fmt: skip


# --- markers ----------------------------------------------------------------------------------
def test_segments_split_fillers_pauses_and_restarts() -> None:
    text = "{um} what's the -- what's [pause 300] the time?"
    assert segments(text) == (
        Segment("filler", "um"),
        Segment("words", "what's the"),
        Segment("restart"),
        Segment("words", "what's"),
        Segment("pause", pause_ms=300),
        Segment("words", "the time?"),
    )
    assert plain_text(text) == "what's the what's the time?"


@pytest.mark.parametrize("bad", ["{umm} hi", "a [pause 10] b", "a [pause 9000] b", "a {b", "x ]"])
def test_malformed_markers_are_refused(bad: str) -> None:
    with pytest.raises(PlanError):
        segments(bad)


def test_assistant_text_carries_no_markers() -> None:
    with pytest.raises(PlanError, match="no markers"):
        _turn("assistant", "answer", "{um} it is sunny", Anchor(None, 0, 0, (), 0, True), 1.0)


# --- the linkage table ------------------------------------------------------------------------
def test_linkage_table_is_enforced_for_every_combination() -> None:
    kinds, intents = get_args(EventKind), (None, *get_args(Intent))
    for kind, intent, action, decision in itertools.product(
        kinds, intents, get_args(Action), get_args(Decision)
    ):
        row = LINKAGE.get((kind, intent))
        allowed = row is not None and action in row[0] and decision in row[1]
        over = None if action == "await_input" else 1
        try:
            OverlapEvent(kind, 2, over, intent, action, decision, ITEM, 3)
        except PlanError:
            assert not allowed, (kind, intent, action, decision)
        else:
            assert allowed, (kind, intent, action, decision)


def test_table_rows_from_the_issue() -> None:
    assert LINKAGE[("backchannel", None)] == ({"continue_speaking"}, {"retain"})
    assert LINKAGE[("interruption", "cancel_pending")] == ({"yield_floor"}, {"cancel"})
    assert LINKAGE[("interruption", "change_topic")][1] == {"retain", "replace"}


def test_a_hand_built_inconsistent_event_raises() -> None:
    with pytest.raises(PlanError, match="continue_speaking"):
        OverlapEvent("backchannel", 2, 1, None, "stop_output", "retain", None, None)
    with pytest.raises(PlanError, match="needs the delegation"):
        OverlapEvent("interruption", 2, 1, "cancel_pending", "yield_floor", "cancel", None, 3)
    with pytest.raises(PlanError, match="await_input"):
        OverlapEvent("other_directed", 2, 1, None, "await_input", "retain", None, None)


# --- whole plans ------------------------------------------------------------------------------
def test_the_hand_built_plan_is_valid_and_timed_on_the_grid() -> None:
    plan = _cancel_plan()
    hold, interruption, ack = plan.turns[1], plan.turns[2], plan.turns[3]
    assert hold.start_s == 3.0 and ack.start_s == 7.0
    assert interruption.start_s == pytest.approx(3.0 + 0.3 * 6.0)
    assert hold.cut_at_s == snap(interruption.end_s, 1.0) == 7.0
    assert plan.event_window_s(plan.events[0]) == (interruption.start_s, interruption.end_s)


def test_a_plan_whose_delegations_do_not_carry_out_the_decision_raises() -> None:
    plan = _cancel_plan()
    completed = replace(plan.delegations[0], cancel_turn=None)
    with pytest.raises(PlanError, match="cancel"):
        _cancel_plan(delegations=(completed,))


def test_work_cancelled_after_its_result_was_ready_raises() -> None:
    early = replace(_cancel_plan().delegations[0], result_after_s=2.0)  # ready at 5 s, cut at 7 s
    with pytest.raises(PlanError, match="after its result was ready"):
        _cancel_plan(delegations=(early,))


def test_arguments_are_checked_against_the_capability_schema() -> None:
    bad = replace(_cancel_plan().delegations[0], arguments={"city": "Paris"})
    with pytest.raises(PlanError, match="'day' is a required property"):
        _cancel_plan(delegations=(bad,))


def test_times_that_do_not_follow_from_the_anchors_raise() -> None:
    plan = _cancel_plan()
    moved = (*plan.turns[:3], replace(plan.turns[3], start_s=7.5))
    with pytest.raises(PlanError, match="retime"):
        replace(plan, turns=moved)


def test_speech_over_the_assistant_without_an_event_raises() -> None:
    with pytest.raises(PlanError, match="no overlap event"):
        _cancel_plan(events=(), delegations=(), category="proactive_duplex")


def test_retime_recomputes_everything_from_measured_durations() -> None:
    plan = _cancel_plan()
    assert plan.retime([t.duration_s for t in plan.turns]) == plan
    longer = plan.retime([2.6, 7.1, 1.2, 0.8])
    assert longer.turns[1].start_s == 4.0  # the first boundary after 2.6 + 0.5 + 0.2
    assert longer.turns[2].start_s == pytest.approx(4.0 + 0.3 * 7.1)
    assert longer.turns[2].end_s == pytest.approx(4.0 + 0.3 * 7.1 + 1.2)
    assert longer.turns[1].cut_at_s == longer.turns[3].start_s == 8.0
    with pytest.raises(PlanError, match="ends after the turn it cuts"):
        plan.retime([2.0, 3.0, 2.5, 1.0])


# --- what the model writes --------------------------------------------------------------------
def test_spans_parse_as_the_frontend_reads_them() -> None:
    call = _cancel_plan().delegations[0]
    parsed = parse_call(call.span())
    assert parsed.valid and parsed.action == "call" and parsed.target is None
    assert (parsed.name, parsed.arguments) == ("weather", {"city": "Paris", "day": "today"})
    # pending work is named by its capability: the model has not seen its id yet
    assert parse_call(call.cancel_span()).target == "weather"
    revision = replace(
        call, item_id="11112222", supersedes=ITEM, status="completed", result_at_s=9.0,
        cancel_turn=None, announce_turn=3,
    )  # fmt: skip
    assert parse_call(revision.span("weather")).target == "weather"
    with pytest.raises(PlanError, match="name what it supersedes"):
        revision.span()
    # a retry follows a failed result, which showed the model the id
    retry = replace(revision, form="retry")
    assert (parse_call(retry.span()).action, parse_call(retry.span()).target) == ("retry", ITEM)
    injected = json.loads(replace(revision, result_text="sunny").injected())
    assert injected == {"item": "11112222", "capability": "weather", "status": "completed",
                        "result": "sunny"}  # fmt: skip


# --- JSON -------------------------------------------------------------------------------------
def test_json_round_trip_is_exact() -> None:
    plan = _cancel_plan()
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    assert Plan.from_json(text).to_json() == text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["turns"][1]["voice"].update(pitch="50"), r"plan\.turns\[1\]\.voice.*pitch"),
        (lambda d: d["turns"][0].update(mood="calm"), r"plan\.turns\[0\]\.mood: unknown key"),
        (lambda d: d["acoustics"].pop("snr_db"), r"plan\.acoustics\.snr_db: missing"),
        (lambda d: d.update(group="radio"), r"Plan\.group: 'radio' is not"),
        (lambda d: d.update(version=99), "plan version 99"),
        (lambda d: d["events"][0].update(action="stop_output"), "yield_floor"),
    ],
)
def test_bad_json_names_the_key(edit: Any, message: str) -> None:
    data = json.loads(_cancel_plan().to_json())
    edit(data)
    with pytest.raises(PlanError, match=message):
        Plan.from_json(json.dumps(data))
