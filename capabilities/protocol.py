"""The MQTT wire protocol, as pure code: topics, typed messages, limits (docs/protocol.md).

Every node writes only under ``venus/v1/nodes/<node>/``. A daemon writes
``call/<capability>`` and ``cancel`` under its own node; a worker reads them, handles the
calls whose ``reply_to`` names it, and answers on ``reply/<daemon>`` under its own node.
Messages are frozen dataclasses; ``to_json`` gives the payload, ``parse`` checks one
against its JSON Schema (``schemas/*.json``) and raises ``ProtocolError`` naming the
topic and what is wrong, never another exception. The network is the transport's job.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, TypedDict, get_args

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from venus.capabilities.contract import NAME, Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Accepted, CallRequest, FinalStatus, Finished, Progress
from venus.errors import CapabilityError

VERSION = 1  # the "v" of every JSON payload, and the v1 in the topics
ROOT = "venus/v1/nodes"
NODE_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # as daemon config's node_id; fullmatch
ITEM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # fullmatch
MAX_EXPIRY_S = 2**32 - 1  # MQTT 5 message expiry interval is a four-byte integer
# 1 MiB: a call with the default evidence inlined fits (10 s of 16 kHz 16-bit WAV is
# 320 KB, 427 KB as base64, plus a JPEG of at most 448 px a side); see fit_evidence.
MAX_PAYLOAD_BYTES = 1 << 20
MAX_TEXT_CHARS = 1000  # a reply's message, a cancel's reason (longer ones are cut)
MAX_SCHEMA_ERRORS = 3  # violations quoted in one ProtocolError
MAX_QUOTE_CHARS = 200  # of one violation's text (they quote the offending value)
SCHEMA_KINDS = ("status", "capabilities", "health", "call", "cancel", "reply")

TopicKind = Literal["status", "capabilities", "health", "events", "call", "cancel", "reply"]
ReplyEvent = Literal["accepted", "progress", "result"]
ReplyStatus = Literal["working", "completed", "failed", "cancelled"]
_PLAIN = ("status", "capabilities", "health", "events", "cancel")  # no argument level


class ProtocolError(CapabilityError):
    """A topic or payload that breaks the protocol; the message names where and what."""


# --- topics ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Topic:
    node: str  # the node that writes it
    kind: TopicKind
    arg: str | None = None  # the capability of a call, the daemon a reply goes to

    def __str__(self) -> str:
        base = f"{ROOT}/{self.node}/{self.kind}"
        return base if self.arg is None else f"{base}/{self.arg}"


def _node(node: str, what: str = "node id") -> str:
    if not isinstance(node, str) or not NODE_ID.fullmatch(node):
        raise ProtocolError(
            f"{node!r} is not a {what}: use 1-64 of a-z, 0-9, '_' and '-', starting with a "
            "letter or digit"
        )
    return node


def status_topic(node: str) -> str:
    return f"{ROOT}/{_node(node)}/status"


def capabilities_topic(node: str) -> str:
    return f"{ROOT}/{_node(node)}/capabilities"


def health_topic(node: str) -> str:
    return f"{ROOT}/{_node(node)}/health"


def events_topic(node: str) -> str:
    return f"{ROOT}/{_node(node)}/events"


def call_topic(node: str, capability: str) -> str:
    """Where daemon ``node`` publishes calls of ``capability``."""
    if not isinstance(capability, str) or not NAME.fullmatch(capability):
        raise ProtocolError(f"capability name {capability!r} must match [a-z0-9_]{{1,64}}")
    return f"{ROOT}/{_node(node)}/call/{capability}"


def cancel_topic(node: str) -> str:
    """Where daemon ``node`` publishes cancels."""
    return f"{ROOT}/{_node(node)}/cancel"


def reply_topic(worker_node: str, daemon_node: str) -> str:
    """Where ``worker_node`` answers ``daemon_node`` (the call's ``reply_to``)."""
    return f"{ROOT}/{_node(worker_node)}/reply/{_node(daemon_node)}"


def topic_filter(kind: TopicKind, arg: str = "+") -> str:
    """The subscription for ``kind`` from every node: ``venus/v1/nodes/+/call/<arg>``."""
    return f"{ROOT}/+/{kind}" if kind in _PLAIN else f"{ROOT}/+/{kind}/{arg}"


def parse_topic(topic: str) -> Topic:
    parts = topic.split("/") if isinstance(topic, str) else []
    if len(parts) >= 3 and parts[0] == "venus" and parts[1] != "v1" and parts[2] == "nodes":
        raise ProtocolError(
            f"{topic!r}: protocol {parts[1]}; this venus speaks v1: upgrade it to talk to that node"
        )
    if len(parts) < 5 or "/".join(parts[:3]) != ROOT:
        raise ProtocolError(f"{topic!r} is not a venus topic ({ROOT}/<node>/<kind>...)")
    node, kind, rest = parts[3], parts[4], parts[5:]
    _node(node)
    if kind in _PLAIN and not rest:
        return Topic(node, kind)  # type: ignore[arg-type]  # kind is in _PLAIN
    if kind == "call" and len(rest) == 1 and NAME.fullmatch(rest[0]):
        return Topic(node, "call", rest[0])
    if kind == "reply" and len(rest) == 1 and NODE_ID.fullmatch(rest[0]):
        return Topic(node, "reply", rest[0])
    raise ProtocolError(
        f"{topic!r} is not a venus topic: after the node comes status, capabilities, health, "
        "events, cancel, call/<capability> or reply/<daemon node>"
    )


# --- payloads: JSON, size, version, schema -----------------------------------------------
@functools.cache
def _schema_text(kind: str) -> str:
    if kind not in SCHEMA_KINDS:
        raise ProtocolError(f"no schema {kind!r}; there are {', '.join(SCHEMA_KINDS)}")
    return resources.files("venus.capabilities").joinpath(f"schemas/{kind}.json").read_text()


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one message kind, a fresh copy."""
    loaded: dict[str, Any] = json.loads(_schema_text(kind))
    return loaded


@functools.cache
def _validator(kind: str) -> Any:
    return Draft202012Validator(schema(kind))


def _check(kind: str, doc: object, source: str) -> None:
    try:
        errors = list(itertools.islice(_validator(kind).iter_errors(doc), MAX_SCHEMA_ERRORS + 1))
    except RecursionError as e:
        raise ProtocolError(f"{source}: the {kind} payload is nested too deeply") from e
    if errors:
        quoted = "; ".join(_violation(e) for e in errors[:MAX_SCHEMA_ERRORS])
        more = " (and more)" if len(errors) > MAX_SCHEMA_ERRORS else ""
        raise ProtocolError(
            f"{source}: the {kind} payload breaks the protocol: {quoted}{more} "
            "(see docs/protocol.md)"
        )


def _violation(error: Any) -> str:
    if error.validator == "not" and error.validator_value == {}:  # {"not": {}}: a banned key
        return f"{error.json_path}: not allowed here"
    return f"{error.json_path}: {_cut(error.message)}"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_QUOTE_CHARS else text[: MAX_QUOTE_CHARS - 3] + "..."


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise ValueError("an object has a key twice")
    return doc


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)


def _decode(kind: str, payload: bytes, source: str) -> dict[str, Any]:
    """The checked JSON object of a payload; ProtocolError names ``source`` and the fault."""
    if not isinstance(payload, bytes | bytearray):
        raise ProtocolError(f"{source}: a payload is bytes, got {type(payload).__name__}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ProtocolError(
            f"{source}: the {kind} payload has {len(payload)} bytes, over the limit of "
            f"{MAX_PAYLOAD_BYTES}; send large evidence by sha256 reference, not inline"
        )
    try:
        doc = _loads(bytes(payload).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ProtocolError(f"{source}: the {kind} payload is not UTF-8 (byte {e.start})") from e
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"{source}: the {kind} payload is not JSON: {_cut(str(e))}") from e
    if not isinstance(doc, dict):
        raise ProtocolError(f"{source}: a {kind} payload is a JSON object, not {_json_type(doc)}")
    v = doc.get("v")
    if type(v) is not int:
        raise ProtocolError(f'{source}: the {kind} payload has no integer "v" (protocol version)')
    if v > VERSION:
        raise ProtocolError(
            f"{source}: the sender speaks protocol version {v}, this venus speaks {VERSION}: "
            "upgrade venus on this node"
        )
    if v != VERSION:
        raise ProtocolError(f'{source}: "v" is {v}; protocol versions start at 1')
    _check(kind, doc, source)
    return doc


def _encode(kind: str, doc: Mapping[str, Any]) -> bytes:
    """The payload of ``doc``, checked as a receiver will check it."""
    source = f"outgoing {kind}"
    try:
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        payload = text.encode("utf-8")
        _check(kind, _loads(text), source)
    except (TypeError, ValueError, RecursionError) as e:  # UnicodeEncodeError is a ValueError
        raise ProtocolError(f"{source}: not JSON: {_cut(str(e))}") from e
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ProtocolError(
            f"{source}: {len(payload)} bytes, over the limit of {MAX_PAYLOAD_BYTES}; "
            "reference large evidence by sha256 (fit_evidence) and keep arguments small"
        )
    return payload


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# --- messages ----------------------------------------------------------------------------
def _item_id(item_id: object) -> None:
    if not isinstance(item_id, str) or not ITEM_ID.fullmatch(item_id):
        raise ProtocolError(f"item id {item_id!r} must be 1-128 of A-Z a-z 0-9 . _ : -")


@dataclass(frozen=True)
class StatusMessage:
    """Retained ``online`` / ``offline``, plain UTF-8 text (not JSON); also the last will."""

    state: Literal["online", "offline"]

    def to_json(self) -> bytes:
        return self.state.encode()

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> StatusMessage:
        if not payload:
            raise ProtocolError(f"{source}: empty status (a cleared retained message)")
        if payload in {b"online", b"offline"}:
            return cls(payload.decode())  # type: ignore[arg-type]  # one of the two
        shown = payload[:40].decode("utf-8", "replace")
        raise ProtocolError(f"{source}: status {shown!r} is neither online nor offline")


ONLINE, OFFLINE = StatusMessage("online"), StatusMessage("offline")


@dataclass(frozen=True)
class CapabilitiesMessage:
    rev: int  # changes whenever the list does; compared for equality only
    capabilities: tuple[Contract, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.capabilities]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ProtocolError(f"capabilities offered twice: {', '.join(twice)}")

    def to_json(self) -> bytes:
        tools = [c.to_tool() for c in self.capabilities]
        return _encode("capabilities", {"v": VERSION, "rev": self.rev, "capabilities": tools})

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> CapabilitiesMessage:
        doc = _decode("capabilities", payload, source)
        try:
            tools = tuple(
                Contract.from_tool(t, f"capabilities[{i}]")
                for i, t in enumerate(doc["capabilities"])
            )
            return cls(doc["rev"], tools)
        except CapabilityError as e:
            raise ProtocolError(f"{source}: {e}") from e
        except RecursionError as e:  # checking a deeply nested inputSchema
            raise ProtocolError(f"{source}: a tool's schema is nested too deeply") from e


@dataclass(frozen=True)
class HealthMessage:
    """Retained snapshot; ``fields`` is free-form JSON (``at``, ``state``, ... suggested)."""

    fields: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "v" in self.fields:
            raise ProtocolError('health fields may not set "v": the protocol version is added')

    def to_json(self) -> bytes:
        return _encode("health", {"v": VERSION, **self.fields})

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> HealthMessage:
        doc = _decode("health", payload, source)
        return cls({k: v for k, v in doc.items() if k != "v"})


@dataclass(frozen=True)
class CallMessage:
    item_id: str
    capability: str
    arguments: Mapping[str, Any]
    session_id: str
    site_id: str
    deadline_s: float  # Unix time after which the result is useless ("deadline" on the wire)
    attempt: int  # 1 for the first dispatch
    evidence: Mapping[str, Any]
    reply_to: str  # venus/v1/nodes/<worker>/reply/<daemon>

    def __post_init__(self) -> None:
        _item_id(self.item_id)
        if not isinstance(self.capability, str) or not NAME.fullmatch(self.capability):
            raise ProtocolError(f"capability name {self.capability!r} must match [a-z0-9_]{{1,64}}")
        target = parse_topic(self.reply_to)
        if target.kind != "reply":
            raise ProtocolError(f"reply_to {self.reply_to!r} is not a reply topic")

    @property
    def worker_node(self) -> str:
        """The worker the call is addressed to; every other worker ignores it."""
        return parse_topic(self.reply_to).node

    @property
    def daemon_node(self) -> str:
        return str(parse_topic(self.reply_to).arg)

    def check_topic(self, topic: str) -> None:
        """A worker's check that the call came on ``call/<capability>`` of its daemon."""
        t = parse_topic(topic)
        if t != Topic(self.daemon_node, "call", self.capability):
            raise ProtocolError(
                f"{topic}: a call of {self.capability} replying to {self.daemon_node} must come "
                f"on {call_topic(self.daemon_node, self.capability)}"
            )

    def to_doc(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "item_id": self.item_id,
            "capability": self.capability,
            "arguments": dict(self.arguments),
            "session_id": self.session_id,
            "site_id": self.site_id,
            "deadline": self.deadline_s,
            "attempt": self.attempt,
            "evidence": dict(self.evidence),
            "reply_to": self.reply_to,
        }

    def to_json(self) -> bytes:
        return _encode("call", self.to_doc())

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> CallMessage:
        d = _decode("call", payload, source)
        try:
            return cls(
                d["item_id"],
                d["capability"],
                d["arguments"],
                d["session_id"],
                d["site_id"],
                float(d["deadline"]),
                d["attempt"],
                d["evidence"],
                d["reply_to"],
            )
        except ProtocolError as e:
            raise ProtocolError(f"{source}: {e}") from e

    @classmethod
    def from_request(cls, request: CallRequest, reply_to: str) -> CallMessage:
        return cls(
            request.item_id,
            request.capability,
            request.arguments,
            request.session_id,
            request.site_id,
            request.deadline_s,
            request.attempt,
            request.evidence,
            reply_to,
        )

    def to_request(self) -> CallRequest:
        return CallRequest(
            self.item_id,
            self.capability,
            self.arguments,
            self.session_id,
            self.site_id,
            self.deadline_s,
            self.attempt,
            self.evidence,
        )


@dataclass(frozen=True)
class CancelMessage:
    item_id: str
    reason: str

    def __post_init__(self) -> None:
        _item_id(self.item_id)

    def to_json(self) -> bytes:
        reason = self.reason[:MAX_TEXT_CHARS]
        return _encode("cancel", {"v": VERSION, "item_id": self.item_id, "reason": reason})

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> CancelMessage:
        d = _decode("cancel", payload, source)
        return cls(d["item_id"], d["reason"])


@dataclass(frozen=True)
class ReplyMessage:
    item_id: str
    event: ReplyEvent
    status: ReplyStatus = "working"
    progress: float | None = None  # 0..1 when known (progress events)
    message: str = ""
    result: ToolResult | None = None  # exactly on a "result" event

    def __post_init__(self) -> None:
        _item_id(self.item_id)
        if self.event not in get_args(ReplyEvent):
            raise ProtocolError(f"reply event {self.event!r} is not accepted, progress or result")
        final = self.status in get_args(FinalStatus)
        if self.event == "result" and (not final or self.result is None):
            raise ProtocolError(
                "a result reply has status completed, failed or cancelled, and a result"
            )
        if self.event != "result" and (self.status != "working" or self.result is not None):
            raise ProtocolError(f"an {self.event} reply has status working and no result")
        if self.result is not None and (self.status != "completed") != self.result.is_error:
            raise ProtocolError(f"a {self.status} reply's result has isError wrong")
        p = self.progress
        if p is not None and not (isinstance(p, int | float) and 0.0 <= p <= 1.0):
            raise ProtocolError(f"progress {p!r} is outside 0..1")

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "v": VERSION,
            "item_id": self.item_id,
            "event": self.event,
            "status": self.status,
        }
        if self.event == "progress":
            doc["progress"] = self.progress
        if self.message:
            doc["message"] = self.message[:MAX_TEXT_CHARS]
        if self.result is not None:
            doc["result"] = self.result.to_json()
        return _encode("reply", doc)

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> ReplyMessage:
        d = _decode("reply", payload, source)
        try:
            result = None
            if "result" in d:
                result = ToolResult.from_json(d["result"], "result")
            p = d.get("progress")
            return cls(
                d["item_id"],
                d["event"],
                d["status"],
                None if p is None else float(p),
                d.get("message", ""),
                result,
            )
        except CapabilityError as e:
            raise ProtocolError(f"{source}: {e}") from e

    @classmethod
    def from_event(cls, event: Accepted | Progress | Finished) -> ReplyMessage:
        if isinstance(event, Accepted):
            return cls(event.item_id, "accepted")
        if isinstance(event, Progress):
            return cls(event.item_id, "progress", progress=event.progress, message=event.message)
        return cls(event.item_id, "result", event.status, result=event.result)

    def to_event(self) -> Accepted | Progress | Finished:
        if self.event == "accepted":
            return Accepted(self.item_id)
        if self.event == "progress":
            return Progress(self.item_id, self.progress, self.message)
        assert self.result is not None and self.status != "working"  # by __post_init__
        return Finished(self.item_id, self.status, self.result)


