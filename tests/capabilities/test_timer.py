"""The ``timer`` built-in through a real in-process transport: a set call answers late,
when its timer runs out; cancel (by id, by label, by the transport, by stop) ends it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from support.inprocess import WAIT_S, Recorder, request

from venus.capabilities.builtin import BUILTINS, builtin_transport
from venus.capabilities.builtin.timer import (
    MAX_SECONDS,
    MAX_TIMERS,
    TIMER,
    SampleTime,
    duration,
)
from venus.capabilities.builtin.timer import timer_capability as timer
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import STOPPED, InProcessTransport
from venus.capabilities.transport import Finished, Progress
from venus.errors import CapabilityError

LONG_S = 30  # a timer no test waits for: it only ends by a cancel
NOON_ISH = datetime(2026, 11, 30, 13, 5, 9, tzinfo=timezone.utc).timestamp()

Make = Callable[..., InProcessTransport]


class Events(Recorder):
    """A recorder that can also wait for an item's first ``Progress``."""

    def progress(self, item_id: str) -> Progress:
        with self._changed:
            ok = self._changed.wait_for(lambda: self._progress(item_id) is not None, WAIT_S)
            assert ok, f"no Progress for {item_id} within {WAIT_S} s: {self.events}"
            found = self._progress(item_id)
        assert found is not None
        return found

    def _progress(self, item_id: str) -> Progress | None:
        return next(
            (e for e in self.events if isinstance(e, Progress) and e.item_id == item_id), None
        )


@pytest.fixture
def recorder() -> Events:
    return Events()


def set_timer(t: InProcessTransport, events: Events, item_id: str, **arguments: Any) -> str:
    """Set a timer and wait until it is pending; its progress message."""
    t.call(request(item_id, "timer", arguments={"action": "set", **arguments}))
    return events.progress(item_id).message


def ask(t: InProcessTransport, events: Events, item_id: str, **arguments: Any) -> Finished:
    t.call(request(item_id, "timer", arguments=arguments))
    return events.finished(item_id)


def test_the_contract() -> None:
    assert TIMER in [c.contract for c in BUILTINS]
    assert TIMER in builtin_transport().contracts()
    assert TIMER.timeout_s > MAX_SECONDS and TIMER.deliver == "interrupt"
    assert not TIMER.idempotent and TIMER.cancellable and TIMER.evidence == "none"
    assert Contract.from_tool(TIMER.to_tool()) == TIMER


@pytest.mark.parametrize(
    ("seconds", "noun", "adjective"),
    [
        (1, "1 second", "1 second"),
        (0.4, "1 second", "1 second"),
        (90, "1 minute 30 seconds", "1 minute 30 second"),
        (300, "5 minutes", "5 minute"),
        (5400, "1 hour 30 minutes", "1 hour 30 minute"),
        (MAX_SECONDS, "24 hours", "24 hour"),
    ],
)
def test_durations_are_said_as_people_say_them(seconds: float, noun: str, adjective: str) -> None:
    assert (duration(seconds), duration(seconds, adjective=True)) == (noun, adjective)


def test_a_timer_answers_when_it_runs_out_and_not_before(make: Make, recorder: Events) -> None:
    t = make(timer(clock=lambda: NOON_ISH))
    began = time.monotonic()
    message = set_timer(t, recorder, "s1", seconds=1, label="pasta")
    assert message == "timer t1 set for 1 second (pasta)"
    final = recorder.finished("s1")
    assert time.monotonic() - began >= 1.0
    assert final.status == "completed", final
    assert final.result.text() == "Your 1 second timer for pasta is done."
    structured = dict(final.result.structured or {})
    due = datetime.fromisoformat(structured.pop("due"))
    assert due.timestamp() == NOON_ISH + 1  # from the injected clock
    assert structured == {"timer": "t1", "label": "pasta", "seconds": 1}


