"""The in-process transport: events in order, failures as results, the registry."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from support.inprocess import ECHO, Recorder, cap, echo, request

from venus.capabilities.inprocess import (
    Capability,
    Context,
    InProcessTransport,
    RetryableError,
)
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Accepted, Finished, Progress
from venus.errors import CapabilityError


def test_events_in_order(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    t = make()
    t.call(request())
    final = recorder.finished("i1")
    assert recorder.of("i1") == [
        Accepted("i1"),
        Progress("i1", 0.5, "half way"),
        final,
    ]
    assert final.status == "completed"
    assert final.result.structured == {"echo": "hi"}
    assert [c.name for c in t.contracts()] == ["echo"]


def test_return_values_are_normalized(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    failed = ToolResult.failed("not_found", "no such city")
    t = make(
        cap("text", lambda ctx: "It is noon."),
        cap("nothing", lambda ctx: None),
        cap("failing", lambda ctx: failed),
        cap("number", lambda ctx: 42),
        cap("not_json", lambda ctx: {"when": {1, 2}}),
    )
    for name in ("text", "nothing", "failing", "number", "not_json"):
        t.call(request(name, name))
    assert recorder.finished("text").result == ToolResult.ok("It is noon.")
    assert recorder.finished("nothing").result == ToolResult.ok()
    assert recorder.finished("failing") == Finished("failing", "failed", failed)
    for name, expected in (("number", "returned a int"), ("not_json", "not JSON")):
        final = recorder.finished(name)
        assert final.status == "failed"
        assert final.result.error is not None and final.result.error.code == "invalid_output"
        assert expected in final.result.error.message


def test_invalid_arguments(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    ran = threading.Event()
    t = make(cap("strict", lambda ctx: ran.set(), input_schema=ECHO.input_schema))
    t.call(request("a", "strict", arguments={"text": 5}))
    t.call(request("b", "strict", arguments={"text": "x", "extra": 1}))
    t.call(request("c", "strict", arguments={"text": object()}))
    for item_id, expected in (
        ("a", "$.text: 5 is not of type 'string'"),
        ("b", "Additional properties are not allowed ('extra' was unexpected)"),
        ("c", "arguments are not JSON"),
    ):
        final = recorder.finished(item_id)
        assert recorder.of(item_id) == [final]  # no Accepted: it never started
        assert final.status == "failed" and final.result.error is not None
        assert final.result.error.code == "invalid_arguments"
        assert expected in final.result.error.message
        assert not final.result.retryable
    assert not ran.is_set()


def test_unknown_capability(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    make().call(request("a", "weather"))
    final = recorder.finished("a")
    assert recorder.of("a") == [final]
    assert final.status == "failed"
    assert final.result.error is not None
    assert final.result.error.code == "no_provider" and not final.result.retryable
    assert "'weather'" in final.result.error.message and "echo" in final.result.error.message


def test_handler_exception(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    def boom(ctx: Context) -> None:
        raise ValueError("the sky fell")

    make(cap("boom", boom)).call(request("a", "boom"))
    final = recorder.finished("a")
    assert final == Finished(
        "a", "failed", ToolResult.failed("error", "ValueError: the sky fell", retryable=False)
    )


def test_retryable_error(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    def busy(ctx: Context) -> None:
        raise RetryableError("the service is busy")

    make(cap("busy", busy)).call(request("a", "busy"))
    result = recorder.finished("a").result
    assert result.error is not None
    assert result.error.code == "error" and result.error.message == "the service is busy"
    assert result.retryable


def test_bad_progress_is_a_handler_error(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    make(cap("p", lambda ctx: ctx.progress(1.5))).call(request("a", "p"))
    result = recorder.finished("a").result
    assert result.error is not None and "outside 0..1" in result.error.message


def test_output_schema_violation(
    make: Callable[..., InProcessTransport], recorder: Recorder
) -> None:
    t = make(
        cap("wrong", lambda ctx: {"echo": 5}, output_schema=ECHO.output_schema),
        cap("text_only", lambda ctx: "hello", output_schema=ECHO.output_schema),
    )
    t.call(request("a", "wrong"))
    t.call(request("b", "text_only"))
    for item_id, expected in (
        ("a", "$.echo: 5 is not of type 'string'"),
        ("b", "returned no structured content"),
    ):
        final = recorder.finished(item_id)
        assert final.status == "failed" and final.result.error is not None
        assert final.result.error.code == "invalid_output"
        assert expected in final.result.error.message


def test_registry() -> None:
    t = InProcessTransport([Capability(ECHO, echo)])
    with pytest.raises(CapabilityError, match="'echo' is registered twice"):
        t.add(Capability(ECHO, echo))
    with pytest.raises(CapabilityError, match="'echo' is registered twice"):
        InProcessTransport([Capability(ECHO, echo), Capability(ECHO, echo)])
    t.add(cap("later", lambda ctx: None))
    assert [c.name for c in t.contracts()] == ["echo", "later"]
    with pytest.raises(CapabilityError, match="before start"):
        t.call(request())
    with pytest.raises(CapabilityError, match="max_workers"):
        InProcessTransport([], max_workers=0)
    t.start(lambda e: None)
    try:
        with pytest.raises(CapabilityError, match="already started"):
            t.start(lambda e: None)
    finally:
        t.stop()
    t.stop()  # twice is fine