Message = (
    StatusMessage | CapabilitiesMessage | HealthMessage | CallMessage | CancelMessage | ReplyMessage
)
_BY_KIND: dict[str, Any] = {
    "status": StatusMessage,
    "capabilities": CapabilitiesMessage,
    "health": HealthMessage,
    "call": CallMessage,
    "cancel": CancelMessage,
    "reply": ReplyMessage,
}


def parse_message(topic: str, payload: bytes) -> Message:
    """The message on ``topic`` (events are for observers and are not parsed here)."""
    kind = parse_topic(topic).kind
    if kind not in _BY_KIND:
        raise ProtocolError(f"{topic}: {kind} payloads are for observers, not parsed")
    message: Message = _BY_KIND[kind].parse(payload, source=topic)
    if isinstance(message, CallMessage):
        message.check_topic(topic)
    return message


# --- MQTT 5 properties and sizes ---------------------------------------------------------
class CallProperties(TypedDict):
    """MQTT 5 properties of a call, named as paho's ``Properties`` attributes."""

    CorrelationData: bytes
    MessageExpiryInterval: int
    ResponseTopic: str
    ContentType: str


def call_properties(message: CallMessage, now_s: float | None = None) -> CallProperties:
    """Correlation data (the item id) and expiry (whole seconds to the deadline, >= 1)."""
    now = time.time() if now_s is None else now_s
    left_s = math.ceil(message.deadline_s - now)
    return {
        "CorrelationData": message.item_id.encode(),
        "MessageExpiryInterval": min(MAX_EXPIRY_S, max(1, left_s)),
        "ResponseTopic": message.reply_to,
        "ContentType": "application/json",
    }


def reply_properties(message: ReplyMessage) -> dict[str, Any]:
    """MQTT 5 properties of a reply: the item id as correlation data."""
    return {"CorrelationData": message.item_id.encode(), "ContentType": "application/json"}


def fit_evidence(message: CallMessage) -> CallMessage:
    """The call with inlined evidence blobs turned into references (``data_b64`` dropped,
    largest first) until it fits ``MAX_PAYLOAD_BYTES``; ProtocolError if it cannot."""
    evidence = dict(message.evidence)
    inlined = [k for k in ("audio", "frame") if isinstance(evidence.get(k), Mapping)]
    inlined.sort(key=lambda k: len(str(evidence[k].get("data_b64", ""))), reverse=True)
    fitted = message
    for key in inlined:
        if _wire_bytes(fitted.to_doc()) <= MAX_PAYLOAD_BYTES:
            break
        evidence[key] = {k: v for k, v in evidence[key].items() if k != "data_b64"}
        fitted = dataclasses.replace(message, evidence=dict(evidence))
    fitted.to_json()  # the full check: raises when even the references do not fit
    return fitted


def _wire_bytes(doc: Mapping[str, Any]) -> int:
    try:
        return len(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return 0  # not JSON: to_json says so