def test_list_shows_the_pending_timers_soonest_first(make: Make, recorder: Events) -> None:
    t = make(timer())
    assert ask(t, recorder, "l0", action="list").result.structured == {"timers": []}
    set_timer(t, recorder, "s1", seconds=2 * LONG_S)
    set_timer(t, recorder, "s2", seconds=LONG_S, label="tea")
    final = ask(t, recorder, "l1", action="list")
    assert final.status == "completed", final
    first, second = (final.result.structured or {})["timers"]
    assert (first["timer"], first["label"], first["seconds"]) == ("t2", "tea", LONG_S)
    assert (second["timer"], second["label"], second["seconds"]) == ("t1", None, 2 * LONG_S)
    assert 0 < first["left_s"] <= LONG_S < second["left_s"] <= 2 * LONG_S
    assert final.result.text().startswith("2 timers are running: the 30 second timer for tea")
    assert "the 1 minute timer (t1)" in final.result.text()
    for item in ("s1", "s2"):
        assert not any(isinstance(e, Finished) for e in recorder.of(item)), "a timer ended"


def test_cancel_by_id_and_by_label(make: Make, recorder: Events) -> None:
    t = make(timer())
    set_timer(t, recorder, "s1", seconds=LONG_S, label="tea")
    set_timer(t, recorder, "s2", seconds=LONG_S, label="Eggs")
    began = time.monotonic()
    by_id = ask(t, recorder, "c1", action="cancel", timer="t1")
    assert by_id.status == "completed", by_id
    assert by_id.result.text() == "Cancelled the 30 second timer for tea (t1)."
    assert (by_id.result.structured or {})["cancelled"]["timer"] == "t1"
    ended = recorder.finished("s1")
    assert ended.status == "cancelled" and ended.result.error is not None
    assert ended.result.error.code == "cancelled"
    assert "t1" in ended.result.error.message and "c1" in ended.result.error.message
    by_label = ask(t, recorder, "c2", action="cancel", timer="eggs")  # any case
    assert by_label.status == "completed", by_label
    assert recorder.finished("s2").status == "cancelled"
    assert time.monotonic() - began < LONG_S  # cancelled, not run out
    assert ask(t, recorder, "l1", action="list").result.structured == {"timers": []}


def test_a_cancel_must_name_one_timer(make: Make, recorder: Events) -> None:
    t = make(timer())
    set_timer(t, recorder, "s1", seconds=LONG_S, label="tea")
    set_timer(t, recorder, "s2", seconds=LONG_S, label="tea")
    unknown = ask(t, recorder, "c1", action="cancel", timer="coffee")
    assert unknown.status == "failed" and unknown.result.error is not None
    assert unknown.result.error.code == "invalid_arguments"
    assert "'coffee'" in unknown.result.error.message
    assert "(t1)" in unknown.result.error.message and "(t2)" in unknown.result.error.message
    both = ask(t, recorder, "c2", action="cancel", timer="tea")
    assert both.result.error is not None and both.result.error.code == "invalid_arguments"
    assert "t1, t2" in both.result.error.message and "by its id" in both.result.error.message
    timers = (ask(t, recorder, "l1", action="list").result.structured or {})["timers"]
    assert [x["timer"] for x in timers] == ["t1", "t2"]  # neither was cancelled


def test_a_transport_cancel_ends_the_timer(make: Make, recorder: Events) -> None:
    t = make(timer())
    set_timer(t, recorder, "s1", seconds=LONG_S)
    t.cancel("s1", "the user said never mind")
    final = recorder.finished("s1")
    assert final.status == "cancelled"
    assert final.result.text() == "the user said never mind"
    assert ask(t, recorder, "l1", action="list").result.structured == {"timers": []}


def test_too_many_timers(make: Make, recorder: Events) -> None:
    t = make(timer(max_timers=2))
    set_timer(t, recorder, "s1", seconds=LONG_S)
    set_timer(t, recorder, "s2", seconds=LONG_S)
    final = ask(t, recorder, "s3", action="set", seconds=LONG_S)
    assert final.status == "failed" and final.result.error is not None
    assert final.result.error.code == "too_many_timers"
    assert "(t1, t2)" in final.result.error.message and "cancel one" in final.result.error.message
    assert ask(t, recorder, "c1", action="cancel", timer="t1").status == "completed"
    set_timer(t, recorder, "s4", seconds=LONG_S)  # room again


