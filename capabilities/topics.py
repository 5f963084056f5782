"""Topic names of the MQTT protocol and the error every protocol check raises
(docs/protocol.md). Every node writes only under ``venus/v1/nodes/<node>/``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from venus.capabilities.contract import NAME
from venus.errors import CapabilityError

VERSION = 1  # the "v" of every JSON payload, and the v1 in the topics
ROOT = "venus/v1/nodes"
NODE_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # as daemon config's node_id; fullmatch
ITEM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # fullmatch

TopicKind = Literal["status", "capabilities", "health", "events", "call", "cancel", "reply"]
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
