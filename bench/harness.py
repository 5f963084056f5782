"""``venus bench harness``: how fast work items go through the harness (in-process, or MQTT).

``--items`` calls of a capability that answers at once go through the daemon's harness
(``venus.daemon.harness.service.Harness``: journal, evidence, core, its thread) as the
frontend's delegations do, and the frontend's side reads them back as offers. Per item:

- capture -> dispatch: from ``delegate`` (the frontend hands the call over) until the
  transport is called (the item is journalled ``Queued`` and ``Running`` by then);
- result -> reintegration: from the capability's answer until the frontend can read the
  result (journalled ``Completed`` and offered);

and items per second over the whole run. ``--rate`` paces the submissions (latency
without a queue); ``--rate 0`` submits them all at once (throughput). The journal runs
twice side by side: on the directory given (``--dir``, default a temporary one: this
machine's disk) and on ``/dev/shm`` (memory: what the fsyncs of ``synchronous=FULL`` cost).

With ``--broker mqtt://HOST:PORT`` the calls go over MQTT instead: a capability worker
(node ``bench-worker``) is started in this process on that broker and the harness calls
it through its MQTT transport (node ``bench-daemon``), beside the same calls through the
in-process transport as the baseline. Reported: the round trip (submit -> call published
-> worker runs it -> reply -> item completed) p50 / p99, and calls per second, for a
paced load (``--rate``), a sustained one (``--in-flight`` calls kept in flight) and a
burst (all ``--items`` at once), with mqtt / in-process ratios. A broker that cannot be
reached within 5 s is an error. See ``venus.bench.harness_mqtt``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from venus.bench.engines import percentile
from venus.bench.report import report
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.capabilities.transport import CallRequest, EventSink, Finished, TransportEvent
from venus.daemon.frontend.channel import Delegation
from venus.daemon.harness.core import HarnessCore
from venus.daemon.harness.evidence import EvidenceStore
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.service import Harness
from venus.errors import BenchError

SESSION = "bench"
ECHO = Contract(name="echo", timeout_s=30, freshness_s=3600, idempotent=True)


@dataclass(frozen=True)
class Figures:
    where: str
    items: int
    capture_to_dispatch_p50_ms: float
    capture_to_dispatch_p99_ms: float
    result_to_reintegration_p50_ms: float
    result_to_reintegration_p99_ms: float
    items_per_s: float


class Timed:
    """The in-process transport, noting when each call is dispatched and answered."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner, self.name = inner, inner.name
        self.dispatched: dict[str, float] = {}
        self.answered: dict[str, float] = {}

    def start(self, on_event: EventSink) -> None:
        def noted(event: TransportEvent) -> None:
            if isinstance(event, Finished):
                self.answered[event.item_id] = time.perf_counter()
            on_event(event)

        self.inner.start(noted)

    def stop(self) -> None:
        self.inner.stop()

    def contracts(self) -> Sequence[Contract]:
        return self.inner.contracts()

    def call(self, request: CallRequest) -> None:
        self.dispatched[request.item_id] = time.perf_counter()
        self.inner.call(request)

    def cancel(self, item_id: str, reason: str) -> None:
        self.inner.cancel(item_id, reason)


def echo(ctx: Context) -> str:
    return f"echo {ctx.arguments.get('n')}"


