"""The harness's logic, single-threaded: capture, dispatch, return, in one object.

``HarnessCore`` is driven by its owner (``service.Harness``, one thread) and by tests,
which call it directly with their own clock. Every state change is a journal ``move``,
committed before it is acted on (a call is dispatched only after ``Running`` is on disk).
What the frontend reads (``ready``) is kept in memory and guarded by ``lock``, the only
thing other threads touch.

Rules, in the order an item meets them:

- **capture**: the evidence snapshot is frozen, the item journalled ``Queued``, routed by
  capability name to the first transport offering it; none -> ``Failed`` (no_provider).
- **dispatch**: ``Running`` (attempt + 1) is committed, then the transport is called and a
  timeout is set from the contract.
- **finish**: the first ``Finished`` of the current attempt wins; later or duplicate ones
  are counted and dropped. A retryable failure (error marked retryable, a timeout, a
  lost provider) of an idempotent capability goes back to ``Queued`` and is re-dispatched
  after an exponential backoff, up to ``max_attempts``. A ``silent`` capability is
  ``Delivered`` as soon as its result is recorded.
- **cancel** (frontend decision, ``venus call`` interrupted): ``Cancelled`` at once
  (also while running: the transport is asked to stop; its late answer is dropped).
- **return**: results of the current session are offered at the next chunk boundary;
  stale ones (older than the contract's freshness, another session's, superseded) are
  ``Expired`` instead. ``Delivering`` when the frontend starts the reply that uses them,
  ``Delivered`` when that reply played to its end, back to ``Completed`` / ``Failed``
  (and offered again) when it was cut.
- **restart**: unfinished items of idempotent capabilities are re-dispatched, and so are
  items that were never dispatched; the others (running when the daemon stopped: they
  may or may not have happened) fail with ``daemon_restarted``; results left from an
  earlier session expire.
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from venus.capabilities.contract import Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import (
    Accepted,
    CallRequest,
    Progress,
    ProviderLost,
    Transport,
    TransportEvent,
)
from venus.daemon.harness.evidence import EvidenceInput, EvidenceStore
from venus.daemon.harness.item import WorkItem, new_item_id
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State

log = logging.getLogger(__name__)

SHORT_ID = 8  # how the frontend sees an item id in <|result|> text
# Items a capability's name may refer to: not yet said (nor cancelled or expired).
NOT_SAID = frozenset({State.QUEUED, State.RUNNING, State.COMPLETED, State.FAILED})


@dataclass(frozen=True)
class HarnessSettings:
    site_id: str = "default"
    max_attempts: int = 3  # dispatches of one idempotent item, retries included; and
    # the same call made in a row by the frontend's retries (HarnessCore.retry)
    backoff_s: float = 0.5  # first retry delay; doubles per attempt
    backoff_max_s: float = 10.0


@dataclass(frozen=True)
class Capture:
    """What the frontend (or ``venus call``) asks for."""

    capability: str
    arguments: Mapping[str, Any]
    session_id: str
    text: str = ""
    dialogue: Sequence[str] = ()
    chunk_index: int = -1
    supersedes: str | None = None  # revise / replace / retry: this item is cancelled
    item_id: str = field(default_factory=new_item_id)
    evidence: EvidenceInput | None = None  # audio and frame, when the frontend has them


@dataclass(frozen=True)
class Offer:
    """A result ready for the frontend."""

    item_id: str
    session_id: str
    text: str  # what goes between <|result|> and <|/result|>
    freshness_deadline: float  # time.time() after which it is stale
    deliver: str


@dataclass
class Stats:
    dispatched: int = 0
    duplicates: int = 0  # final answers for items no longer running (dropped)
    retries: int = 0
    expired: int = 0


class HarnessCore:
    def __init__(
        self,
        journal: Journal,
        evidence: EvidenceStore,
        transports: Sequence[Transport],
        settings: HarnessSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal, self.evidence, self.transports = journal, evidence, list(transports)
        self.settings = settings or HarnessSettings()
        self.clock = clock
        self.stats = Stats()
        self.lock = threading.Lock()  # guards ready / offered (read by the frontend)
        self.ready: dict[str, Offer] = {}
        self.offered: set[str] = set()
        self.replies: dict[str, int] = {}  # item id -> reply id delivering it
        self._timers: list[tuple[float, str, str, int]] = []  # (when, kind, item id, attempt)
        self.session_id: str | None = None  # the frontend's current session

    # --- the registry -----------------------------------------------------------------
    def route(self, capability: str) -> tuple[Contract, Transport] | None:
        for transport in self.transports:
            for contract in transport.contracts():
                if contract.name == capability:
                    return contract, transport
        return None

    # --- capture and dispatch -----------------------------------------------------------
    def capture(self, c: Capture) -> WorkItem:
        now = self.clock()
        routed = self.route(c.capability)
        contract = routed[0] if routed else Contract(name=_safe_name(c.capability))
        ev = c.evidence or EvidenceInput(text=c.text, dialogue=tuple(c.dialogue))
        snapshot = self.evidence.freeze(ev, audio=contract.wants_audio, frame=contract.wants_frame)
        self.journal.add_evidence(snapshot.sha256, snapshot.bytes)
        item = WorkItem(
            id=c.item_id,
            session_id=c.session_id,
            site_id=self.settings.site_id,
            capability=c.capability,
            version=contract.version if routed else "",
            arguments=dict(c.arguments),
            attempt=0,
            deadline_s=now + contract.freshness_s,
            state=State.QUEUED,
            created_at=now,
            updated_at=now,
            evidence=snapshot.sha256,
            supersedes=c.supersedes,
            timeout_s=contract.timeout_s,
            freshness_s=contract.freshness_s,
            idempotent=contract.idempotent,
            deliver=contract.deliver,
            chunk_index=c.chunk_index,
            text=c.text,
        )
        self.journal.add(item)
        if c.supersedes:
            self.cancel(c.supersedes, f"superseded by {item.id}")
        return self.dispatch(item.id)

    def dispatch(self, item_id: str) -> WorkItem:
        item = self.journal.get(item_id)
        if item.state is not State.QUEUED:
            return item
        routed = self.route(item.capability)
        if routed is None:
            known = sorted({c.name for t in self.transports for c in t.contracts()})
            return self._finish(
                item,
                State.FAILED,
                ToolResult.failed(
                    "no_provider",
                    f"no capability {item.capability!r} is available "
                    f"(available: {', '.join(known) or 'none'})",
                ),
            )
        _, transport = routed
        item = self.journal.move(item.id, State.RUNNING, "dispatched", attempt=item.attempt + 1)
        self._timer(self.clock() + item.timeout_s, "timeout", item)
        request = CallRequest(
            item_id=item.id,
            capability=item.capability,
            arguments=item.arguments,
            session_id=item.session_id,
            site_id=item.site_id,
            deadline_s=item.deadline_s,
            attempt=item.attempt,
            evidence=self.evidence.payload(item.evidence) if item.evidence else {},
        )
        self.stats.dispatched += 1
        transport.call(request)
        return item

    # --- what comes back ------------------------------------------------------------------
    def handle(self, event: TransportEvent) -> None:
        if isinstance(event, Accepted | Progress):
            log.debug("%s", event)
            return
        if isinstance(event, ProviderLost):
            for item_id in event.item_ids:
                item = self.journal.find(item_id)
                if item is not None and item.state is State.RUNNING:
                    lost = ToolResult.failed("provider_lost", event.reason, retryable=True)
                    self._failed(item, lost)
            return
        item = self.journal.find(event.item_id)
        if item is None or item.state is not State.RUNNING:
            self.stats.duplicates += 1
            log.info("dropped a late or duplicate answer for item %s", event.item_id)
            return
        if event.status == "completed":
            self._finish(item, State.COMPLETED, event.result)
        elif event.status == "cancelled":
            self._finish(item, State.CANCELLED, event.result)
        else:
            self._failed(item, event.result)

    def _failed(self, item: WorkItem, result: ToolResult) -> None:
        if result.retryable and item.idempotent and item.attempt < self.settings.max_attempts:
            reason = result.error.code if result.error else "retry"
            item = self.journal.move(item.id, State.QUEUED, f"retry after {reason}")
            delay = min(
                self.settings.backoff_max_s, self.settings.backoff_s * 2 ** (item.attempt - 1)
            )
            self.stats.retries += 1
            self._timer(self.clock() + delay, "dispatch", item)
            return
        self._finish(item, State.FAILED, result)

    def _finish(self, item: WorkItem, state: State, result: ToolResult) -> WorkItem:
        reason = result.error.code if result.error else state.value
        item = self.journal.move(item.id, state, reason, result=result)
        if state in (State.COMPLETED, State.FAILED):
            if item.deliver == "silent":
                return self.journal.move(item.id, State.DELIVERED, "silent capability")
            self._make_ready(item, state, result)
        return item

    def _make_ready(self, item: WorkItem, state: State, result: ToolResult) -> None:
        text = json.dumps(
            {
                "item": item.id[:SHORT_ID],
                "capability": item.capability,
                "status": state.value,
                "result": result.text(),
            },
            ensure_ascii=False,
        )
        offer = Offer(item.id, item.session_id, text, self.clock() + item.freshness_s, item.deliver)
        with self.lock:
            self.ready[item.id] = offer
            self.offered.discard(item.id)

    # --- timers ---------------------------------------------------------------------------
    def _timer(self, when: float, kind: str, item: WorkItem) -> None:
        heapq.heappush(self._timers, (when, kind, item.id, item.attempt))

    def next_timer(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def tick(self) -> None:
        """Run the timers that are due, and expire stale offers."""
        now = self.clock()
        while self._timers and self._timers[0][0] <= now:
            _, kind, item_id, attempt = heapq.heappop(self._timers)
            item = self.journal.find(item_id)
            if item is None or item.attempt != attempt:
                continue
            if kind == "timeout" and item.state is State.RUNNING:
                self._timed_out(item)
            elif kind == "dispatch" and item.state is State.QUEUED:
                self.dispatch(item.id)
        with self.lock:
            stale = [o.item_id for o in self.ready.values() if o.freshness_deadline <= now]
        for item_id in stale:
            self.expire(item_id, "stale")

    def _timed_out(self, item: WorkItem) -> None:
        routed = self.route(item.capability)
        if routed is not None:
            routed[1].cancel(item.id, "timeout")
        message = f"{item.capability} did not answer within {item.timeout_s:g} s"
        self._failed(item, ToolResult.failed("timeout", message, retryable=True))

    # --- decisions --------------------------------------------------------------------------
    def resolve(self, ref: str, session_id: str) -> str | None:
        """The item ``ref`` names in this session: a full id, the short one a result
        showed, or a capability's name for its newest item not yet said (the model sees
        an item's id only in its result, so pending work is named by what it does).
        None when there is none, or more than one."""
        item = self.journal.find(ref)
        if item is not None:
            return item.id if item.session_id == session_id else None
        items = self.journal.items(session_id=session_id)
        matches = [i.id for i in items if i.id.startswith(ref.lower())]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            pending = (i for i in items if i.capability == ref and i.state in NOT_SAID)
            return next((i.id for i in pending), None)  # items() is newest first
        return None

    def retry(self, item_id: str, session_id: str, new_id: str) -> WorkItem | None:
        """The frontend's retry: the same call again, as a new item superseding the old.
        Refused (None, a warning) where the old item was superseded already, or where the
        same call has been made ``max_attempts`` times in a row: a model that retries
        whatever fails would otherwise loop on a call that cannot succeed."""
        old = self.journal.find(item_id)
        if old is None:
            return None
        session = self.journal.items(session_id=session_id)
        after = next((i.id for i in session if i.supersedes == old.id), None)
        if after is not None:
            log.warning("retry of %s refused: %s superseded it already", old.id, after)
            return None
        made = self._made_in_a_row(old)
        if made >= self.settings.max_attempts:
            log.warning(
                "retry of %s refused: the same %s call was made %d times in a row",
                old.id,
                old.capability,
                made,
            )
            return None
        capture = Capture(
            old.capability,
            old.arguments,
            session_id,
            text=old.text,
            supersedes=old.id,
            item_id=new_id,
        )
        return self.capture(capture)

    def _made_in_a_row(self, item: WorkItem) -> int:
        """How many items, ``item`` and those it superseded, made the same call in a row."""
        made, at = 1, item
        while at.supersedes is not None:
            before = self.journal.find(at.supersedes)
            if before is None or (before.capability, before.arguments) != (
                at.capability,
                at.arguments,
            ):
                break
            made, at = made + 1, before
        return made

    def cancel(self, item_id: str, reason: str) -> WorkItem | None:
        item = self.journal.find(item_id)
        if item is None or item.state in (State.DELIVERED, State.CANCELLED, State.EXPIRED):
            return item
        self._unready(item_id)
        if item.state in (State.QUEUED, State.RUNNING):
            if item.state is State.RUNNING:
                routed = self.route(item.capability)
                if routed is not None:
                    routed[1].cancel(item.id, reason)
            return self.journal.move(
                item.id, State.CANCELLED, reason, result=ToolResult.failed("cancelled", reason)
            )
        return self.journal.move(item.id, State.CANCELLED, reason)  # a result revoked

    def expire(self, item_id: str, reason: str) -> None:
        item = self.journal.find(item_id)
        self._unready(item_id)
        if item is None or item.state in (State.DELIVERED, State.CANCELLED, State.EXPIRED):
            return
        result = None
        if item.state in (State.QUEUED, State.RUNNING):
            result = ToolResult.failed("expired", reason)
        self.journal.move(item.id, State.EXPIRED, reason, result=result)
        self.stats.expired += 1

    def _unready(self, item_id: str) -> None:
        with self.lock:
            self.ready.pop(item_id, None)
            self.offered.discard(item_id)
        self.replies.pop(item_id, None)

    # --- the frontend's side --------------------------------------------------------------
    def offers(self, session_id: str, idle: bool) -> tuple[list[Offer], list[str]]:
        """(offers to inject now, item ids to expire). Memory only: any thread."""
        now = self.clock()
        out: list[Offer] = []
        stale: list[str] = []
        with self.lock:
            for offer in self.ready.values():
                if offer.item_id in self.offered:
                    continue
                if offer.session_id != session_id or offer.freshness_deadline <= now:
                    stale.append(offer.item_id)
                elif idle or offer.deliver == "interrupt":
                    out.append(offer)
                    self.offered.add(offer.item_id)
        return out, stale

    def replying(self, reply_id: int, item_ids: Sequence[str]) -> None:
        """The frontend started reply ``reply_id`` answering these items: Delivering."""
        for item_id in item_ids:
            item = self.journal.find(item_id)
            if item is None or item.state not in (State.COMPLETED, State.FAILED):
                continue
            self.journal.move(
                item.id, State.DELIVERING, f"reply {reply_id}", delivering_from=item.state
            )
            self.replies[item.id] = reply_id

    def played(self, reply_id: int, item_ids: Sequence[str]) -> None:
        """Reply ``reply_id`` was heard to its end: its items are Delivered."""
        for item_id in item_ids:
            item = self.journal.find(item_id)
            if item is not None and item.state is State.DELIVERING:
                self.journal.move(item.id, State.DELIVERED, f"reply {reply_id} played")
                self._unready(item.id)

    def cut(self, reply_id: int, item_ids: Sequence[str]) -> None:
        """Reply ``reply_id`` was cut before it was heard: back to be offered again."""
        for item_id in item_ids:
            item = self.journal.find(item_id)
            if item is None or item.state is not State.DELIVERING:
                continue
            back = item.delivering_from or State.COMPLETED
            self.journal.move(item.id, back, f"reply {reply_id} cut")
            with self.lock:
                self.offered.discard(item.id)
            self.replies.pop(item.id, None)

    # --- restart ------------------------------------------------------------------------------
    def resume(self) -> None:
        """After a start: finish what a previous run left (see the module docstring)."""
        for item in self.journal.unfinished():
            routed = self.route(item.capability)
            idempotent = routed[0].idempotent if routed else item.idempotent
            never_ran = item.state is State.QUEUED and item.attempt == 0
            if idempotent or never_ran:
                if item.state is State.RUNNING:
                    self.journal.move(item.id, State.QUEUED, "daemon restarted: re-dispatch")
                self.dispatch(item.id)
            else:
                message = "the daemon restarted while this ran; it may or may not have happened"
                self._finish(item, State.FAILED, ToolResult.failed("daemon_restarted", message))
        for done in self.journal.items(states=(State.COMPLETED, State.FAILED, State.DELIVERING)):
            if done.session_id != self.session_id:
                self.expire(done.id, "session ended (daemon restarted)")
                continue
            if done.state is State.DELIVERING:  # its reply died with the old process
                back = done.delivering_from or State.COMPLETED
                done = self.journal.move(done.id, back, "daemon restarted mid-reply")  # noqa: PLW2901
            final = self.journal.result(done.id)
            if final is not None and done.deliver != "silent":
                self._make_ready(done, done.state, final[1])


def _safe_name(name: str) -> str:
    """A stand-in contract name for a capability nobody offers (it fails no_provider)."""
    cleaned = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name.lower())[:64]
    return cleaned or "unknown"
