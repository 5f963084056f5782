"""The MQTT wire protocol, as pure code: typed messages and MQTT 5 properties
(docs/protocol.md); topics are in ``topics``, payload checks in ``codec``.

Every node writes only under ``venus/v1/nodes/<node>/``. A daemon writes
``call/<capability>`` and ``cancel`` under its own node; a worker reads them, handles the
calls whose ``reply_to`` names it, and answers on ``reply/<daemon>`` under its own node.
Messages are frozen dataclasses; ``to_json`` gives the payload, ``parse`` checks one
against its JSON Schema and raises ``ProtocolError`` naming the topic and what is wrong,
never another exception. The network is the transport's job.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, get_args

from venus.capabilities.codec import MAX_PAYLOAD_BYTES, SCHEMA_KINDS, decode, encode, schema
from venus.capabilities.contract import NAME, Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.topics import (
    ITEM_ID,
    NODE_ID,
    ROOT,
    VERSION,
    ProtocolError,
    Topic,
    TopicKind,
    call_topic,
    cancel_topic,
    capabilities_topic,
    events_topic,
    health_topic,
    parse_topic,
    reply_topic,
    status_topic,
    topic_filter,
)
from venus.capabilities.transport import Accepted, CallRequest, FinalStatus, Finished, Progress
from venus.errors import CapabilityError

__all__ = [
    "ITEM_ID",
    "MAX_PAYLOAD_BYTES",
    "MAX_TEXT_CHARS",
    "NODE_ID",
    "OFFLINE",
    "ONLINE",
    "ROOT",
    "SCHEMA_KINDS",
    "VERSION",
    "CallMessage",
    "CallProperties",
    "CancelMessage",
    "CapabilitiesMessage",
    "HealthMessage",
    "Message",
    "ProtocolError",
    "ReplyMessage",
    "StatusMessage",
    "Topic",
    "TopicKind",
    "call_properties",
    "call_topic",
    "cancel_topic",
    "capabilities_topic",
    "event_payload",
    "events_topic",
    "fit_evidence",
    "health_topic",
    "parse_message",
    "parse_topic",
    "reply_properties",
    "reply_topic",
    "schema",
    "status_topic",
    "topic_filter",
]

MAX_EXPIRY_S = 2**32 - 1  # MQTT 5 message expiry interval is a four-byte integer
MAX_TEXT_CHARS = 1000  # a reply's message, a cancel's reason (longer ones are cut)
ReplyEvent = Literal["accepted", "progress", "result"]
ReplyStatus = Literal["working", "completed", "failed", "cancelled"]


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
        return encode("capabilities", {"v": VERSION, "rev": self.rev, "capabilities": tools})

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> CapabilitiesMessage:
        doc = decode("capabilities", payload, source)
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
        return encode("health", {"v": VERSION, **self.fields})

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> HealthMessage:
        doc = decode("health", payload, source)
        return cls({k: v for k, v in doc.items() if k != "v"})


def event_payload(fields: Mapping[str, Any]) -> bytes:
    """An ``events`` payload: ``{"v": 1, "at": <Unix time>, **fields}``. Events are for
    observers (dashboards, loggers); no node acts on them, so they have no schema."""
    if "v" in fields:
        raise ProtocolError('event fields may not set "v": the protocol version is added')
    doc = {"v": VERSION, "at": round(time.time(), 3), **fields}
    try:
        payload = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"outgoing event: not JSON: {e}") from e
    data = payload.encode()
    if len(data) > MAX_PAYLOAD_BYTES:
        raise ProtocolError(f"outgoing event: {len(data)} bytes, over {MAX_PAYLOAD_BYTES}")
    return data


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
        return encode("call", self.to_doc())

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> CallMessage:
        d = decode("call", payload, source)
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
        return encode("cancel", {"v": VERSION, "item_id": self.item_id, "reason": reason})

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> CancelMessage:
        d = decode("cancel", payload, source)
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
        return encode("reply", doc)

    @classmethod
    def parse(cls, payload: bytes, *, source: str) -> ReplyMessage:
        d = decode("reply", payload, source)
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
