"""How the harness reaches capabilities: the ``Transport`` protocol and its messages.

The harness hands a ``CallRequest`` to a transport and hears back, through the
``on_event`` callback given at ``start``, ``Accepted``, any ``Progress``, and one
``Finished`` per item (``completed`` / ``failed`` / ``cancelled``, with the normalized
result). ``ProviderLost`` says a provider disappeared with calls in flight (a worker's
last will): those calls will never finish on their own. Transports: ``InProcessTransport``
(capabilities living in the daemon's process) and the MQTT transport. ``on_event`` may be
called from any thread and must return quickly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from venus.capabilities.contract import Contract
from venus.capabilities.result import ToolResult

FinalStatus = Literal["completed", "failed", "cancelled"]


@dataclass(frozen=True)
class CallRequest:
    item_id: str
    capability: str
    arguments: Mapping[str, Any]
    session_id: str
    site_id: str
    deadline_s: float  # time.time() after which the result is useless
    attempt: int  # 1 for the first dispatch
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Accepted:
    item_id: str


@dataclass(frozen=True)
class Progress:
    item_id: str
    progress: float | None  # 0..1 when known
    message: str = ""


@dataclass(frozen=True)
class Finished:
    item_id: str
    status: FinalStatus
    result: ToolResult


@dataclass(frozen=True)
class ProviderLost:
    item_ids: tuple[str, ...]  # calls in flight on the provider that went away
    reason: str


TransportEvent = Accepted | Progress | Finished | ProviderLost
EventSink = Callable[[TransportEvent], None]


class Transport(Protocol):
    name: str

    def start(self, on_event: EventSink) -> None: ...

    def stop(self) -> None: ...

    def contracts(self) -> Sequence[Contract]:
        """The capabilities reachable now."""
        ...

    def call(self, request: CallRequest) -> None:
        """Dispatch (returns at once; the answer comes as events)."""
        ...

    def cancel(self, item_id: str, reason: str) -> None:
        """Ask for a call to stop; idempotent; it still ends with one ``Finished``."""
        ...
