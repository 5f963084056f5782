"""Normalized results: the constructors, text(), and the MCP CallToolResult both ways."""

from __future__ import annotations

import json
from typing import Any

import pytest

from venus.capabilities.result import ToolError, ToolResult
from venus.errors import CapabilityError


def test_ok_with_text() -> None:
    r = ToolResult.ok("It is noon.")
    assert r.text() == "It is noon."
    assert not r.is_error and r.error is None and not r.retryable
    assert r.to_json() == {"content": [{"type": "text", "text": "It is noon."}], "isError": False}


def test_ok_with_structured_content_only_says_it_as_json() -> None:
    r = ToolResult.ok(structured={"b": 1, "a": "é"})
    assert r.text() == '{"a": "é", "b": 1}'
    assert r.to_json()["structuredContent"] == {"b": 1, "a": "é"}


def test_failed() -> None:
    r = ToolResult.failed("timeout", "no answer in 10 s", retryable=True)
    assert r.is_error and r.retryable
    assert r.error == ToolError("timeout", "no answer in 10 s", True)
    assert r.text() == "no answer in 10 s"
    assert r.to_json()["error"] == {
        "code": "timeout",
        "message": "no answer in 10 s",
        "retryable": True,
    }
    assert not ToolResult.failed("cancelled", "asked to stop").retryable


def test_text_joins_text_blocks_and_skips_others() -> None:
    r = ToolResult(
        content=(
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": ""},
            {"type": "text", "text": "two"},
        ),
        structured={"n": 2},
    )
    assert r.text() == "one\ntwo"
    empty = ToolResult(content=({"type": "text", "text": ""},), structured={"n": 2})
    assert empty.text() == '{"n": 2}'
    assert ToolResult().text() == ""


@pytest.mark.parametrize(
    "result",
    [
        ToolResult.ok("hi"),
        ToolResult.ok(structured={"x": [1, 2], "y": None}),
        ToolResult.ok("both", structured={"x": 1}),
        ToolResult.failed("provider_lost", "the worker went away", retryable=True),
        ToolResult(content=({"type": "image", "data": "AAAA", "mimeType": "image/png"},)),
        ToolResult(),
    ],
)
def test_json_round_trip(result: ToolResult) -> None:
    assert ToolResult.from_json(result.to_json()) == result
    assert ToolResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_an_empty_object_is_an_empty_success() -> None:
    assert ToolResult.from_json({}) == ToolResult()


def test_a_plain_mcp_error_gets_a_code() -> None:
    r = ToolResult.from_json(
        {"content": [{"type": "text", "text": "city not found"}], "isError": True}
    )
    assert r.error == ToolError("error", "city not found", False)
    bare = ToolResult.from_json({"isError": True})
    assert bare.error is not None and bare.error.message == "the capability reported an error"


def test_error_alone_means_failed() -> None:
    r = ToolResult.from_json({"error": {"code": "timeout"}})
    assert r.is_error and r.error == ToolError("timeout", "", False)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "a result is a JSON object"),
        ({"content": {"type": "text"}}, "'content' must be a list of objects"),
        ({"content": ["hi"]}, "'content' must be a list of objects"),
        ({"content": [{"text": "hi"}]}, r"content\[0\] has no string 'type'"),
        ({"content": [{"type": "text", "text": 5}]}, r"content\[0\] is a text block without"),
        ({"structuredContent": [1]}, "'structuredContent' must be an object"),
        ({"isError": "true"}, "'isError' must be true or false"),
        ({"isError": True, "error": "boom"}, "'error' must be an object with a string 'code'"),
        ({"isError": True, "error": {"message": "x"}}, "'error' must be an object"),
        ({"isError": True, "error": {"code": "x", "message": 5}}, "'error.message' must be"),
        ({"isError": True, "error": {"code": "x", "retryable": "yes"}}, "'error.retryable'"),
        ({"isError": False, "error": {"code": "x"}}, "'error' is set but 'isError' is false"),
    ],
)
def test_malformed_results(data: Any, expected: str) -> None:
    with pytest.raises(CapabilityError, match=f"^reply from w1: {expected}"):
        ToolResult.from_json(data, "reply from w1")
