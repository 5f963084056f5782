"""The in-process transport: cancels, races, stop and expiry; one Finished per item."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest
from support.inprocess import ECHO, WAIT_S, Gate, Recorder, cap, echo, request

from venus.capabilities.inprocess import (
    STOPPED,
    CallCancelled,
    Capability,
    Context,
    InProcessTransport,
)
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Accepted, Finished, Progress, TransportEvent


def test_cancel_before_start(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    first, second = Gate(), Gate()
    t = make(
        cap("first", first), cap("second", second), cap("third", lambda ctx: None), max_workers=1
    )
    t.call(request("a", "first"))
    assert first.started.wait(WAIT_S)
    t.call(request("b", "second"))  # queued behind "a": one worker
    t.cancel("b", "the user changed their mind")
    assert recorder.finished("b") == Finished(
        "b", "cancelled", ToolResult.failed("cancelled", "the user changed their mind")
    )
    assert recorder.of("b")[0] == Accepted("b")
    first.release.set()
    assert recorder.finished("a").status == "completed"
    t.call(request("c", "third"))  # one worker, in order: "b" was taken off the queue
    recorder.finished("c")
    assert not second.started.is_set()
    assert len(recorder.of("b")) == 2


def test_cancel_while_running(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    gate = Gate(honour_cancel=True)
    t = make(cap("slow", gate))
    t.call(request("a", "slow"))
    assert gate.started.wait(WAIT_S)
    t.cancel("a", "superseded by i2")
    t.cancel("a", "a second reason is ignored")
    final = recorder.finished("a")
    assert gate.seen_token
    assert final == Finished("a", "cancelled", ToolResult.failed("cancelled", "superseded by i2"))


def test_cancel_wins_over_a_result_returned_after_it(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    gate = Gate(result={"echo": "too late"})  # ignores the token
    t = make(cap("stubborn", gate))
    t.call(request("a", "stubborn"))
    assert gate.started.wait(WAIT_S)
    t.cancel("a", "stop")
    gate.release.set()
    assert recorder.finished("a").status == "cancelled"


def test_a_handler_may_cancel_itself(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    def gives_up(ctx: Context) -> None:
        raise CallCancelled("the camera went away")

    make(cap("gives_up", gives_up)).call(request("a", "gives_up"))
    final = recorder.finished("a")
    assert final == Finished(
        "a", "cancelled", ToolResult.failed("cancelled", "the camera went away")
    )


def test_not_cancellable_runs_to_its_end(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    gate = Gate(result="sent")
    t = make(cap("send", gate, cancellable=False))
    t.call(request("a", "send"))
    assert gate.started.wait(WAIT_S)
    t.cancel("a", "stop")
    gate.release.set()
    assert recorder.finished("a") == Finished("a", "completed", ToolResult.ok("sent"))


def test_cancel_after_finish_is_ignored(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    t = make()
    t.call(request())
    recorder.finished("i1")
    before = list(recorder.events)
    t.cancel("i1", "too late")
    t.cancel("never-called", "unknown")
    assert recorder.events == before


def test_a_second_call_for_an_item_in_flight_is_ignored(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    gate = Gate()
    t = make(cap("slow", gate))
    t.call(request("a", "slow"))
    assert gate.started.wait(WAIT_S)
    t.call(request("a", "slow"))
    gate.release.set()
    recorder.finished("a")
    t.stop()  # every thread done: nothing more can come
    assert [type(e) for e in recorder.of("a")] == [Accepted, Finished]
    t.call(request("a", "slow"))  # after stop: refused, still one answer per call
    refused = recorder.of("a")[-1]
    assert isinstance(refused, Finished) and refused.result.error is not None
    assert refused.result.error.code == "no_provider"


def test_exactly_one_finished_under_a_race(recorder: Recorder) -> None:
    t = InProcessTransport([cap("quick", lambda ctx: "ok")], max_workers=4)
    t.start(recorder)
    threads = []
    for i in range(200):
        both = threading.Barrier(2, timeout=WAIT_S)

        def caller(item_id: str = f"r{i}", b: threading.Barrier = both) -> None:
            b.wait()
            t.call(request(item_id, "quick"))

        def canceller(item_id: str = f"r{i}", b: threading.Barrier = both) -> None:
            b.wait()
            t.cancel(item_id, "race")

        threads += [threading.Thread(target=caller), threading.Thread(target=canceller)]
        threads[-2].start()
        threads[-1].start()
    for th in threads:
        th.join(WAIT_S)
        assert not th.is_alive()
    for i in range(200):
        recorder.finished(f"r{i}")
    t.stop(timeout_s=WAIT_S)  # joins the workers: no event can come after this
    finished = Counter(e.item_id for e in recorder.events if isinstance(e, Finished))
    assert finished == Counter({f"r{i}": 1 for i in range(200)})
    for i in range(200):
        kinds = [type(e) for e in recorder.of(f"r{i}")]
        assert kinds[-1] is Finished and kinds[:-1] in ([], [Accepted])
    statuses = Counter(e.status for e in recorder.events if isinstance(e, Finished))
    assert set(statuses) <= {"completed", "cancelled"}


def test_stop_cancels_in_flight(recorder: Recorder) -> None:
    running, queued = Gate(honour_cancel=True), Gate()
    t = InProcessTransport([cap("running", running), cap("queued", queued)], max_workers=1)
    t.start(recorder)
    t.call(request("a", "running"))
    assert running.started.wait(WAIT_S)
    t.call(request("b", "queued"))
    t.stop(timeout_s=WAIT_S)
    assert running.seen_token and not queued.started.is_set()
    for item_id in ("a", "b"):
        assert recorder.finished(item_id) == Finished(
            item_id, "cancelled", ToolResult.failed("cancelled", STOPPED)
        )
    t.call(request("c", "running"))
    result = recorder.finished("c").result
    assert result.error is not None and result.error.code == "no_provider" and result.retryable


def test_stop_answers_a_handler_that_does_not_return(recorder: Recorder) -> None:
    stuck, stubborn = Gate(), Gate()
    t = InProcessTransport([cap("stuck", stuck), cap("stubborn", stubborn, cancellable=False)])
    t.start(recorder)
    t.call(request("a", "stuck"))
    t.call(request("b", "stubborn"))
    assert stuck.started.wait(WAIT_S) and stubborn.started.wait(WAIT_S)
    t.stop(timeout_s=0.1)
    assert recorder.finished("a").status == "cancelled"
    lost = recorder.finished("b")
    assert lost.status == "failed" and lost.result.error is not None
    assert lost.result.error.code == "provider_lost"
    stuck.release.set()
    stubborn.release.set()
    t.start(recorder)  # a fresh start; the old workers finish and drop their results
    t.call(request("c", "stuck"))  # stuck.release is set: this one returns at once
    recorder.finished("c")
    t.stop(timeout_s=WAIT_S)
    assert Counter(type(e) for e in recorder.of("a"))[Finished] == 1
    assert Counter(type(e) for e in recorder.of("b"))[Finished] == 1


def test_expired_before_start(recorder: Recorder) -> None:
    now = [1000.0]
    ran = threading.Event()
    gate = Gate()
    t = InProcessTransport(
        [cap("slow", gate), cap("quick", lambda ctx: ran.set())],
        max_workers=1,
        clock=lambda: now[0],
    )
    t.start(recorder)
    try:
        t.call(request("late", "quick", deadline_s=999.0))
        final = recorder.finished("late")
        assert recorder.of("late") == [final]
        assert final.result.error is not None and final.result.error.code == "expired"
        t.call(request("a", "slow", deadline_s=2000.0))
        assert gate.started.wait(WAIT_S)
        t.call(request("b", "quick", deadline_s=1010.0))  # queued, then it goes stale
        now[0] = 1020.0
        gate.release.set()
        final = recorder.finished("b")
        assert final.status == "failed" and final.result.error is not None
        assert final.result.error.code == "expired" and "10.0 s" in final.result.error.message
        assert not ran.is_set()
    finally:
        t.stop(timeout_s=WAIT_S)


def test_on_event_may_call_back_into_the_transport() -> None:
    done = threading.Event()
    seen: list[TransportEvent] = []
    t = InProcessTransport([Capability(ECHO, echo)])

    def sink(event: TransportEvent) -> None:
        seen.append(event)
        assert t.contracts()  # would deadlock if the lock were held while emitting
        if isinstance(event, Accepted):
            t.cancel("unknown", "just checking")
        if isinstance(event, Finished):
            done.set()

    t.start(sink)
    try:
        t.call(request())
        assert done.wait(WAIT_S)
    finally:
        t.stop(timeout_s=WAIT_S)
    assert [type(e) for e in seen] == [Accepted, Progress, Finished]


def test_a_sink_that_raises_does_not_lose_the_final_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    finals: list[Finished] = []
    done = threading.Event()

    def sink(event: TransportEvent) -> None:
        if isinstance(event, Finished):
            finals.append(event)
            done.set()
            return
        raise RuntimeError("broken sink")

    t = InProcessTransport([Capability(ECHO, echo)])
    t.start(sink)
    try:
        t.call(request())
        assert done.wait(WAIT_S)
    finally:
        t.stop(timeout_s=WAIT_S)
    assert [f.status for f in finals] == ["completed"]
    assert "broken sink" in caplog.text


def test_the_handler_gets_a_private_copy_of_the_arguments(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    seen: list[Context] = []

    def keep(ctx: Context) -> None:
        seen.append(ctx)
        ctx.arguments["n"].append(2)

    arguments = {"n": [1]}
    make(cap("keep", keep)).call(request("a", "keep", arguments=arguments))
    recorder.finished("a")
    assert arguments == {"n": [1]}
    (ctx,) = seen
    assert (ctx.item_id, ctx.attempt, ctx.site_id, ctx.session_id) == ("a", 1, "kitchen", "s1")
