"""The harness as the daemon runs it: one thread owning ``HarnessCore``, and the
frontend's ``HarnessChannel`` on top of it.

Everything that writes the journal (captures, transport events, timers, delivery) is a
command on one queue, run in order by the harness thread, so the frontend's thread never
waits for a disk write: ``delegate`` and ``playback`` only enqueue, and ``results``
reads the offers kept in memory. ``venus call`` uses the same object (``submit`` and
``wait``).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from venus.capabilities.contract import Contract
from venus.capabilities.transport import Transport, TransportEvent
from venus.daemon.frontend.channel import Delegation, InjectedResult
from venus.daemon.frontend.playback import PlaybackEvent, Played, Stopped
from venus.daemon.harness.core import Capture, HarnessCore, HarnessSettings
from venus.daemon.harness.evidence import EvidenceInput, EvidenceStore
from venus.daemon.harness.item import WorkItem, new_item_id
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State
from venus.errors import VenusError

log = logging.getLogger(__name__)

Command = Callable[[HarnessCore], object]
FINISHED = frozenset(
    {State.COMPLETED, State.FAILED, State.DELIVERING, State.DELIVERED, State.CANCELLED}
    | {State.EXPIRED}
)


class Harness:
    def __init__(self, core: HarnessCore, ids: Callable[[], str] = new_item_id) -> None:
        self.core = core
        self.ids = ids  # the id of each item the frontend's delegations make
        self._commands: queue.Queue[Command | None] = queue.Queue()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        journal: Path,
        transports: Sequence[Transport],
        settings: HarnessSettings | None = None,
        ids: Callable[[], str] = new_item_id,
    ) -> Harness:
        j = Journal.open(journal)
        return cls(HarnessCore(j, EvidenceStore(j.evidence_dir), transports, settings), ids)

    # --- life ----------------------------------------------------------------------------
    def start(self, resume: bool = True) -> None:
        """Start the transports and the thread; ``resume`` finishes what an earlier run
        left unfinished (the daemon does; ``venus call``, a second process on the same
        journal, must not)."""
        for transport in self.core.transports:
            transport.start(self._on_event)
        self._thread = threading.Thread(target=self._run, name="venus-harness", daemon=True)
        self._thread.start()
        if resume:
            self.post(lambda core: core.resume())

    def stop(self) -> None:
        if self._thread is not None:
            self._commands.put(None)
            self._thread.join(timeout=10)
        for transport in self.core.transports:
            transport.stop()
        self.core.journal.close()

    def __enter__(self) -> Harness:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def post(self, command: Command) -> None:
        self._commands.put(command)

    def _on_event(self, event: TransportEvent) -> None:
        self.post(lambda core: core.handle(event))

    def _run(self) -> None:
        core = self.core
        while True:
            due = core.next_timer()
            timeout = None if due is None else max(0.0, due - core.clock())
            try:
                command = self._commands.get(timeout=0.5 if timeout is None else min(timeout, 0.5))
            except queue.Empty:
                command = _tick
            if command is None:
                return
            try:
                command(core)
                core.tick()
            except VenusError as e:  # one bad item must not stop the others
                log.error("harness: %s", e)
            except Exception:  # the supervisor of this thread: log, keep serving
                log.exception("harness command failed")
            with self._changed:
                self._changed.notify_all()

    # --- venus call ------------------------------------------------------------------------
    def submit(self, capture: Capture) -> str:
        self.post(lambda core: core.capture(capture))
        return capture.item_id

    def cancel(self, item_id: str, reason: str) -> None:
        self.post(lambda core: core.cancel(item_id, reason))

    def wait(self, item_id: str, timeout_s: float) -> WorkItem | None:
        """The item once it has its final result (None if that takes over ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                item = self.core.journal.find(item_id)
                if item is not None and item.state in FINISHED:
                    return item
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(min(left, 0.5))

    # --- the frontend's HarnessChannel ---------------------------------------------------
    def contracts(self) -> Sequence[Contract]:
        """Every capability reachable now, by name; the first transport's wins (as
        ``HarnessCore.route`` routes a call)."""
        offered: dict[str, Contract] = {}
        for transport in self.core.transports:
            for contract in transport.contracts():
                offered.setdefault(contract.name, contract)
        return tuple(offered.values())

    def delegate(self, delegation: Delegation) -> None:
        """A delegation from the frontend: a new call (maybe superseding an earlier one:
        revise / replace), or a decision on an earlier item (cancel / retry)."""
        d = delegation
        if d.action == "call" and d.target is None:
            self.submit(_capture_of(d, None, self.ids()))
            return
        self.post(functools.partial(_decide, d=d, new_id=self.ids()))

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        self.core.session_id = session_id  # offers of other sessions are stale from now
        offers, stale = self.core.offers(session_id, idle)
        for item_id in stale:
            self.post(functools.partial(_expire, item_id=item_id))
        return [InjectedResult(o.item_id, o.text) for o in offers]

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        if item_ids:
            self.post(lambda core: core.replying(reply_id, item_ids))

    def playback(self, event: PlaybackEvent) -> None:
        if not event.tags:
            return
        if isinstance(event, Played) and event.last:
            self.post(lambda core: core.played(event.reply_id, event.tags))
        elif isinstance(event, Stopped):
            self.post(lambda core: core.cut(event.reply_id, event.tags))


def _tick(core: HarnessCore) -> None:
    return None


def _capture_of(d: Delegation, supersedes: str | None, item_id: str) -> Capture:
    return Capture(
        item_id=item_id,
        capability=d.name,
        arguments=d.arguments,
        session_id=d.session_id,
        text=d.raw,
        dialogue=d.dialogue,
        chunk_index=d.chunk_index,
        supersedes=supersedes,
        evidence=EvidenceInput(text=d.raw, dialogue=d.dialogue, audio=d.audio, frame=d.frame),
    )


def _decide(core: HarnessCore, d: Delegation, new_id: str) -> None:
    assert d.target is not None
    target = core.resolve(d.target, d.session_id)
    if target is None:
        log.warning(
            "chunk %d: %s names no item of this session: %r", d.chunk_index, d.action, d.target
        )
        if d.action == "call":  # a revision of something unknown is still a call
            core.capture(_capture_of(d, None, new_id))
        return
    if d.action == "cancel":
        core.cancel(target, f"cancelled by the frontend at chunk {d.chunk_index}")
    elif d.action == "retry":
        core.retry(target, d.session_id, new_id)
    else:
        core.capture(_capture_of(d, target, new_id))


def _expire(core: HarnessCore, item_id: str) -> None:
    core.expire(item_id, "stale or session ended")
