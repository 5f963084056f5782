"""The frontend's side of the harness: delegations out, fresh results in, playback events.

The harness (work items, journal, dispatch; a later part of the daemon) implements
``HarnessChannel``. Until it is plugged in the loop runs with ``NoHarness``: delegations
are recorded in the timeline and go nowhere, and no result ever arrives. Both
frontends (omni and audio) use this one interface.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from venus.capabilities.contract import Contract
from venus.daemon.frontend.playback import PlaybackEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Delegation:
    """A well-formed ``<|delegate|>`` span: an MCP-style tool call the model asked for.

    ``audio`` and ``frame`` are the frontend's current ones (never modified later); the
    harness keeps them only when the capability's contract asks for them."""

    session_id: str
    chunk_index: int  # the chunk whose text held the span
    name: str  # capability (tool) name
    arguments: dict[str, Any]
    raw: str  # the span's text as decoded
    dialogue: tuple[str, ...] = ()  # recent dialogue text (most recent last), for evidence
    action: str = "call"  # "call", or a decision on an earlier item: "cancel", "retry"
    target: str | None = None  # that item's id (or its short form); for a call: supersedes
    audio: NDArray[np.float32] | None = None  # the last seconds of microphone audio, 16 kHz
    frame: NDArray[np.uint8] | None = None  # the latest camera frame, RGB [h, w, 3]


@dataclass(frozen=True)
class InjectedResult:
    """A result the harness hands the frontend at a chunk boundary."""

    item_id: str
    text: str  # what goes between <|result|> and <|/result|> (JSON or prose)


class HarnessChannel(Protocol):
    def contracts(self) -> Sequence[Contract]:
        """The capabilities a delegation may call now (a span's grammar is made of them)."""

    def delegate(self, delegation: Delegation) -> None:
        """Capture a delegation (returns at once; the work runs in the background)."""

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        """Results to inject at this chunk boundary (fresh ones only; may be empty).

        ``idle``: neither the user nor the assistant is speaking; results whose contract
        says ``when_idle`` wait for such a chunk, ``interrupt`` ones do not."""

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        """The frontend started reply ``reply_id``, answering these results."""

    def playback(self, event: PlaybackEvent) -> None:
        """What was played or cut: the harness acknowledges delivery from these."""


class NoHarness:
    """No background loop: delegations are only logged, no result arrives."""

    def contracts(self) -> Sequence[Contract]:
        return ()

    def delegate(self, delegation: Delegation) -> None:
        log.info(
            "delegation %s from chunk %d: no harness is running",
            delegation.name,
            delegation.chunk_index,
        )

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        return []

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        return None

    def playback(self, event: PlaybackEvent) -> None:
        return None
