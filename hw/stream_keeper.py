"""Keeps one audio stream alive: a watchdog that notices a lost device and reopens it.

A stream runs once its callbacks span ``RUNNING_AFTER_S`` (an idle PulseAudio null sink
calls back once, for the prefill, then waits ~2 s). It is lost when the backend says it
ended (PulseAudio killed: PortAudio's stream finishes at once), when its callbacks stop for
``stall_s`` while it runs, or when it does not run within ``startup_s`` of opening. The
keeper then closes it, emits ``DeviceLost`` and retries the open with exponential backoff
(0.5 s, doubling to 5 s). A retry first opens with PortAudio's current device list and
rescans (re-initialises PortAudio, see ``backends``) only if that fails. The device counts
as restored, with ``DeviceRestored(down_s)``, once the reopened stream runs.

The same thread ticks the owner every ``TICK_S`` (the microphone fills silence and reports
overruns there), so events are never sent from the audio callback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from venus.errors import DeviceError
from venus.hw.backends import AudioBackend, StreamHandle
from venus.hw.events import DeviceKind, DeviceLost, DeviceRestored, EventSink

log = logging.getLogger(__name__)

TICK_S = 0.02  # watchdog period; the microphone's silence fill has this granularity
STARTUP_S = 5.0  # an idle PulseAudio null sink takes about 2 s to run a new stream
STALL_S = 1.0  # no callback for this long while running: lost
RUNNING_AFTER_S = 0.1  # callbacks for this long: the stream runs (not just its prefill)
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0
StreamState = Literal["stopped", "opening", "running", "lost"]  # as CameraState's


@dataclass(frozen=True)
class KeeperHooks:
    """What the keeper asks of its device (called on the keeper's thread)."""

    open_stream: Callable[[], StreamHandle]  # resolve the device and open it, not started
    on_lost: Callable[[float], None]  # argument: time.monotonic() of the last callback
    on_restored: Callable[[], None]
    on_tick: Callable[[float], None]  # argument: time.monotonic() now


class StreamKeeper:
    """Owns the stream handle and the watchdog thread of one microphone or speaker."""

    def __init__(
        self,
        kind: DeviceKind,
        name: str,
        backend: AudioBackend,
        hooks: KeeperHooks,
        on_event: EventSink,
        *,
        stall_s: float = STALL_S,
        startup_s: float = STARTUP_S,
        max_backoff_s: float = BACKOFF_MAX_S,
    ) -> None:
        self.kind, self.name = kind, name
        self._backend, self._hooks, self._on_event = backend, hooks, on_event
        self._stall_s, self._startup_s, self._max_backoff_s = stall_s, startup_s, max_backoff_s
        self._handle: StreamHandle | None = None
        self._opened_at_s = 0.0
        self._first_beat_s: float | None = None  # first callback of the current stream
        self._last_beat_s = 0.0
        self._running = threading.Event()  # callbacks of the current stream span RUNNING_AFTER_S
        self._lost_at_s: float | None = None
        self._retry_at_s = 0.0
        self._backoff_s = BACKOFF_FIRST_S
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lost(self) -> bool:
        return self._lost_at_s is not None

    @property
    def state(self) -> StreamState:
        """``stopped`` (not started), ``opening`` (opened, not running yet), ``running``,
        or ``lost`` (being reopened)."""
        if self._lost_at_s is not None:
            return "lost"
        if self._thread is None:
            return "stopped"
        return "running" if self._running.is_set() else "opening"

    @property
    def latency_s(self) -> float:
        handle = self._handle
        return handle.latency_s if handle is not None else 0.0

    def beat(self) -> None:
        """Called by the audio callback on every block: cheap, never blocks."""
        now = self._last_beat_s = time.monotonic()
        if self._first_beat_s is None:
            self._first_beat_s = now
        elif now - self._first_beat_s >= RUNNING_AFTER_S and not self._running.is_set():
            self._running.set()

    def start(self) -> None:
        """Open the device now (``DeviceError`` if it cannot be), then watch it."""
        if self._thread is not None:
            return
        self._install(self._open_fresh(), time.monotonic())
        self._lost_at_s = None
        self._backoff_s = BACKOFF_FIRST_S
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"venus-{self.kind}-keeper", daemon=True
        )
        self._thread.start()

    def wait_running(self, timeout_s: float) -> bool:
        """Wait until the stream runs, not just its first (prefill) callbacks: an idle
        PulseAudio sink takes ~2 s to start consuming."""
        return self._running.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            if self._thread.is_alive():
                log.warning("%s %r: watchdog still busy after 10 s", self.kind, self.name)
            self._thread = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._lost_at_s = None

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            try:
                self._watch(now)
                self._hooks.on_tick(now)
            except Exception:  # the keeper is the supervisor of its stream: never die
                log.exception("%s %r: watchdog tick failed", self.kind, self.name)

    def _watch(self, now: float) -> None:
        handle = self._handle
        if handle is not None:
            reason = self._fault(handle, now)
            if reason is not None:
                self._lose(reason, now)
            elif self._lost_at_s is not None and self._running.is_set():
                down_s = now - self._lost_at_s
                self._lost_at_s = None
                self._backoff_s = BACKOFF_FIRST_S
                log.info("%s %r restored after %.1f s", self.kind, self.name, down_s)
                self._hooks.on_restored()
                self._on_event(DeviceRestored(self.kind, self.name, down_s, now))
        if self._handle is None and now >= self._retry_at_s:
            try:
                self._install(self._open_fresh(), now)
            except DeviceError as e:
                self._schedule_retry(now)
                log.info(
                    "%s %r: reopen failed (%s); next try in %.1f s",
                    self.kind,
                    self.name,
                    e,
                    self._retry_at_s - now,
                )

    def _fault(self, handle: StreamHandle, now: float) -> str | None:
        if not handle.alive():
            return "the stream stopped (device or sound server gone)"
        if not self._running.is_set():
            if now - self._opened_at_s > self._startup_s:
                return f"not running {self._startup_s:.1f} s after opening"
            return None
        if now - self._last_beat_s > self._stall_s:
            return f"no audio for {now - self._last_beat_s:.1f} s"
        return None

    def _lose(self, reason: str, now: float) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._running.clear()
        self._schedule_retry(now)
        if self._lost_at_s is not None:
            return  # a reopened stream that never ran: still the same outage
        self._lost_at_s = now
        log.warning(
            "%s %r lost: %s; retrying in %.1f s",
            self.kind,
            self.name,
            reason,
            self._retry_at_s - now,
        )
        self._hooks.on_lost(self._last_beat_s if self._first_beat_s is not None else now)
        self._on_event(DeviceLost(self.kind, self.name, reason, now))

    def _schedule_retry(self, now: float) -> None:
        self._retry_at_s = now + self._backoff_s
        self._backoff_s = min(2 * self._backoff_s, self._max_backoff_s)

    def _open_fresh(self) -> StreamHandle:
        """Open with the current device list; rescan once if the device is not in it."""
        seen = self._backend.generation()
        try:
            return self._open_started()
        except DeviceError as first:
            log.debug("%s %r: open failed (%s); rescanning devices", self.kind, self.name, first)
        self._backend.rescan(seen)
        return self._open_started()

    def _open_started(self) -> StreamHandle:
        handle = self._hooks.open_stream()
        self._first_beat_s = None
        self._running.clear()
        handle.start()
        return handle

    def _install(self, handle: StreamHandle, now: float) -> None:
        self._opened_at_s = now
        self._handle = handle