def measure(root: Path, items: int, where: str, rate: float) -> Figures:
    transport = Timed(InProcessTransport([Capability(ECHO, echo)]))
    journal = Journal.open(root / "journal.sqlite3")
    harness = Harness(HarnessCore(journal, EvidenceStore(journal.evidence_dir), [transport]))
    harness.start(resume=False)
    captured: dict[str, float] = {}
    reintegrated: dict[str, float] = {}
    done = threading.Event()

    def frontend() -> None:  # the chunk boundary, as often as it can
        while len(reintegrated) < items:
            for offer in harness.results(SESSION, 0, idle=True):
                reintegrated[offer.item_id] = time.perf_counter()
            time.sleep(0.0005)
        done.set()

    reader = threading.Thread(target=frontend, daemon=True)
    started = time.perf_counter()
    reader.start()
    for n in range(items):
        item_id = f"item-{n:06d}"
        captured[item_id] = time.perf_counter()
        delegation = Delegation(SESSION, n, "echo", {"n": n}, '{"name": "echo"}')
        harness.submit(_capture(delegation, item_id))
        if rate > 0:
            time.sleep(max(0.0, started + (n + 1) / rate - time.perf_counter()))
    if not done.wait(timeout=max(60.0, items * 0.5)):
        harness.stop()
        raise BenchError(f"only {len(reintegrated)} of {items} items came back within the time")
    wall = time.perf_counter() - started
    harness.stop()
    to_dispatch = [(transport.dispatched[i] - captured[i]) * 1e3 for i in captured]
    back = [(reintegrated[i] - transport.answered[i]) * 1e3 for i in captured]
    return Figures(
        where=where,
        items=items,
        capture_to_dispatch_p50_ms=percentile(to_dispatch, 0.5),
        capture_to_dispatch_p99_ms=percentile(to_dispatch, 0.99),
        result_to_reintegration_p50_ms=percentile(back, 0.5),
        result_to_reintegration_p99_ms=percentile(back, 0.99),
        items_per_s=items / wall,
    )


def _capture(d: Delegation, item_id: str) -> Any:
    from venus.daemon.harness.core import Capture

    return Capture(
        d.name, d.arguments, d.session_id, text=d.raw, chunk_index=d.chunk_index, item_id=item_id
    )


def render(rows: list[Figures], info: dict[str, Any]) -> str:
    lines = [
        f"{info['items']} items through the harness (in-process transport), "
        + (f"{info['rate']:g} a second" if info["rate"] else "all at once")
        + f", {info['machine']}",
        f"`{info['command']}`",
        "",
        "| journal on | capture -> dispatch p50 / p99 ms | result -> reintegration p50 / p99 ms "
        "| items / s |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.where} | {r.capture_to_dispatch_p50_ms:.2f} / {r.capture_to_dispatch_p99_ms:.2f}"
            f" | {r.result_to_reintegration_p50_ms:.2f} / {r.result_to_reintegration_p99_ms:.2f}"
            f" | {r.items_per_s:.0f} |"
        )
    if len(rows) == 2:
        lines += ["", f"items / s, disk / memory: {rows[0].items_per_s / rows[1].items_per_s:.2f}"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.items < 1:
        raise BenchError("--items must be at least 1")
    if args.broker:
        from venus.bench.harness_mqtt import run as run_over_broker

        return run_over_broker(args)
    for given, name in ((args.credentials, "--credentials"), (args.in_flight, "--in-flight")):
        if given is not None:
            raise BenchError(f"{name} goes with --broker URL; add it, or leave {name} out")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as disk:
        where = f"disk ({args.dir or tempfile.gettempdir()})"
        rows.append(measure(Path(disk), args.items, where, args.rate))
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        with tempfile.TemporaryDirectory(dir=shm) as mem:
            rows.append(measure(Path(mem), args.items, "memory (/dev/shm)", args.rate))
    info = {"items": args.items, "rate": args.rate}
    return report(rows, info, render, args.json)


def register(kinds: argparse._SubParsersAction[Any]) -> None:
    p = kinds.add_parser(
        "harness",
        help="work items through the harness: capture->dispatch, result->reintegration, items/s",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--items", type=int, default=500, help="work items (default 500)")
    p.add_argument(
        "--rate",
        type=float,
        default=20.0,
        help="items submitted per second (default 20: latency unloaded); 0 submits all at once "
        "(throughput, with queueing in the latencies); with --broker, 0 leaves the paced load out",
    )
    p.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="where the disk journal goes (default: a temp dir); with --broker, the journals",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument(
        "--broker",
        metavar="URL",
        help="measure the round trip over MQTT through this broker (mqtt://HOST:PORT): a worker "
        "runs in this process; the in-process transport is the baseline. With it the journals "
        "go to memory (/dev/shm), or to --dir",
    )
    p.add_argument(
        "--credentials",
        type=Path,
        metavar="FILE",
        help="with --broker: username:password file (chmod 600), used by the worker and the "
        "harness alike",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        metavar="N",
        help="with --broker: calls kept in flight by the sustained load (default 4, the "
        "calls a worker runs at once)",
    )
    p.set_defaults(run=run)
