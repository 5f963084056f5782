"""``venus run``: the frontend loop from the command line (``venus demo`` is
:mod:`venus.demo.cli`).

Handlers import the runtime only when they run, so ``venus --help`` stays instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus.daemon.cli import config_path
from venus.errors import ConfigError
from venus.logs import setup_logging

if TYPE_CHECKING:
    from venus.daemon.config.schema import VenusConfig
    from venus.daemon.frontend.timeline import ChunkRecord
    from venus.daemon.harness.service import Harness
    from venus.daemon.service.lifecycle import Lifecycle
    from venus.hw.events import EventSink, HwEvent

log = logging.getLogger(__name__)

RUN_HELP = """\
Run the assistant. By default in real time on the configured microphone, camera and
speaker, until SIGINT or SIGTERM; SIGHUP reloads the configuration (what can change
without a restart), and under systemd (Type=notify) it reports READY, STATUS and
watchdog pings over $NOTIFY_SOCKET. With --offline, over a WAV file instead, as fast as the
machine goes and deterministic for a seed, writing timeline.jsonl, output.wav (the
assistant's audio, sample-aligned with the input and of its length), conversation.wav
(input left, assistant right) and summary.json to --out DIR. With --offline --journal
the harness runs too, its capabilities answering in wall time; add --paced to read the
file at its own pace, so that they answer on the input's clock, as they would live."""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    run = commands.add_parser(
        "run",
        help="run the assistant (real time, or --offline over a WAV file)",
        description=RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--engines", type=Path, metavar="DIR", help="override [model] engines")
    run.add_argument("--offline", type=Path, metavar="INPUT.wav", help="run over this file instead")
    run.add_argument("--video", type=Path, metavar="FILE", help="offline: the camera's video")
    run.add_argument("--out", type=Path, metavar="DIR", help="offline: where outputs go")
    run.add_argument(
        "--timeline", type=Path, metavar="FILE", help="real time: also write the timeline here"
    )
    run.add_argument("--seed", type=int, help="override [model] seed")
    run.add_argument(
        "--journal",
        type=Path,
        metavar="FILE",
        help="offline: run the harness too, with this journal (results then arrive in wall "
        "time, so the run is no longer deterministic); live: override [harness] journal",
    )
    run.add_argument(
        "--paced",
        action="store_true",
        help="offline: read the file at its own pace, a chunk per chunk period (the run "
        "takes as long as the input), so capabilities (--journal) answer on its clock",
    )
    run.add_argument(
        "--policy",
        choices=("model", "vad", "always-continue"),
        help="offline, for evaluation baselines: who takes each chunk's decision: model (the "
        "default: the model, as in production), vad (a cascade: stop on any overlapping user "
        "speech, answer after 0.6 s of silence) or always-continue (never yield while "
        "speaking); the chunks where it overrode the model say so in the timeline",
    )
    run.add_argument("--quiet", action="store_true", help="no line per chunk")
    run.set_defaults(run=_run)


def _config(args: argparse.Namespace) -> VenusConfig:
    """The configuration file, or the defaults when none exists and none was named; the
    logging it asks for is set up."""
    path = config_path(args)
    if not path.exists() and not args.config:
        log.info("no configuration file at %s: using the defaults", path)
    cfg = _read_config(args)
    setup_logging(args.log_level or cfg.logging.level, cfg.logging.format)
    return cfg


def _read_config(args: argparse.Namespace) -> VenusConfig:
    """The file with the command line's overrides (--engines, --seed); the defaults when
    no file exists and none was named. Also SIGHUP's reading, so no logging set-up here."""
    from venus.daemon.config import load_config
    from venus.daemon.config.schema import VenusConfig

    path = config_path(args)
    cfg = VenusConfig() if not path.exists() and not args.config else load_config(path)
    model = cfg.model
    if args.engines:
        model = dataclasses.replace(model, engines=args.engines)
    if args.seed is not None:
        model = dataclasses.replace(model, seed=args.seed)
    return dataclasses.replace(cfg, model=model)


def _run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.offline is None and (args.out or args.video or args.policy or args.paced):
        raise ConfigError("--out, --video, --policy and --paced go with --offline INPUT.wav")
    if args.offline is not None and args.out is None:
        raise ConfigError("--offline needs --out DIR for its outputs")
    if args.offline is None:
        return _run_live(args, cfg)
    from venus.daemon.frontend.offline import run_offline
    from venus.daemon.frontend.policy import policy_named
    from venus.daemon.frontend.session import engine_options
    from venus.daemon.frontend.summary import render
    from venus.daemon.service.observe import observe
    from venus.engines.runners import Engines

    policy = policy_named(args.policy or "model")
    engines = Engines.open(cfg.model.engines, engine_options(cfg))
    chunk_s = engines.manifest.schedule.chunk_s
    cfg = with_engine_schedule(cfg, chunk_s)
    progress = progress_printer(chunk_s, None, args.quiet)
    with ExitStack() as parts:  # closed in reverse: metrics, then the harness
        harness = _open_harness(cfg, args.journal) if args.journal else None
        if harness is not None:
            parts.callback(harness.stop)
        metrics = observe(cfg, harness, parts, chunk_s=chunk_s)

        def on_record(record: ChunkRecord) -> None:
            progress(record)
            metrics.on_record(record)

        done = run_offline(
            cfg,
            engines,
            args.offline,
            args.out,
            args.video,
            on_record,
            harness=harness,
            policy=policy,
            paced=args.paced,
        )
    sys.stdout.write(render(done.summary) + f"\noutputs in {done.out_dir}/\n")
    return 0


def _run_live(args: argparse.Namespace, cfg: VenusConfig) -> int:
    """The daemon: systemd hears every step (``service.lifecycle``); SIGTERM / SIGINT stop
    it (exit 0), SIGHUP reloads the configuration."""
    from venus.daemon.service.lifecycle import Lifecycle

    service = Lifecycle.from_env(cfg)
    service.install_signals()
    try:
        service.starting()
        return _serve(args, cfg, service)
    finally:
        service.close()


def _serve(args: argparse.Namespace, cfg: VenusConfig, service: Lifecycle) -> int:
    """Engines, harness, broadcast, then the loop until ``service.stop``. Parts stop in
    reverse order of starting (``parts``); each chunk record goes to every one of
    ``consumers`` (token-to-wave's thread), each device event to ``device_sinks``."""
    from venus.daemon.broadcast import open_broadcast
    from venus.daemon.frontend.realtime import LiveHooks, run_realtime
    from venus.daemon.frontend.session import Frontend, engine_options
    from venus.daemon.service import reloadable
    from venus.daemon.service.faults import StallFault
    from venus.daemon.service.observe import observe
    from venus.engines.runners import Engines

    engines = Engines.open(cfg.model.engines, engine_options(cfg))
    chunk_s = engines.manifest.schedule.chunk_s
    cfg = with_engine_schedule(cfg, chunk_s)
    if service.stop.is_set():
        return 0
    consumers: list[Callable[[ChunkRecord], None]] = [
        progress_printer(chunk_s, None, args.quiet) if sys.stdout.isatty() else _periodic_summary(),
        service.on_record,
    ]
    device_sinks: list[EventSink] = [service.on_device]
    fault = StallFault.from_env(service.stop)
    with ExitStack() as parts:  # closed in reverse: the broadcast, then the harness
        harness = _open_harness(cfg, args.journal or cfg.harness.journal, degrade=True)
        if harness is not None:
            parts.callback(harness.stop)  # journal closed; MQTT publishes offline
        muted = threading.Event()
        if cfg.audio.muted:
            muted.set()
        broadcast = open_broadcast(harness, muted, cfg.homeassistant) if harness else None
        if broadcast is not None:
            parts.callback(broadcast.stop)
            consumers.append(broadcast.on_record)
        if fault is not None:
            consumers.append(fault.on_record)
        stalled_s = service.watchdog.stalled_s
        metrics = observe(cfg, harness, parts, chunk_s=chunk_s, stalled_s=stalled_s)
        consumers.append(metrics.on_record)
        device_sinks.append(metrics.on_device_event)

        def on_record(record: ChunkRecord) -> None:
            for consume in consumers:
                consume(record)

        def on_device(event: HwEvent) -> None:
            for sink in device_sinks:
                sink(event)

        def started(frontend: Frontend) -> None:
            if fault is not None:
                fault.attach(frontend)
            metrics.set_device("microphone", "running")  # events tell the changes from here
            metrics.set_device("speaker", "running")
            camera = cfg.video.enabled and engines.vision is not None
            metrics.set_device("camera", "running" if camera else "disabled")
            live_parts = [
                reloadable.logging_part(args.log_level),
                reloadable.sampling_part(frontend),
                reloadable.homeassistant_part(broadcast),
                reloadable.watchdog_part(service.watchdog),
                reloadable.capabilities_part(harness),
            ]
            service.ready(
                lambda: with_engine_schedule(_read_config(args), chunk_s), cfg, live_parts
            )

        hooks = LiveHooks(warming_up=service.warming_up, started=started, device=on_device)
        stats = run_realtime(
            cfg, engines, service.stop, args.timeline, on_record, harness, muted, hooks
        )
    log.info("stopped after %d chunks (%d playback cuts)", stats.chunks, stats.cuts)
    return 0


def _open_harness(cfg: VenusConfig, journal: Path, degrade: bool = False) -> Harness | None:
    """The harness with ``harness_transports``.
    Live (``degrade``), a journal that cannot be opened leaves the assistant running
    without delegation, with an ERROR saying why."""
    from venus.daemon.harness.core import HarnessSettings
    from venus.daemon.harness.service import Harness
    from venus.daemon.transports import harness_transports
    from venus.errors import HarnessError

    try:
        harness = Harness.open(
            journal,
            harness_transports(cfg),
            HarnessSettings(site_id=cfg.harness.site_id, max_attempts=cfg.harness.max_attempts),
        )
    except HarnessError as e:
        if not degrade:
            raise
        log.error("harness off: %s; delegations are recorded but not run", e)
        return None
    retained = harness.core.journal.retain(cfg.harness.retention_days * 86400.0)
    if retained.items:
        log.info(
            "journal: removed %d items older than %d days",
            retained.items,
            cfg.harness.retention_days,
        )
    harness.start()
    return harness


def with_engine_schedule(cfg: VenusConfig, chunk_s: float) -> VenusConfig:
    """A chunk period left at its default follows the engines'; any other must match them
    (``check_schedule`` says so otherwise)."""
    from venus.daemon.config.schema import ScheduleConfig

    if cfg.schedule.chunk_s == chunk_s or cfg.schedule.chunk_s != ScheduleConfig().chunk_s:
        return cfg
    log.info("schedule.chunk_s follows the engines: %s s", chunk_s)
    return dataclasses.replace(cfg, schedule=dataclasses.replace(cfg.schedule, chunk_s=chunk_s))


SUMMARY_EVERY = 60  # chunks between latency summaries in the log (a minute at 1 s)


def _periodic_summary() -> Any:
    """Under systemd (no terminal): an INFO summary every SUMMARY_EVERY chunks, not a line
    per chunk."""
    from venus.daemon.frontend.summary import summarize

    window: list[ChunkRecord] = []

    def add(record: ChunkRecord) -> None:
        window.append(record)
        if len(window) < SUMMARY_EVERY:
            return
        s = summarize(window, wall_s=0.0, input_s=0.0)
        total = s.latency.get("total")
        log.info(
            "last %d chunks: %s; chunk time p50 %.0f ms, p95 %.0f ms; %d deadlines missed",
            s.chunks,
            ", ".join(f"{k} {v}" for k, v in sorted(s.decisions.items())),
            total.p50_ms if total else 0.0,
            total.p95_ms if total else 0.0,
            s.deadlines_missed,
        )
        window.clear()

    return add


def progress_printer(chunk_s: float, total: int | None, quiet: bool) -> Any:
    """A line per chunk: index, time, decision, speech tokens, latency, text, and flags:
    ``delegate`` (a call decoded), ``result`` (a result injected), ``cut``."""

    def show(r: ChunkRecord) -> None:
        if quiet:
            return
        of = f"/{total}" if total else ""
        text = (r.text[:28] + "...") if len(r.text) > 31 else r.text
        flags = " ".join(
            [
                *(["delegate"] if r.delegations else []),
                *(["result"] if r.results else []),
                *(["cut"] if r.playback_stopped else []),
                *([f"({r.overridden_by})"] if r.overridden_by else []),
            ]
        )
        sys.stdout.write(
            f"chunk {r.index + 1:>4}{of}  {r.start_s:7.2f} s  {r.decision:<8} "
            f"speech {r.speech_tokens:>3}  {r.latency_ms.get('total', 0.0):7.1f} ms  "
            f"{text!r} {flags}\n"
        )
        sys.stdout.flush()

    return show
