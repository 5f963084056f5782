"""Delegation spans: what counts as a well-formed call."""

from __future__ import annotations

import pytest

from venus.daemon.frontend.delegation import MAX_SPAN_CHARS, parse_call


def test_a_tool_call_parses_with_or_without_arguments() -> None:
    call = parse_call('{"name": " weather ", "arguments": {"city": "Paris"}}')
    assert call.valid and call.name == "weather" and call.arguments == {"city": "Paris"}
    bare = parse_call('{"name": "time"}')
    assert bare.valid and bare.arguments == {}


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("weather in Paris", "not JSON"),
        ('["weather"]', "not an object"),
        ('{"arguments": {}}', '"name"'),
        ('{"name": ""}', '"name"'),
        ('{"name": "w", "arguments": [1]}', '"arguments"'),
        ('{"name": "w", "args": {}}', "unknown keys args"),
        ('{"name": "w"', "not JSON"),
    ],
)
def test_malformed_calls_say_why(raw: str, why: str) -> None:
    call = parse_call(raw)
    assert not call.valid and call.name is None and why in (call.error or "")
    assert call.raw == raw


def test_a_span_cut_off_or_runaway_is_malformed() -> None:
    assert "did not close" in (parse_call('{"name": "w"}', truncated=True).error or "")
    assert "longer" in (parse_call("x" * (MAX_SPAN_CHARS + 1)).error or "")


def test_decisions_on_earlier_items() -> None:
    revise = parse_call('{"name": "weather", "arguments": {"day": "Sat"}, "supersedes": "3f2a"}')
    assert revise.valid and revise.action == "call" and revise.target == "3f2a"
    cancel = parse_call('{"cancel": "3f2a9c1b"}')
    assert cancel.valid and cancel.action == "cancel" and cancel.target == "3f2a9c1b"
    assert parse_call('{"retry": "3f2a"}').action == "retry"
    assert "one item id" in (parse_call('{"cancel": "3f2a", "name": "x"}').error or "")
    assert "one item id" in (parse_call('{"retry": 7}').error or "")
    assert "item id" in (parse_call('{"name": "w", "supersedes": ""}').error or "")
