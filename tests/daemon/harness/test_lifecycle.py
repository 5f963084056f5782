"""Random interleavings of everything that can happen to work items (hypothesis).

The harness core runs on a real journal (SQLite) and evidence store, with a transport
the test drives: it records calls and answers when the test says so, as a worker that
accepts, reports progress, answers (or answers twice, or late), fails, is lost, or is
cancelled would. The clock is the test's. After every step the journal is consistent;
at the end every item has exactly one final result and one terminal state.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from venus.capabilities.contract import Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import (
    Accepted,
    CallRequest,
    EventSink,
    Finished,
    Progress,
    ProviderLost,
)
from venus.daemon.harness.core import Capture, HarnessCore, HarnessSettings
from venus.daemon.harness.evidence import EvidenceStore
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import TERMINAL, State

CONTRACTS = (
    Contract(name="idem", timeout_s=5, freshness_s=60, idempotent=True),
    Contract(name="once", timeout_s=5, freshness_s=60),
    Contract(name="quiet", timeout_s=5, freshness_s=60, deliver="silent"),
)


class Worker:
    """A transport whose answers the test chooses."""

    name = "scripted"

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}  # item id -> attempt
        self.ever: set[str] = set()
        self.cancels: list[str] = []

    def start(self, on_event: EventSink) -> None:
        return None

    def stop(self) -> None:
        return None

    def contracts(self) -> Sequence[Contract]:
        return CONTRACTS

    def call(self, request: CallRequest) -> None:
        self.in_flight[request.item_id] = request.attempt
        self.ever.add(request.item_id)

    def cancel(self, item_id: str, reason: str) -> None:
        self.cancels.append(item_id)


class Lifecycle(RuleBasedStateMachine):
    items = Bundle("items")

    @initialize()
    def open(self) -> None:
        self.dir = Path(tempfile.mkdtemp())
        self.now = 1_000_000.0
        self.worker = Worker()
        self.session = "s0"
        self.replies = 0
        self.delivering: dict[int, list[str]] = {}
        self.core = self._core()

    def _core(self) -> HarnessCore:
        journal = Journal.open(self.dir / "journal.sqlite3")
        core = HarnessCore(
            journal,
            EvidenceStore(journal.evidence_dir),
            [self.worker],
            HarnessSettings(max_attempts=3, backoff_s=0.5),
            clock=lambda: self.now,
        )
        core.session_id = self.session
        return core

    def teardown(self) -> None:
        """Let everything that can still happen happen: then nothing may be unfinished."""
        try:
            self._settle()
            for item in self.core.journal.items():
                assert item.state in TERMINAL, item
                assert self.core.journal.result(item.id) is not None, item
            assert self.core.journal.check() == []
        finally:
            self.core.journal.close()

    # --- the frontend -----------------------------------------------------------------
    @rule(target=items, capability=st.sampled_from(["idem", "once", "quiet", "nobody"]))
    def delegate(self, capability: str) -> str:
        capture = Capture(capability, {"n": 1}, self.session, text="call", item_id=self._id())
        return self.core.capture(capture).id

    def _id(self) -> str:
        """Item ids in order (uuids would make hypothesis's draws differ between runs)."""
        self.ids = getattr(self, "ids", 0) + 1
        return f"item-{self.ids:04d}"

    @rule(item=items)
    def cancel(self, item: str) -> None:
        self.core.cancel(item, "the user changed their mind")

    @rule(item=items, capability=st.sampled_from(["idem", "once"]))
    def revise(self, item: str, capability: str) -> None:
        capture = Capture(capability, {"n": 2}, self.session, supersedes=item, item_id=self._id())
        self.core.capture(capture)

    @rule(idle=st.booleans())
    def chunk_boundary(self, idle: bool) -> None:
        offers, stale = self.core.offers(self.session, idle)
        for item_id in stale:
            self.core.expire(item_id, "stale")
        if offers:
            reply = self.replies
            self.replies += 1
            ids = [o.item_id for o in offers]
            self.core.replying(reply, ids)
            self.delivering[reply] = ids

    @precondition(lambda self: bool(self.delivering))
    @rule(data=st.data(), heard=st.booleans())
    def reply_ends(self, data: st.DataObject, heard: bool) -> None:
        reply = data.draw(st.sampled_from(sorted(self.delivering)))
        ids = self.delivering.pop(reply)
        (self.core.played if heard else self.core.cut)(reply, ids)

    @rule()
    def new_session(self) -> None:
        self.session = f"s{int(self.now)}-{self.replies}"
        self.core.session_id = self.session

    # --- the worker ---------------------------------------------------------------------
    def _pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.worker.in_flight)))

    @precondition(lambda self: bool(self.worker.in_flight))
    @rule(data=st.data())
    def accept_and_progress(self, data: st.DataObject) -> None:
        item = self._pick(data)
        self.core.handle(Accepted(item))
        self.core.handle(Progress(item, 0.5, "half way"))

    @precondition(lambda self: bool(self.worker.in_flight))
    @rule(
        data=st.data(), outcome=st.sampled_from(("completed", "failed", "retryable", "cancelled"))
    )
    def answer(self, data: st.DataObject, outcome: str) -> None:
        item = self._pick(data)
        del self.worker.in_flight[item]
        if outcome == "completed":
            self.core.handle(Finished(item, "completed", ToolResult.ok("sunny")))
        elif outcome == "cancelled":
            self.core.handle(Finished(item, "cancelled", ToolResult.failed("cancelled", "asked")))
        else:
            failure = ToolResult.failed("busy", "try later", retryable=outcome == "retryable")
            self.core.handle(Finished(item, "failed", failure))

    @precondition(lambda self: bool(self.worker.ever))
    @rule(data=st.data())
    def duplicate_or_late_answer(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.worker.ever)))
        self.core.handle(Finished(item, "completed", ToolResult.ok("again")))

    @precondition(lambda self: bool(self.worker.in_flight))
    @rule()
    def worker_lost(self) -> None:
        lost = tuple(sorted(self.worker.in_flight))
        self.worker.in_flight.clear()
        self.core.handle(ProviderLost(lost, "last will"))

    @precondition(lambda self: bool(self.worker.in_flight))
    @rule(data=st.data())
    def worker_goes_silent(self, data: st.DataObject) -> None:
        """It never answers and no last will says so: only the timeout ends the call."""
        del self.worker.in_flight[self._pick(data)]

    @rule(seconds=st.floats(0, 20))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.core.tick()

    @rule()
    def daemon_restarts(self) -> None:
        self.core.journal.close()
        self.worker.in_flight.clear()  # the worker may still answer late: duplicates
        self.restarts = getattr(self, "restarts", 0) + 1
        self.session = f"after-restart-{self.restarts}"
        self.core = self._core()
        self.core.resume()

    # --- what must always hold ----------------------------------------------------------
    @invariant()
    def journal_is_consistent(self) -> None:
        assert self.core.journal.check() == []

    def _settle(self) -> None:
        """Everything that can still happen: answers, timeouts, a new session."""
        for _ in range(20):
            for item in list(self.worker.in_flight):
                del self.worker.in_flight[item]
                self.core.handle(Finished(item, "completed", ToolResult.ok("late")))
            self.now += 100
            self.core.tick()
        self.session = "final"
        _, stale = self.core.offers(self.session, True)
        for item_id in stale:
            self.core.expire(item_id, "stale")

    @invariant()
    def nothing_is_lost(self) -> None:
        for item in self.core.journal.items():
            if item.state in TERMINAL or item.state in (State.COMPLETED, State.FAILED):
                assert self.core.journal.result(item.id) is not None, item


class TestLifecycle(Lifecycle.TestCase):  # type: ignore[name-defined]
    settings = settings(
        max_examples=60,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def test_a_fixed_story_ends_in_terminal_states() -> None:
    """One hand-written path through the machine (readable when the random ones fail)."""
    machine = Lifecycle()
    machine.open()
    ids = [machine.delegate(c) for c in ("idem", "once", "quiet", "nobody", "idem")]
    machine.core.handle(Finished(ids[0], "completed", ToolResult.ok("sunny")))
    machine.cancel(ids[1])
    machine.daemon_restarts()
    machine.teardown()


def test_a_worker_that_goes_silent_is_ended_by_the_timeout() -> None:
    machine = Lifecycle()
    machine.open()
    for capability in ("idem", "once"):
        item = machine.delegate(capability)
        del machine.worker.in_flight[item]  # never answers, no last will
    machine.time_passes(6.0)  # past the 5 s timeout: "once" failed, "idem" retries
    states = {i.capability: i.state for i in machine.core.journal.items()}
    assert states["once"] is State.FAILED
    assert states["idem"] is State.QUEUED and machine.core.stats.retries == 1
    machine.teardown()
