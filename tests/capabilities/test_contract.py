"""Contracts: the MCP tool definition both ways, and clear errors for bad ones."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from venus.capabilities.contract import META_KEYS, Contract
from venus.errors import CapabilityError

SOURCE = "worker w1"


def weather() -> Contract:
    """A contract with every field away from its default."""
    return Contract(
        name="weather",
        version="3",
        title="Weather",
        description="The weather where the user is.",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        output_schema={"type": "object", "properties": {"celsius": {"type": "number"}}},
        annotations={"readOnlyHint": True},
        timeout_s=12.5,
        freshness_s=600.0,
        evidence="audio+frame",
        idempotent=True,
        cancellable=False,
        deliver="interrupt",
    )


def tool(**meta: Any) -> dict[str, Any]:
    return {"name": "weather", "_meta": {f"venus/{k}": v for k, v in meta.items()}}


def test_round_trip_with_every_meta_key() -> None:
    c = weather()
    t = c.to_tool()
    assert t["_meta"] == {
        "venus/version": "3",
        "venus/timeout_s": 12.5,
        "venus/freshness_s": 600.0,
        "venus/evidence": "audio+frame",
        "venus/idempotent": True,
        "venus/cancellable": False,
        "venus/deliver": "interrupt",
    }
    assert set(t["_meta"]) == set(META_KEYS)
    assert t["outputSchema"] == c.output_schema
    assert Contract.from_tool(t) == c
    assert Contract.from_tool(json.loads(json.dumps(t)), SOURCE) == c  # through the wire


def test_defaults() -> None:
    c = Contract.from_tool({"name": "clock"})
    assert c == Contract(name="clock")
    assert c.input_schema == {"type": "object"} and c.output_schema is None
    t = c.to_tool()
    assert "outputSchema" not in t
    assert t["title"] == "clock"  # MCP clients show the title; the name stands in


def test_integer_version_and_foreign_meta_keys_are_accepted() -> None:
    t = tool(version=2)
    t["_meta"]["io.example/owner"] = "someone else's key"
    assert Contract.from_tool(t).version == "2"


def test_evidence_flags() -> None:
    assert not Contract(name="a").wants_audio
    both = Contract(name="a", evidence="audio+frame")
    assert both.wants_audio and both.wants_frame
    assert not Contract(name="a", evidence="frame").wants_audio


@pytest.mark.parametrize("name", ["", "Weather", "a-b", "x" * 65, "ok\n", "é"])
def test_bad_names(name: str) -> None:
    with pytest.raises(CapabilityError, match=r"name .* must match") as e:
        Contract.from_tool({"name": name}, SOURCE)
    assert str(e.value).startswith(SOURCE)
    with pytest.raises(CapabilityError, match="must match"):
        Contract(name=name)


def test_a_name_that_is_not_a_string() -> None:
    with pytest.raises(CapabilityError, match=f"^{SOURCE}: no string 'name'"):
        Contract.from_tool({"name": 5}, SOURCE)


@pytest.mark.parametrize(
    ("key", "value"),
    [("evidence", "video"), ("evidence", ["audio"]), ("deliver", "now"), ("deliver", None)],
)
def test_bad_evidence_or_deliver(key: str, value: Any) -> None:
    with pytest.raises(CapabilityError, match=f"^{SOURCE}: capability weather: {key} ") as e:
        Contract.from_tool(tool(**{key: value}), SOURCE)
    assert "is not one of" in str(e.value)


@pytest.mark.parametrize("key", ["timeout_s", "freshness_s"])
@pytest.mark.parametrize("value", [0, -1, 0.0, math.nan, math.inf, True, "10", None])
def test_timeouts_must_be_positive_numbers(key: str, value: Any) -> None:
    with pytest.raises(CapabilityError, match=f"^{SOURCE}: capability weather: {key} must be"):
        Contract.from_tool(tool(**{key: value}), SOURCE)


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ([1, 2], "a tool definition is a JSON object"),
        ({"name": "weather", "_meta": []}, "'_meta' is not an object"),
        ({"name": "weather", "inputSchema": []}, "'inputSchema' must be an object"),
        ({"name": "weather", "outputSchema": "x"}, "'outputSchema' must be an object"),
        ({"name": "weather", "annotations": [1]}, "'annotations' must be an object"),
        ({"name": "weather", "title": None}, "title must be a string"),
        ({"name": "weather", "description": 5}, "description must be a string"),
        (tool(version=True), "version must be a string"),
        (tool(idempotent="false"), "idempotent must be true or false"),
        (tool(cancellable=1), "cancellable must be true or false"),
    ],
)
def test_bad_types_name_the_field_and_source(definition: Any, expected: str) -> None:
    with pytest.raises(CapabilityError, match=f"^{SOURCE}.*{expected}"):
        Contract.from_tool(definition, SOURCE)


def test_an_unknown_venus_key_suggests_the_right_one() -> None:
    with pytest.raises(
        CapabilityError, match="'venus/timout_s' is unknown; did you mean venus/timeout_s"
    ):
        Contract.from_tool(tool(timout_s=3), SOURCE)


@pytest.mark.parametrize(
    ("key", "schema", "expected"),
    [
        ("inputSchema", {"type": "string"}, 'input_schema must have "type": "object"'),
        ("inputSchema", {"type": "object", "properties": 5}, "input_schema is not a valid"),
        ("outputSchema", {"properties": {}}, "output_schema must have"),
        ("outputSchema", {"type": "object", "required": "x"}, r"output_schema is not a valid.*\$"),
    ],
)
def test_schemas_are_checked(key: str, schema: dict[str, Any], expected: str) -> None:
    with pytest.raises(CapabilityError, match=f"^{SOURCE}: capability weather: {expected}"):
        Contract.from_tool({"name": "weather", key: schema}, SOURCE)
