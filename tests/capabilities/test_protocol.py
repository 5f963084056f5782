"""The wire protocol: topics, messages both ways, the schemas, the docs' examples, limits."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from venus.capabilities import protocol as p
from venus.capabilities.contract import Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Accepted, CallRequest, Finished, Progress
from venus.errors import CapabilityError

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```(\w+)\n(.*?)```", re.S)
ITEM = "3f9c2a7e5b1d4c8e9a0b1c2d3e4f5a6b"
REPLY_TO = "venus/v1/nodes/w1/reply/d1"
SRC = "venus/v1/nodes/w1/reply/d1"


def call(**changes: Any) -> p.CallMessage:
    fields: dict[str, Any] = {
        "item_id": ITEM,
        "capability": "calculator",
        "arguments": {"expression": "2*(3+4)"},
        "session_id": "s-1",
        "site_id": "kitchen",
        "deadline_s": 1_767_225_630.5,
        "attempt": 1,
        "evidence": {},
        "reply_to": REPLY_TO,
    }
    return p.CallMessage(**{**fields, **changes})


# --- topics ------------------------------------------------------------------------------
def test_topics() -> None:
    assert p.status_topic("w1") == "venus/v1/nodes/w1/status"
    assert p.capabilities_topic("w1") == "venus/v1/nodes/w1/capabilities"
    assert p.health_topic("w1") == "venus/v1/nodes/w1/health"
    assert p.events_topic("d1") == "venus/v1/nodes/d1/events"
    assert p.call_topic("d1", "clock") == "venus/v1/nodes/d1/call/clock"
    assert p.cancel_topic("d1") == "venus/v1/nodes/d1/cancel"
    assert p.reply_topic("w1", "d1") == REPLY_TO
    assert p.topic_filter("call", "clock") == "venus/v1/nodes/+/call/clock"
    assert p.topic_filter("status") == "venus/v1/nodes/+/status"


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("venus/v1/nodes/w1/status", p.Topic("w1", "status")),
        ("venus/v1/nodes/w-1_a/capabilities", p.Topic("w-1_a", "capabilities")),
        ("venus/v1/nodes/d1/health", p.Topic("d1", "health")),
        ("venus/v1/nodes/d1/events", p.Topic("d1", "events")),
        ("venus/v1/nodes/d1/cancel", p.Topic("d1", "cancel")),
        ("venus/v1/nodes/d1/call/clock", p.Topic("d1", "call", "clock")),
        ("venus/v1/nodes/w1/reply/d1", p.Topic("w1", "reply", "d1")),
    ],
)
def test_parse_topic_round_trips(topic: str, expected: p.Topic) -> None:
    assert p.parse_topic(topic) == expected
    assert str(expected) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",
        "venus/v1/nodes",
        "venus/v1/nodes/w1",
        "venus/v1/nodes/W1/status",  # upper case
        "venus/v1/nodes/-w/status",  # starts with '-'
        f"venus/v1/nodes/{'a' * 65}/status",
        "venus/v1/nodes/w1/status/extra",
        "venus/v1/nodes/w1/call",
        "venus/v1/nodes/w1/call/Clock",
        "venus/v1/nodes/w1/reply/+",
        "venus/v1/nodes/+/status",
        "venus/v1/nodes/w1/unknown",
        "other/v1/nodes/w1/status",
    ],
)
def test_parse_topic_rejects(topic: str) -> None:
    with pytest.raises(p.ProtocolError):
        p.parse_topic(topic)


def test_protocol_error_is_a_capability_error_and_a_newer_topic_says_upgrade() -> None:
    with pytest.raises(CapabilityError, match="upgrade"):
        p.parse_topic("venus/v2/nodes/w1/status")


@pytest.mark.parametrize("node", ["", "A", "a/b", "a+", "a#", "-a", "a" * 65, "a\n"])
def test_builders_reject_bad_node_ids(node: str) -> None:
    with pytest.raises(p.ProtocolError, match="node id"):
        p.status_topic(node)
    with pytest.raises(p.ProtocolError):
        p.reply_topic("w1", node)


def test_call_topic_rejects_bad_capability_names() -> None:
    with pytest.raises(p.ProtocolError, match="capability name"):
        p.call_topic("d1", "Bad-Name")


# --- messages both ways ------------------------------------------------------------------
def test_status_is_plain_text() -> None:
    assert p.ONLINE.to_json() == b"online" and p.OFFLINE.to_json() == b"offline"
    assert p.StatusMessage.parse(b"offline", source="t") == p.OFFLINE
    for bad in (b"", b"Online", b'"online"', b"online\n", b"\xff"):
        with pytest.raises(p.ProtocolError, match=r"^t: "):
            p.StatusMessage.parse(bad, source="t")


def test_capabilities_round_trip() -> None:
    contracts = (
        Contract("clock", title="Clock", evidence="audio", deliver="interrupt"),
        Contract(
            "calculator",
            title="Calculator",
            output_schema={"type": "object"},
            timeout_s=5,
            idempotent=True,
        ),
    )
    msg = p.CapabilitiesMessage(7, contracts)
    back = p.CapabilitiesMessage.parse(msg.to_json(), source="t")
    assert back == msg
    assert json.loads(msg.to_json())["capabilities"][0]["_meta"]["venus/evidence"] == "audio"


def test_capabilities_offered_twice_or_bad_tools_are_rejected() -> None:
    with pytest.raises(p.ProtocolError, match="twice: clock"):
        p.CapabilitiesMessage(1, (Contract("clock"), Contract("clock")))
    tool = Contract("clock").to_tool()
    tool["_meta"]["venus/timeout"] = 3  # a typo
    payload = json.dumps({"v": 1, "rev": 1, "capabilities": [tool]}).encode()
    with pytest.raises(p.ProtocolError, match=r"^src: .*venus/timeout_s"):
        p.CapabilitiesMessage.parse(payload, source="src")
    del tool["_meta"]["venus/timeout"]
    tool["inputSchema"] = {"type": "string"}
    payload = json.dumps({"v": 1, "rev": 1, "capabilities": [tool]}).encode()
    with pytest.raises(p.ProtocolError, match=r"inputSchema\.type"):
        p.CapabilitiesMessage.parse(payload, source="src")


def test_deeply_nested_tool_schemas_are_a_protocol_error() -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}}
    tool = {"name": "deep", "inputSchema": schema}
    payload = json.dumps({"v": 1, "rev": 1, "capabilities": [tool]}).encode()
    with pytest.raises(p.ProtocolError, match="nested too deeply"):
        p.CapabilitiesMessage.parse(payload, source="src")


def test_health_round_trip_and_v_is_reserved() -> None:
    msg = p.HealthMessage({"state": "ok", "in_flight": 2, "custom": [1]})
    assert json.loads(msg.to_json())["v"] == 1
    assert p.HealthMessage.parse(msg.to_json(), source="t") == msg
    with pytest.raises(p.ProtocolError, match='"v"'):
        p.HealthMessage({"v": 2})


def test_call_round_trip_and_request_conversion() -> None:
    msg = call(evidence={"text": "two times seven", "dialogue": [], "audio": None})
    assert p.CallMessage.parse(msg.to_json(), source="t") == msg
    assert json.loads(msg.to_json())["deadline"] == msg.deadline_s
    request = msg.to_request()
    assert request == CallRequest(
        ITEM,
        "calculator",
        {"expression": "2*(3+4)"},
        "s-1",
        "kitchen",
        1_767_225_630.5,
        1,
        {"text": "two times seven", "dialogue": [], "audio": None},
    )
    assert p.CallMessage.from_request(request, REPLY_TO) == msg
    assert (msg.worker_node, msg.daemon_node) == ("w1", "d1")


def test_call_integer_deadline_becomes_float() -> None:
    doc = json.loads(call().to_json())
    doc["deadline"] = 1_767_225_630
    back = p.CallMessage.parse(json.dumps(doc).encode(), source="t")
    assert back.deadline_s == 1_767_225_630.0 and isinstance(back.deadline_s, float)


def test_call_checks() -> None:
    with pytest.raises(p.ProtocolError, match="item id"):
        call(item_id="has space")
    with pytest.raises(p.ProtocolError, match="reply_to"):
        call(reply_to="venus/v1/nodes/w1/status")
    with pytest.raises(p.ProtocolError):
        call(reply_to="elsewhere")
    with pytest.raises(p.ProtocolError, match="capability name"):
        call(capability="No")
    with pytest.raises(p.ProtocolError, match=r"attempt"):
        call(attempt=0).to_json()
    with pytest.raises(p.ProtocolError, match="not JSON"):
        call(arguments={"x": {1, 2}}).to_json()
    with pytest.raises(p.ProtocolError, match="not JSON"):
        call(deadline_s=float("inf")).to_json()


def test_a_call_must_come_on_its_daemons_call_topic() -> None:
    msg = call()
    payload = msg.to_json()
    assert p.parse_message("venus/v1/nodes/d1/call/calculator", payload) == msg
    for topic in ("venus/v1/nodes/d2/call/calculator", "venus/v1/nodes/d1/call/clock"):
        with pytest.raises(p.ProtocolError, match="must come on"):
            p.parse_message(topic, payload)


def test_cancel_round_trip_and_long_reasons_are_cut() -> None:
    msg = p.CancelMessage(ITEM, "the user said never mind")
    assert p.CancelMessage.parse(msg.to_json(), source="t") == msg
    long = p.CancelMessage(ITEM, "x" * 5000)
    assert len(json.loads(long.to_json())["reason"]) == p.MAX_TEXT_CHARS


@pytest.mark.parametrize(
    "event",
    [
        Accepted(ITEM),
        Progress(ITEM, 0.25, "a quarter"),
        Progress(ITEM, None),
        Finished(ITEM, "completed", ToolResult.ok("14", {"value": 14})),
        Finished(ITEM, "failed", ToolResult.failed("timeout", "no answer", retryable=True)),
        Finished(ITEM, "cancelled", ToolResult.failed("cancelled", "never mind")),
    ],
)
def test_reply_round_trips_through_transport_events(event: Accepted | Progress | Finished) -> None:
    msg = p.ReplyMessage.from_event(event)
    back = p.ReplyMessage.parse(msg.to_json(), source=SRC)
    assert back == msg
    assert back.to_event() == event


@pytest.mark.parametrize(
    "fields",
    [
        {"event": "result", "status": "working"},
        {"event": "result", "status": "completed"},  # no result
        {"event": "accepted", "status": "completed"},
        {"event": "progress", "status": "working", "result": ToolResult.ok("x")},
        {"event": "result", "status": "completed", "result": ToolResult.failed("e", "m")},
        {"event": "result", "status": "failed", "result": ToolResult.ok("x")},
        {"event": "progress", "progress": 1.5},
        {"event": "done"},
    ],
)
def test_incoherent_replies_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(p.ProtocolError):
        p.ReplyMessage(ITEM, **fields)


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"event": "result", "status": "working"}, "result"),
        ({"event": "accepted", "status": "working", "result": {"content": []}}, "not allowed"),
        ({"event": "finished", "status": "working"}, "event"),
        (
            {
                "event": "result",
                "status": "failed",
                "result": {"content": [], "isError": True},
            },
            "error",
        ),
        ({"event": "accepted", "status": "working", "extra": 1}, "extra"),
    ],
)
def test_reply_schema_violations_name_the_source(doc: dict[str, Any], match: str) -> None:
    payload = json.dumps({"v": 1, "item_id": ITEM, **doc}).encode()
    with pytest.raises(p.ProtocolError, match=rf"^{SRC}: .*{match}"):
        p.ReplyMessage.parse(payload, source=SRC)


# --- the envelope ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{", "not JSON"),
        (b'{"v": NaN}', "not JSON"),
        (b'{"v": 1, "v": 1}', "twice"),
        (b"[]", "JSON object, not an array"),
        (b'"x"', "JSON object, not a string"),
        (b"{}", 'integer "v"'),
        (b'{"v": "1"}', 'integer "v"'),
        (b'{"v": true}', 'integer "v"'),
        (b'{"v": 2}', "version 2.*upgrade venus"),
        (b'{"v": 0}', '"v" is 0'),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ],
)
def test_bad_envelopes(payload: bytes, match: str) -> None:
    with pytest.raises(p.ProtocolError, match=match):
        p.CancelMessage.parse(payload, source="src")


def test_payload_size_limit_both_ways() -> None:
    big = b'{"v":1,"item_id":"a","reason":"' + b"x" * p.MAX_PAYLOAD_BYTES + b'"}'
    with pytest.raises(p.ProtocolError, match="over the limit"):
        p.CancelMessage.parse(big, source="src")
    with pytest.raises(p.ProtocolError, match="over the limit"):
        call(arguments={"text": "x" * p.MAX_PAYLOAD_BYTES}).to_json()


def test_fit_evidence_references_the_largest_blob_first() -> None:
    def blob(n: int) -> dict[str, Any]:
        data = base64.b64encode(b"\0" * n).decode()
        return {"sha256": "0" * 64, "format": "wav", "bytes": n, "data_b64": data}

    small = call(evidence={"audio": blob(1000), "frame": blob(2000)})
    assert p.fit_evidence(small) == small
    big = call(evidence={"audio": blob(900_000), "frame": blob(100_000)})
    fitted = p.fit_evidence(big)
    assert "data_b64" not in fitted.evidence["audio"]
    assert fitted.evidence["frame"] == big.evidence["frame"]
    assert len(fitted.to_json()) <= p.MAX_PAYLOAD_BYTES
    hopeless = call(arguments={"x": "y" * p.MAX_PAYLOAD_BYTES}, evidence={"audio": blob(10)})
    with pytest.raises(p.ProtocolError, match="over the limit"):
        p.fit_evidence(hopeless)


def test_call_properties() -> None:
    msg = call(deadline_s=1000.0)
    props = p.call_properties(msg, now_s=997.5)
    assert props == {
        "CorrelationData": ITEM.encode(),
        "MessageExpiryInterval": 3,
        "ResponseTopic": REPLY_TO,
        "ContentType": "application/json",
    }
    assert p.call_properties(msg, now_s=5000.0)["MessageExpiryInterval"] == 1
    assert p.call_properties(call(deadline_s=1e11), now_s=0)["MessageExpiryInterval"] == (2**32 - 1)
    reply = p.ReplyMessage(ITEM, "accepted")
    assert p.reply_properties(reply)["CorrelationData"] == ITEM.encode()


def test_parse_message_dispatches_by_topic() -> None:
    assert p.parse_message("venus/v1/nodes/w1/status", b"online") == p.ONLINE
    cancel = p.CancelMessage(ITEM, "r")
    assert p.parse_message("venus/v1/nodes/d1/cancel", cancel.to_json()) == cancel
    with pytest.raises(p.ProtocolError, match="observers"):
        p.parse_message("venus/v1/nodes/d1/events", b"{}")


# --- the schemas and the docs ------------------------------------------------------------
@pytest.mark.parametrize("kind", p.SCHEMA_KINDS)
def test_every_schema_is_valid(kind: str) -> None:
    Draft202012Validator.check_schema(p.schema(kind))


def test_every_shipped_schema_file_is_a_kind() -> None:
    folder = Path(p.__file__).parent / "schemas"
    assert sorted(f.stem for f in folder.glob("*.json")) == sorted(p.SCHEMA_KINDS)


def doc_examples() -> list[tuple[str, str, str]]:
    return EXAMPLE.findall(DOC.read_text())


def test_the_docs_have_an_example_of_every_kind() -> None:
    assert {kind for kind, _, _ in doc_examples()} == set(p.SCHEMA_KINDS)


@pytest.mark.parametrize(("kind", "fence", "text"), doc_examples())
def test_docs_examples_validate_and_parse(kind: str, fence: str, text: str) -> None:
    if kind == "status":
        assert fence == "text"
        Draft202012Validator(p.schema(kind)).validate(text.strip())
        p.StatusMessage.parse(text.strip().encode(), source="docs")
        return
    assert fence == "json"
    Draft202012Validator(p.schema(kind)).validate(json.loads(text))
    p.parse_message(_example_topic(kind), text.encode())


def _example_topic(kind: str) -> str:
    if kind == "call":
        return p.call_topic("kitchen-daemon", "calculator")
    if kind == "reply":
        return p.reply_topic("worker1", "kitchen-daemon")
    return f"venus/v1/nodes/worker1/{kind}"


# --- nothing but ProtocolError -----------------------------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
PARSERS = [
    p.StatusMessage.parse,
    p.CapabilitiesMessage.parse,
    p.HealthMessage.parse,
    p.CallMessage.parse,
    p.CancelMessage.parse,
    p.ReplyMessage.parse,
]
VALID = {
    "capabilities": json.loads(p.CapabilitiesMessage(1, (Contract("clock"),)).to_json()),
    "call": json.loads(call().to_json()),
    "cancel": {"v": 1, "item_id": ITEM, "reason": "r"},
    "reply": json.loads(
        p.ReplyMessage.from_event(Finished(ITEM, "failed", ToolResult.failed("e", "m"))).to_json()
    ),
}


def _only_protocol_errors(payload: bytes) -> None:
    for parse in PARSERS:
        with contextlib.suppress(p.ProtocolError):
            parse(payload, source="fuzz")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_errors(payload: bytes) -> None:
    _only_protocol_errors(payload)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_random_json_raises_only_protocol_errors(doc: Any) -> None:
    _only_protocol_errors(json.dumps(doc).encode())


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(VALID)), st.data())
def test_mutated_messages_raise_only_protocol_errors(kind: str, data: st.DataObject) -> None:
    """Valid messages with one field (possibly nested) replaced by random JSON."""
    doc = json.loads(json.dumps(VALID[kind]))
    target = doc
    while True:
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys:
            break
        key = data.draw(st.sampled_from(keys))
        if isinstance(target[key], dict | list) and data.draw(st.booleans()):
            target = target[key]
            continue
        target[key] = data.draw(JSON)
        break
    _only_protocol_errors(json.dumps(doc).encode())
