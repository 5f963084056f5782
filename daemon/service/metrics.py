"""Prometheus metrics of the daemon, in a registry of their own.

``Metrics`` owns a ``CollectorRegistry`` (never the global one), so two instances in
one process (tests, a bench) do not clash. It is fed from three places, none of which
waits on anything:

- ``on_record(record)``: the chunk loop's thread, once per chunk: latencies, decisions,
  deadline misses, degradations, tokens, playback cuts. A few metric updates.
- ``on_transition(item, old, reason)``: a ``Journal.watchers`` entry (the harness's
  thread): transitions by target state.
- ``set_device`` / ``on_device_event``: device states pushed by their owner.

What already lives elsewhere is read when Prometheus scrapes, never polled: work items
by state (``journal.counts()``), the MQTT connection and counters (``transport.stats``),
device states from ``watch_device`` providers. ``docs/metrics.md`` lists every metric.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from venus import __version__
from venus.capabilities.mqtt_transport import MqttStats, MqttTransport
from venus.daemon.frontend.timeline import DEGRADATIONS, STAGES, ChunkRecord, Decision
from venus.daemon.harness.item import WorkItem
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State
from venus.errors import VenusError
from venus.hw.events import DeviceLost, DeviceRestored, HwEvent, Overrun, Underflow

__all__ = ["DEVICE_STATES", "LATENCY_BUCKETS_S", "MQTT_COUNTERS", "Metrics"]

log = logging.getLogger(__name__)

# 1 ms .. 2 s: a stage takes milliseconds, a chunk's total up to its period (~1 s) and
# past it when the deadline is missed.
LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
DECISIONS: tuple[Decision, ...] = ("listen", "speak", "turn_eos")
# Every state a device reports (hw.camera.CameraState; the microphone and speaker use a
# subset). One series per state, 1 for the current one, so an alert needs no absent().
DEVICE_STATES = ("disabled", "stopped", "opening", "running", "lost", "ended")
UNKNOWN = "unknown"  # a state provider failed
# MqttStats field -> (metric name without _total, help)
MQTT_COUNTERS: dict[str, tuple[str, str]] = {
    "calls": ("venus_mqtt_calls", "Calls published to MQTT workers."),
    "no_provider": ("venus_mqtt_no_provider", "Calls answered at once: no worker or no broker."),
    "accepted": ("venus_mqtt_replies_accepted", "Worker replies accepted."),
    "dropped": ("venus_mqtt_replies_dropped", "Worker replies dropped (stray, malformed, late)."),
    "invalid_output": ("venus_mqtt_invalid_output", "Results outside the contract's schema."),
    "lost": ("venus_mqtt_workers_lost", "Workers lost with calls in flight."),
    "connects": ("venus_mqtt_connects", "Connections made to the broker (reconnects too)."),
}
SAMPLES_PER_S = 16_000  # Overrun.lost_samples are counted at 16 kHz


class Metrics:
    """The daemon's metrics. ``text()`` is the exposition a scrape returns.

    ``process_metrics``: also export ``process_*`` (CPU, memory, fds; Linux only) and
    ``python_info`` from prometheus-client's collectors.
    """

    def __init__(self, *, version: str = __version__, process_metrics: bool = True) -> None:
        self.registry = reg = CollectorRegistry()
        self._lock = threading.Lock()  # guards the fields below
        self._chunks = 0
        self._last_chunk_at = time.monotonic()  # creation counts as the last progress
        self._journal: Journal | None = None
        self._mqtt: MqttTransport | None = None
        self._device_states: dict[str, str] = {}
        self._device_providers: dict[str, Callable[[], str]] = {}

        Info("venus_build", "The running venus.", registry=reg).info({"version": version})
        stage = Histogram(
            "venus_chunk_stage_seconds",
            "Wall time of one stage of a chunk.",
            ["stage"],
            buckets=LATENCY_BUCKETS_S,
            registry=reg,
        )
        self._stage: dict[str, Histogram] = {s: stage.labels(stage=s) for s in STAGES}
        self._total = Histogram(
            "venus_chunk_seconds",
            "Wall time of a chunk, all its stages.",
            buckets=LATENCY_BUCKETS_S,
            registry=reg,
        )
        self._chunks_total = Counter("venus_chunks", "Chunks run.", registry=reg)
        self._misses = Counter(
            "venus_chunk_deadline_misses",
            "Chunks not done within one chunk period of their boundary.",
            registry=reg,
        )
        decisions = Counter(
            "venus_chunk_decisions", "Chunks by the model's decision.", ["decision"], registry=reg
        )
        self._decisions = {d: decisions.labels(decision=d) for d in DECISIONS}
        degraded = Counter(
            "venus_chunks_degraded",
            "Chunks that left something out to keep up, by what.",
            ["degradation"],
            registry=reg,
        )
        self._degraded: dict[str, Counter] = {
            d: degraded.labels(degradation=d) for d in DEGRADATIONS
        }
        self._context = Gauge(
            "venus_context_tokens", "Tokens in the backbone context.", registry=reg
        )
        self._evicted = Counter(
            "venus_context_evicted_tokens", "Tokens evicted from the context.", registry=reg
        )
        self._speech = Counter(
            "venus_speech_tokens", "Speech (S3, 25 Hz) tokens decoded.", registry=reg
        )
        self._text = Counter("venus_text_tokens", "Text tokens decoded.", registry=reg)
        self._cuts = Counter(
            "venus_playback_cuts", "Chunks in which playback was cut (barge-in).", registry=reg
        )
        self._memory_bytes = Gauge(
            "venus_memory_bytes", "Bytes in the long-session memory store.", registry=reg
        )
        self._memory_entries = Gauge(
            "venus_memory_entries", "Entries in the long-session memory store.", registry=reg
        )
        self._recalled = Counter(
            "venus_memory_recalled",
            "Memory entries put back into the context.",
            ["kind"],
            registry=reg,
        )
        self._last_chunk = Gauge(
            "venus_last_chunk_timestamp_seconds",
            "Unix time the last chunk was recorded (0: none yet).",
            registry=reg,
        )
        transitions = Counter(
            "venus_work_item_transitions",
            "Work-item transitions, by the state entered.",
            ["to"],
            registry=reg,
        )
        self._transitions = {s: transitions.labels(to=s.value) for s in State}
        self._device_losses = Counter(
            "venus_device_losses", "Times a device was lost.", ["device"], registry=reg
        )
        self._lost_audio = Counter(
            "venus_audio_overrun_seconds",
            "Audio lost to overruns (the consumer fell behind).",
            ["device"],
            registry=reg,
        )
        self._underflows = Counter(
            "venus_audio_underflows",
            "Times the output device ran dry (the audio thread came too late): a gap heard.",
            ["device"],
            registry=reg,
        )
        reg.register(_ScrapeTime(self))
        if process_metrics:
            ProcessCollector(registry=reg)
            PlatformCollector(registry=reg)

    # --- the chunk loop -------------------------------------------------------------------
    def on_record(self, record: ChunkRecord) -> None:
        """A chunk ran (the loop's thread): a handful of metric updates, nothing more."""
        for stage, ms in record.latency_ms.items():
            child = self._stage.get(stage)
            if child is not None:
                child.observe(ms / 1000)
        self._total.observe(record.latency_ms["total"] / 1000)
        self._chunks_total.inc()
        self._decisions[record.decision].inc()
        if record.deadline_missed:
            self._misses.inc()
        for what in record.degraded:
            self._degraded[what].inc()
        self._context.set(record.context_tokens)
        self._evicted.inc(record.evicted_tokens)
        self._speech.inc(record.speech_tokens)
        self._text.inc(record.text_tokens)
        if record.playback_stopped:
            self._cuts.inc()
        if record.memory is not None:
            self._memory_bytes.set(record.memory.bytes)
            self._memory_entries.set(record.memory.entries)
            for r in record.memory.recalled:
                self._recalled.labels(kind=r.kind).inc()
        self._last_chunk.set(time.time())
        with self._lock:
            self._chunks += 1
            self._last_chunk_at = time.monotonic()

    @property
    def chunks(self) -> int:
        with self._lock:
            return self._chunks

    def seconds_since_chunk(self) -> float:
        """Since the last ``on_record`` (or since this was made): a stall measure."""
        with self._lock:
            return time.monotonic() - self._last_chunk_at

    # --- work items -----------------------------------------------------------------------
    def attach_journal(self, journal: Journal) -> None:
        """Count the journal's transitions and export its items by state at each scrape."""
        with self._lock:
            self._journal = journal
        if self.on_transition not in journal.watchers:
            journal.watchers.append(self.on_transition)

    def detach_journal(self) -> None:
        with self._lock:
            journal, self._journal = self._journal, None
        if journal is not None and self.on_transition in journal.watchers:
            journal.watchers.remove(self.on_transition)

    def on_transition(self, item: WorkItem, _old: State | None, _reason: str) -> None:
        """A ``Journal.watchers`` entry (the writer's thread)."""
        self._transitions[item.state].inc()

    def work_items(self) -> dict[str, int] | None:
        """Items by state, from the journal now; None without one (or once it is closed)."""
        with self._lock:
            journal = self._journal
        if journal is None:
            return None
        try:
            return {s.value: n for s, n in journal.counts().items()}
        except VenusError as e:  # closed at shutdown, or unreadable: skip, do not fail
            log.debug("work items not exported: %s", e)
            return None

    # --- MQTT -----------------------------------------------------------------------------
    def watch_mqtt(self, transport: MqttTransport) -> None:
        """Export the transport's connection and ``stats`` at each scrape."""
        with self._lock:
            self._mqtt = transport

    def mqtt(self) -> dict[str, Any] | None:
        """``{"connected": bool, <MqttStats fields>}``; None when no transport is watched."""
        with self._lock:
            transport = self._mqtt
        if transport is None:
            return None
        stats: MqttStats = transport.stats
        return {"connected": transport.connected, **asdict(stats)}

    # --- devices --------------------------------------------------------------------------
    def set_device(self, name: str, state: str) -> None:
        """Record a device's state (``microphone``, ``speaker``, ``camera``)."""
        with self._lock:
            self._device_states[name] = state

    def watch_device(self, name: str, state: Callable[[], str]) -> None:
        """Read a device's state at each scrape (``lambda: camera.state``); wins over
        ``set_device`` for that name."""
        with self._lock:
            self._device_providers[name] = state

    def on_device_event(self, event: HwEvent) -> None:
        """An ``hw`` ``EventSink``: lost -> ``lost``, restored -> ``running``; overruns
        and underflows are counted. Chain it after the loop's own sink."""
        if isinstance(event, DeviceLost):
            self._device_losses.labels(device=event.device).inc()
            self.set_device(event.device, "lost")
        elif isinstance(event, DeviceRestored):
            self.set_device(event.device, "running")
        elif isinstance(event, Overrun):
            self._lost_audio.labels(device=event.device).inc(event.lost_samples / SAMPLES_PER_S)
        elif isinstance(event, Underflow):
            self._underflows.labels(device=event.device).inc(event.count)

    def devices(self) -> dict[str, str]:
        """Every device's state now: the providers', else what was set."""
        with self._lock:
            states = dict(self._device_states)
            providers = dict(self._device_providers)
        for name, provider in providers.items():
            try:
                states[name] = provider()
            except Exception:  # a device being torn down must not fail the scrape
                log.debug("device %s: state unreadable", name, exc_info=True)
                states[name] = UNKNOWN
        return states

    # --- exposition -----------------------------------------------------------------------
    def text(self) -> bytes:
        """The Prometheus text exposition of everything."""
        return generate_latest(self.registry)


class _ScrapeTime(Collector):
    """What is read when Prometheus scrapes: work items, MQTT, device states."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return ()  # the families vary with what is attached; nothing to check up front

    def collect(self) -> Iterable[Metric]:
        yield from _work_items(self.metrics.work_items())
        yield from _mqtt(self.metrics.mqtt())
        yield from _devices(self.metrics.devices())


def _work_items(counts: Mapping[str, int] | None) -> Iterable[Metric]:
    if counts is None:
        return
    family = GaugeMetricFamily("venus_work_items", "Work items by state.", labels=["state"])
    for state, n in counts.items():
        family.add_metric([state], n)
    yield family


def _mqtt(snapshot: Mapping[str, Any] | None) -> Iterable[Metric]:
    if snapshot is None:
        return
    yield GaugeMetricFamily(
        "venus_mqtt_connected", "1 while connected to the MQTT broker.", value=snapshot["connected"]
    )
    for field, (name, doc) in MQTT_COUNTERS.items():
        yield CounterMetricFamily(name, doc, value=snapshot[field])


def _devices(states: Mapping[str, str]) -> Iterable[Metric]:
    if not states:
        return
    family = GaugeMetricFamily(
        "venus_device_state", "1 for a device's current state.", labels=["device", "state"]
    )
    for device, current in sorted(states.items()):
        known = DEVICE_STATES if current in DEVICE_STATES else (*DEVICE_STATES, current)
        for state in known:
            family.add_metric([device, state], float(state == current))
    yield family