def test_pending_timers_leave_the_builtins_room(recorder: Events) -> None:
    t = builtin_transport()
    t.start(recorder)
    try:
        for i in range(MAX_TIMERS):
            set_timer(t, recorder, f"s{i}", seconds=LONG_S)
        t.call(request("calc", "calculator", arguments={"expression": "6*7"}))
        assert recorder.finished("calc").status == "completed"
    finally:
        t.stop(timeout_s=WAIT_S)
    assert all(recorder.finished(f"s{i}").status == "cancelled" for i in range(MAX_TIMERS))


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"action": "set"}, "'seconds' is a required property"),
        ({"action": "set", "seconds": 0}, "less than the minimum of 1"),
        ({"action": "set", "seconds": MAX_SECONDS + 1}, "greater than the maximum"),
        ({"action": "set", "seconds": "5"}, "'5' is not of type 'number'"),
        ({"action": "set", "seconds": 5, "label": "x" * 65}, "is too long"),
        ({"action": "cancel"}, "'timer' is a required property"),
        ({"action": "snooze"}, "'snooze' is not one of"),
        ({"seconds": 5}, "'action' is a required property"),
        ({"action": "list", "minutes": 5}, "Additional properties are not allowed"),
    ],
)
def test_bad_arguments_are_refused_before_the_handler_runs(
    make: Make, recorder: Events, arguments: dict[str, Any], said: str
) -> None:
    t = make(timer())
    final = ask(t, recorder, "bad", **arguments)
    assert final.status == "failed" and final.result.error is not None
    assert final.result.error.code == "invalid_arguments"
    assert said in final.result.error.message
    assert not any(isinstance(e, Progress) for e in recorder.events)


def test_stop_ends_pending_timers_promptly(
    recorder: Events, caplog: pytest.LogCaptureFixture
) -> None:
    t = InProcessTransport([timer()])
    t.start(recorder)
    set_timer(t, recorder, "s1", seconds=LONG_S)
    set_timer(t, recorder, "s2", seconds=LONG_S)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="venus.capabilities.inprocess"):
        t.stop(timeout_s=WAIT_S)
    assert time.monotonic() - began < WAIT_S  # the handlers woke; stop did not give up
    assert "still running" not in caplog.text
    for item in ("s1", "s2"):
        final = recorder.finished(item)
        assert final.status == "cancelled" and final.result.text() == STOPPED


def test_on_the_sample_clock_a_timer_waits_for_the_run(make: Make, recorder: Events) -> None:
    """``SampleTime``: a timer made in chunk 3 for 10 s runs out when the run reaches
    13 s, however little wall time passes; list counts what is left in sample time, and
    a cancel still ends a timer at once."""
    chunks = {"s1": 3, "s2": 3}
    sample = SampleTime(1.0, made_at=chunks.get)
    t = make(timer(pace=sample))
    set_timer(t, recorder, "s1", seconds=10, label="eggs")
    set_timer(t, recorder, "s2", seconds=LONG_S, label="tea")
    assert sample.advance(4) == 5.0
    listed = (ask(t, recorder, "l1", action="list").result.structured or {})["timers"]
    assert [(x["timer"], x["left_s"]) for x in listed] == [("t1", 8.0), ("t2", 28.0)]
    sample.advance(11)  # 12 s: one short
    time.sleep(0.2)  # what a timer woken too early would need to answer
    assert not any(isinstance(e, Finished) for e in recorder.of("s1")), "ran out early"
    sample.advance(12)
    final = recorder.finished("s1")
    assert final.status == "completed", final
    assert final.result.text() == "Your 10 second timer for eggs is done."
    assert ask(t, recorder, "c1", action="cancel", timer="tea").status == "completed"
    assert recorder.finished("s2").status == "cancelled"
    with pytest.raises(CapabilityError, match="chunk_s must be > 0"):
        SampleTime(0.0)
