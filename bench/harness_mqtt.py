"""``venus bench harness --broker URL``: a work item's round trip over MQTT, beside in-process.

The same calls of an echo capability go through two harnesses side by side in this process
(journal, evidence, core, its thread; each on a fresh journal):

- **in-process**, the baseline: the capability runs in the daemon's process
  (``InProcessTransport``, 4 calls at once), as the built-ins do;
- **mqtt**: the harness's ``MqttTransport`` (node ``bench-daemon``) calls a capability
  worker (``Worker``, node ``bench-worker``, 4 calls at once) started here on the broker.

Round trip: from ``submit`` until the item is journalled ``Completed`` and offered to the
frontend (over MQTT: call published, worker runs it, reply, completed). Loads, each through
both transports in turn, after a warm-up of ``WARMUP`` calls through each:

- **paced** (``--rate`` a second; none with ``--rate 0``): latency without a queue;
- **sustained** (``--in-flight N`` calls kept in flight, a new one as each completes): the
  calls per second the pair keeps up with, latency behind a short queue;
- **burst** (all ``--items`` at once): calls per second under a full queue; the latencies
  are mostly queueing.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from venus.bench.engines import percentile
from venus.bench.harness import ECHO, SESSION, echo
from venus.bench.report import report
from venus.capabilities.credentials import read_credentials
from venus.capabilities.inprocess import Capability, InProcessTransport
from venus.capabilities.mqtt_transport import MqttTransport
from venus.capabilities.transport import Finished, Transport, TransportEvent
from venus.capabilities.worker import Worker
from venus.daemon.harness.core import Capture, HarnessCore
from venus.daemon.harness.evidence import EvidenceStore
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.service import Harness
from venus.errors import BenchError, CapabilityError

log = logging.getLogger(__name__)

WORKER_NODE, DAEMON_NODE = "bench-worker", "bench-daemon"
CONCURRENCY = 4  # calls run at once, on both sides (InProcessTransport's and Worker's default)
CONNECT_TIMEOUT_S = 5.0  # a reachable broker answers in milliseconds
DISCOVERY_TIMEOUT_S = 5.0  # the daemon side sees the worker's retained capabilities
DISCOVERY_POLL_S = 0.02  # the transport has no discovery event to wait on
PROGRESS_S = 2.0  # a progress line this often while a load runs
WARMUP = 10  # calls through each harness first, not counted (threads, SQLite, the connection)
SLACK_S = 30.0  # a load's time limit past its expected duration
PER_CALL_SLACK_S = 0.05  # plus this much a call (a slow machine, a burst's queue)


@dataclass(frozen=True)
class Load:
    """How calls are submitted: paced (``rate`` a second), sustained (``in_flight`` kept
    in flight) or, with neither, all at once."""

    name: str
    rate: float = 0.0
    in_flight: int = 0


@dataclass(frozen=True)
class RoundTrip:
    load: str
    transport: str
    calls: int
    round_trip_p50_ms: float
    round_trip_p99_ms: float
    calls_per_s: float


class NotingCore(HarnessCore):
    """The harness's core, telling ``on_final`` (on the harness thread) when an item has
    its final result: journalled and offered (a failure being retried is not final)."""

    on_final: Callable[[str, Finished], None] | None = None

    def handle(self, event: TransportEvent) -> None:
        super().handle(event)
        if isinstance(event, Finished) and self.on_final is not None:
            with self.lock:
                final = event.item_id in self.ready
            if final:
                self.on_final(event.item_id, event)


@dataclass(frozen=True)
class Side:
    """One transport and the harness it runs in."""

    name: str
    harness: Harness
    core: NotingCore


class LoadRun:
    """One load through one side: when each call was submitted and when it came back."""

    def __init__(self, side: Side, load: Load, calls: int) -> None:
        self.side, self.load, self.calls = side, load, calls
        self.tag = f"{side.name}-{load.name}".replace(" ", "-").replace("/", "")
        self.lock = threading.Lock()  # the submitter and the harness thread
        self.submitted: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.failed: dict[str, str] = {}  # item id -> the error
        self.done = threading.Event()

    def run(self) -> RoundTrip:
        self.side.core.on_final = self._final
        try:
            started = time.perf_counter()
            limit_s = SLACK_S + self.calls * PER_CALL_SLACK_S
            if self.load.rate > 0:
                limit_s += self.calls / self.load.rate
                self._paced(started)
            else:
                for _ in range(self.load.in_flight or self.calls):
                    self._submit_next()
            self._wait(started, limit_s)
        finally:
            self.side.core.on_final = None
        if self.failed:
            item_id, error = next(iter(self.failed.items()))
            raise BenchError(
                f"{len(self.failed)} of {self.calls} calls failed over {self.side.name} "
                f"({self.load.name}); the first, {item_id}: {error}"
            )
        trips = [(self.finished[i] - self.submitted[i]) * 1e3 for i in self.submitted]
        return RoundTrip(
            load=self.load.name,
            transport=self.side.name,
            calls=self.calls,
            round_trip_p50_ms=percentile(trips, 0.5),
            round_trip_p99_ms=percentile(trips, 0.99),
            calls_per_s=self.calls / (max(self.finished.values()) - started),
        )

    def _submit_next(self) -> None:
        with self.lock:
            n = len(self.submitted)
            if n >= self.calls:
                return
            item_id = f"{self.tag}-{n:06d}"
            self.submitted[item_id] = time.perf_counter()
        capture = Capture(ECHO.name, {"n": n}, SESSION, text='{"name": "echo"}', item_id=item_id)
        self.side.harness.submit(capture)

    def _paced(self, started: float) -> None:
        report = started + PROGRESS_S
        for n in range(self.calls):
            self._submit_next()
            if time.perf_counter() >= report:
                self._progress()
                report += PROGRESS_S
            time.sleep(max(0.0, started + (n + 1) / self.load.rate - time.perf_counter()))

    def _final(self, item_id: str, event: Finished) -> None:  # the harness thread
        now = time.perf_counter()
        with self.lock:
            if item_id not in self.submitted or item_id in self.finished:
                return  # a warm-up's straggler, or a duplicate answer
            self.finished[item_id] = now
            if event.status != "completed":
                self.failed[item_id] = event.result.text()
            complete = len(self.finished) == self.calls
        if complete:
            self.done.set()
        elif self.load.in_flight:
            self._submit_next()

    def _wait(self, started: float, limit_s: float) -> None:
        while not self.done.wait(PROGRESS_S):
            if time.perf_counter() - started > limit_s:
                raise BenchError(
                    f"{self.side.name} ({self.load.name}): only {len(self.finished)} of "
                    f"{self.calls} calls came back within {limit_s:.0f} s; see the log above"
                )
            self._progress()

    def _progress(self) -> None:
        log.info(
            "%s over %s: %d of %d calls back",
            self.load.name,
            self.side.name,
            len(self.finished),
            self.calls,
        )


def loads(args: argparse.Namespace) -> list[Load]:
    out = [Load(f"paced {args.rate:g} / s", rate=args.rate)] if args.rate > 0 else []
    in_flight = args.in_flight or CONCURRENCY
    out.append(Load(f"sustained {in_flight} in flight", in_flight=in_flight))
    out.append(Load(f"burst of {args.items}"))
    return out


def run(args: argparse.Namespace) -> int:
    if args.in_flight is not None and args.in_flight < 1:
        raise BenchError("--in-flight must be at least 1")
    credentials = read_credentials(args.credentials) if args.credentials else None
    worker = Worker(WORKER_NODE, [Capability(ECHO, echo)], args.broker, credentials=credentials)
    daemon_side = MqttTransport(DAEMON_NODE, args.broker, credentials=args.credentials)
    journal_dir, where = journal_place(args.dir)
    rows = []
    with tempfile.TemporaryDirectory(dir=journal_dir) as tmp, ExitStack() as stack:
        start_worker(worker, args.broker)
        stack.callback(worker.stop)
        sides = []
        for name, transport in (
            ("in-process", InProcessTransport([Capability(ECHO, echo)], CONCURRENCY)),
            ("mqtt", daemon_side),
        ):
            side = open_side(name, Path(tmp) / name, transport)
            stack.callback(side.harness.stop)
            sides.append(side)
        discover(sides[1].harness, daemon_side, args.broker)
        for side in sides:
            LoadRun(side, Load("warm-up", in_flight=1), WARMUP).run()
        for load in loads(args):
            for side in sides:
                log.info("%s over %s: %d calls", load.name, side.name, args.items)
                rows.append(LoadRun(side, load, args.items).run())
    info = {"items": args.items, "broker": args.broker, "journal": where}
    return report(rows, info, render, args.json)


def journal_place(given: Path | None) -> tuple[str | None, str]:
    """Where the journals go: ``--dir``, else memory (the transports' cost, not fsyncs')."""
    if given is not None:
        return str(given), f"on {given}"
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return str(shm), "in memory (/dev/shm)"
    return None, f"on {tempfile.gettempdir()}"


def start_worker(worker: Worker, url: str) -> None:
    try:
        worker.start(CONNECT_TIMEOUT_S)
    except CapabilityError as e:
        raise BenchError(
            f"cannot reach the MQTT broker {url} within {CONNECT_TIMEOUT_S:g} s: is a broker "
            "running there (e.g. `mosquitto -p PORT`), and are --credentials right?"
        ) from e


def open_side(name: str, root: Path, transport: Transport) -> Side:
    root.mkdir()
    journal = Journal.open(root / "journal.sqlite3")
    core = NotingCore(journal, EvidenceStore(journal.evidence_dir), [transport])
    harness = Harness(core)
    harness.start(resume=False)
    return Side(name, harness, core)


def discover(harness: Harness, transport: MqttTransport, url: str) -> None:
    """Wait (bounded) until the harness routes ``echo`` to the worker over the broker."""
    deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
    while harness.core.route(ECHO.name) is None:
        if time.monotonic() > deadline:
            why = (
                "sees no capabilities of the worker: may node "
                f"{DAEMON_NODE} read venus/v1/nodes/# (the broker's ACL)?"
                if transport.connected
                else "could not connect (see the log above)"
            )
            raise BenchError(
                f"the worker {WORKER_NODE} is connected to {url}, but after "
                f"{DISCOVERY_TIMEOUT_S:g} s the harness's MQTT transport {why}"
            )
        time.sleep(DISCOVERY_POLL_S)


def render(rows: list[RoundTrip], info: dict[str, Any]) -> str:
    lines = [
        f"{info['items']} calls of an echo capability per load through the harness: mqtt "
        f"(broker {info['broker']}, worker {WORKER_NODE} in this process) beside in-process "
        f"(the baseline); journal {info['journal']}; {info['machine']}",
        f"`{info['command']}`",
        "",
        "round trip: submit -> item completed; ratios: mqtt / in-process "
        "(above 1: mqtt slower for latency, faster for calls / s)",
        "",
        "| load | transport | round trip p50 ms | round trip p99 ms | calls / s "
        "| p50 / p99 / calls/s vs in-process |",
        "|---|---|---:|---:|---:|---|",
    ]
    base: RoundTrip | None = None
    for r in rows:
        if r.transport == "in-process":
            base, vs = r, "baseline"
        else:
            assert base is not None and base.load == r.load  # in-process runs first
            vs = " / ".join(
                _ratio(a, b)
                for a, b in (
                    (r.round_trip_p50_ms, base.round_trip_p50_ms),
                    (r.round_trip_p99_ms, base.round_trip_p99_ms),
                    (r.calls_per_s, base.calls_per_s),
                )
            )
        lines.append(
            f"| {r.load} | {r.transport} | {r.round_trip_p50_ms:.2f} | {r.round_trip_p99_ms:.2f}"
            f" | {r.calls_per_s:.1f} | {vs} |"
        )
    return "\n".join(lines) + "\n"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"
