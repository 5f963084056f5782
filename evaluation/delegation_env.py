"""The delegation benchmark's environment: stand-ins for the capabilities a sample may
call that have no implementation here, answering from the sample's trajectory.

``weather``, ``calendar`` and ``shopping_list`` are mock domains, and ``mqtt_device`` and
``reason`` need a broker and an endpoint; the trajectory says what each call answered
(``result_text``, ``status``) and how many chunks later (``result_chunk - call_chunk``).
``BenchTransport`` plays those answers back on the sample clock: the world the system
acts in, not a fake of the system under test (its frontend, harness, journal and
built-ins ``clock``, ``calculator``, ``timer`` are the real ones; the clock reads the
fixed instant ``BENCH_CLOCK_S`` and the timers run on the sample clock, ``SampleTime``,
so that a run repeats whenever and however fast it runs).

- A call takes the next answer of its capability in the trajectory (calls and retries,
  by call chunk); past the last it gets the last again; a capability the sample never
  calls fails ``not_in_sample``. Arguments are checked against the contract's input
  schema first (``invalid_arguments``, as the in-process transport does).
- The answer is due ``latency`` chunks after the chunk whose span made the item (a
  failed one fails, not retryable: retrying is the system's decision). A call the
  reference cancelled answers "Done." one chunk after the reference's cancel chunk.
- ``advance(chunk)``, called with each timeline record, finishes what is due by the next
  boundary; the runner then ``settle`` s the harness, so they are offered there (when the
  harness's delivery rule lets it). A cancel finishes a pending call at once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import validators  # type: ignore[import-untyped]

from venus.capabilities.contract import Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import (
    Accepted,
    CallRequest,
    EventSink,
    Finished,
    TransportEvent,
)

__all__ = [
    "BENCH_CLOCK_S",
    "STAND_INS",
    "Answer",
    "BenchTransport",
    "answers_of",
    "bench_harness",
    "settle",
    "timers_due",
]

if TYPE_CHECKING:
    from venus.daemon.frontend.timeline import ChunkRecord
    from venus.daemon.harness.item import WorkItem
    from venus.daemon.harness.service import Harness

log = logging.getLogger(__name__)

STAND_INS = ("weather", "calendar", "shopping_list", "mqtt_device", "reason")
# what the built-in clock reads in a bench run: Monday 5 January 2026, 09:30 UTC (a fixed
# instant, so that a run's results, and what the model says after them, repeat)
BENCH_CLOCK_S = 1767605400.0
CANCELLED_TEXT = "Done."
NOT_IN_SAMPLE = "this benchmark sample has no answer for this capability"
TIMER_WAIT_S = 5.0  # for a timer that ran out on the sample clock to answer (wall time)


@dataclass(frozen=True)
class Answer:
    capability: str
    completed: bool
    text: str
    latency_chunks: int  # after the call's chunk


def answers_of(trajectory: Mapping[str, Any]) -> list[Answer]:
    """What the trajectory's delegations answered, by call chunk."""
    out = []
    for d in sorted(trajectory["delegations"], key=lambda d: d["call_chunk"]):
        if d["result_chunk"] is not None:
            latency, text = d["result_chunk"] - d["call_chunk"], d["result_text"]
        else:  # cancelled before it answered
            latency, text = (d["cancel_chunk"] or d["call_chunk"]) - d["call_chunk"] + 1, ""
        done = d["status"] != "failed"
        out.append(Answer(d["capability"], done, text or CANCELLED_TEXT, max(1, latency)))
    return out


@dataclass
class _Pending:
    request: CallRequest
    answer: Answer | None
    due: int | None = None  # the chunk whose results should carry it


class BenchTransport:
    """A ``Transport`` offering ``contracts``, answering with ``answers`` (see the module
    doc)."""

    name = "benchmark"

    def __init__(
        self,
        contracts: Sequence[Contract],
        answers: Sequence[Answer],
    ) -> None:
        self._contracts = list(contracts)
        self._validators = {
            c.name: validators.validator_for(c.input_schema)(c.input_schema) for c in contracts
        }
        self._queues = {
            c.name: deque(a for a in answers if a.capability == c.name) for c in contracts
        }
        self._last: dict[str, Answer] = {}
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._on_event: EventSink | None = None

    def start(self, on_event: EventSink) -> None:
        self._on_event = on_event

    def stop(self) -> None:
        with self._lock:
            left, self._pending = list(self._pending.values()), {}
        for p in left:
            self._finish(p.request.item_id, False, "the benchmark sample ended", cancelled=True)

    def contracts(self) -> Sequence[Contract]:
        return list(self._contracts)

    def call(self, request: CallRequest) -> None:
        self._emit(Accepted(request.item_id))
        validator = self._validators.get(request.capability)
        if validator is None:
            self._finish(request.item_id, False, f"no capability {request.capability}")
            return
        errors = sorted(e.message for e in validator.iter_errors(dict(request.arguments)))
        if errors:
            self._finish(request.item_id, False, "; ".join(errors[:3]), "invalid_arguments")
            return
        with self._lock:
            queue = self._queues[request.capability]
            answer = queue.popleft() if queue else self._last.get(request.capability)
            if answer is not None:
                self._last[request.capability] = answer
            self._pending[request.item_id] = _Pending(request, answer)

    def cancel(self, item_id: str, reason: str) -> None:
        with self._lock:
            pending = self._pending.pop(item_id, None)
        if pending is not None:
            self._finish(item_id, False, reason or "cancelled", cancelled=True)

    def advance(self, chunk: int, made_at: Callable[[str], int | None]) -> list[str]:
        """After chunk ``chunk``: finish every call due by chunk ``chunk + 1``; their ids.
        ``made_at(item_id)``: the chunk whose span made the item (the journal's)."""
        with self._lock:
            new = [i for i, p in self._pending.items() if p.due is None]
        made = {i: made_at(i) for i in new}  # the journal's lock: not under ours
        with self._lock:
            due = []
            for item_id, p in self._pending.items():
                if p.due is None:
                    at = made.get(item_id)
                    latency = p.answer.latency_chunks if p.answer is not None else 1
                    p.due = (chunk if at is None else at) + latency
                if p.due <= chunk + 1:
                    due.append(p)
            for p in due:
                del self._pending[p.request.item_id]
        for p in due:
            a = p.answer
            if a is None:
                self._finish(p.request.item_id, False, NOT_IN_SAMPLE, "not_in_sample")
            else:
                self._finish(p.request.item_id, a.completed, a.text, "unavailable")
        return [p.request.item_id for p in due]

    def _finish(
        self, item_id: str, ok: bool, text: str, code: str = "error", cancelled: bool = False
    ) -> None:
        if cancelled:
            self._emit(Finished(item_id, "cancelled", ToolResult.failed("cancelled", text)))
        elif ok:
            self._emit(Finished(item_id, "completed", ToolResult.ok(text)))
        else:
            self._emit(Finished(item_id, "failed", ToolResult.failed(code, text)))

    def _emit(self, event: TransportEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)


def settle(harness: Harness, timeout_s: float = 5.0) -> None:
    """Return once the harness has handled everything posted to it so far (a barrier
    on its command queue): answers emitted before are recorded and ready to offer."""
    done = threading.Event()
    harness.post(lambda _core: done.set())
    if not done.wait(timeout_s):
        log.warning("the harness did not catch up within %.1f s", timeout_s)


def timers_due(items: Sequence[WorkItem], now_s: float, chunk_s: float) -> list[str]:
    """The pending ``timer`` sets among ``items`` that have run out by ``now_s`` on the
    sample clock (``SampleTime``: started at their chunk's start)."""
    due = []
    for item in items:
        if item.capability != "timer" or item.arguments.get("action") != "set":
            continue
        seconds = item.arguments.get("seconds")
        if isinstance(seconds, (int, float)) and item.chunk_index * chunk_s + seconds <= now_s:
            due.append(item.id)
    return due


@contextmanager
def bench_harness(
    journal: Path, answers: Sequence[Answer], seed: int = 0, chunk_s: float = 1.0
) -> Iterator[tuple[Harness, Callable[[ChunkRecord], None]]]:
    """The harness a sample (or ``venus demo``'s scenario) runs with: the built-ins
    (``clock``, ``calculator``, ``timer``) and the stand-ins answering ``answers``,
    started on ``journal`` (a fresh file), and the hook every timeline record goes to:
    it moves the timers' sample clock to the chunk's end (``chunk_s`` a chunk), finishes
    the answers and timers due by then and waits for the harness to record them. Item
    ids are drawn from ``seed``, so a run is made again exactly. Stopped on leaving."""
    from venus.capabilities.builtin import builtin_transport
    from venus.capabilities.builtin.timer import SampleTime
    from venus.daemon.harness.item import seeded_item_ids
    from venus.daemon.harness.service import Harness
    from venus.datagen.domains_contracts import contracts

    bench = BenchTransport([contracts()[n] for n in STAND_INS], answers)
    sample = SampleTime(chunk_s)
    # the same time in every run; the timers on the sample clock
    builtins = builtin_transport(clock_at_s=BENCH_CLOCK_S, timer_time=sample)
    harness = Harness.open(journal, [builtins, bench], ids=seeded_item_ids(seed))
    try:
        harness.start(resume=False)
    except BaseException:
        harness.stop()
        raise

    def made_at(item_id: str) -> int | None:
        item = harness.core.journal.find(item_id)
        return None if item is None else item.chunk_index

    sample.made_at = made_at

    def on_record(record: ChunkRecord) -> None:
        settle(harness)  # the calls the chunk made are in the journal and dispatched
        now_s = sample.advance(record.index)
        rung = timers_due(harness.core.journal.unfinished(), now_s, chunk_s)
        for item_id in rung:  # the timer's thread wakes, answers, the harness records it
            if harness.wait(item_id, TIMER_WAIT_S) is None:
                log.warning("timer item %s did not answer within %.0f s", item_id, TIMER_WAIT_S)
        if bench.advance(record.index, made_at) or rung:
            settle(harness)  # recorded before the next boundary asks for results

    try:
        yield harness, on_record
    finally:
        harness.stop()
