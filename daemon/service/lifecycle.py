"""The live daemon's life as systemd sees it: start-up, READY, watchdog, reload, stop.

``venus run`` (live) makes one ``Lifecycle`` first thing and installs its signal
handlers, then calls it as it goes::

    starting()       STATUS=loading engines; EXTEND_TIMEOUT_USEC every 10 s until READY
    warming_up()     STATUS=warming up (one chunk of silence through every engine)
    ready(...)       READY=1, STATUS=listening; the watchdog and the reload thread start
    on_record(r)     each chunk: progress for the watchdog
    on_device(e)     a device lost or restored: STATUS says so
    close()          STOPPING=1 if no signal sent it; threads stopped, handlers restored

Signals. SIGTERM / SIGINT: STOPPING=1 and ``stop`` is set; the loop finishes the chunk
in hand, cuts what is left of a reply, and ``venus run`` then stops the broadcast and the
harness (journal closed, ``offline`` published) and exits 0. A second SIGTERM / SIGINT
while stopping is logged and ignored: stopping goes on in order (systemd's
TimeoutStopSec, or SIGKILL, ends a stop that hangs; the journal is safe either way).
SIGHUP: ``reload.Reloader`` re-reads the file (served once the daemon is ready; a
SIGHUP while starting is remembered).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from types import FrameType
from typing import Any

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.timeline import ChunkRecord
from venus.daemon.service.notify import Notifier, extending_timeout, watchdog_interval_s
from venus.daemon.service.reload import Reloadable, Reloader
from venus.daemon.service.watchdog import ProgressWatchdog
from venus.hw.events import DeviceLost, DeviceRestored, HwEvent

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StatusLine:
    """The STATUS= text: the state, then what is wrong (lost devices, a stalled loop)."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self._lock = threading.RLock()  # re-entered by a signal handler on the main thread
        self._state = "starting"
        self._lost: dict[str, str] = {}  # device -> reason
        self._stalled = False

    def text(self) -> str:
        with self._lock:
            parts = [self._state]
            parts += [f"{d} lost: {why}" for d, why in sorted(self._lost.items())]
            if self._stalled:
                parts.append("chunk loop stalled")
        return "; ".join(parts)

    def state(self, state: str, send: bool = True) -> None:
        with self._lock:
            self._state = state
        if send:
            self.notifier.status(self.text())

    def device(self, event: HwEvent) -> None:
        with self._lock:
            if isinstance(event, DeviceLost):
                self._lost[event.device] = event.reason
            elif isinstance(event, DeviceRestored):
                self._lost.pop(event.device, None)
            else:
                return
        self.notifier.status(self.text())

    def stalled(self, stalled: bool) -> None:
        with self._lock:
            self._stalled = stalled
        self.notifier.status(self.text())


class Lifecycle:
    def __init__(self, notifier: Notifier, watchdog: ProgressWatchdog, status: StatusLine) -> None:
        self.notifier, self.watchdog, self.status = notifier, watchdog, status
        self.stop = threading.Event()  # the loop's: set by SIGTERM / SIGINT
        self.reloader: Reloader | None = None
        self._hup = threading.Event()  # a SIGHUP came before the reloader
        self._starting = ExitStack()
        self._stopping_sent = False
        self._previous: dict[int, Any] = {}

    @classmethod
    def from_env(cls, cfg: VenusConfig, environ: Mapping[str, str] = os.environ) -> Lifecycle:
        notifier = Notifier.from_env(environ)
        status = StatusLine(notifier)
        interval = watchdog_interval_s(environ)
        watchdog = ProgressWatchdog(notifier, interval, cfg.service.watchdog, status.stalled)
        return cls(notifier, watchdog, status)

    # --- signals (the main thread; handlers only set events and send datagrams) -------------
    def install_signals(self) -> None:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_stop)
        self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hup)

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stop.is_set():
            log.warning(
                "%s while stopping: still stopping (playback cut, harness and journal "
                "closing); SIGKILL ends venus at once",
                name,
            )
            return
        log.info("%s: stopping", name)
        self._send_stopping()
        self.stop.set()

    def _on_hup(self, _signum: int, _frame: FrameType | None) -> None:
        if self.stop.is_set():
            return
        log.info("SIGHUP: reloading the configuration")
        self._hup.set()
        if self.reloader is not None:
            self.reloader.request()

    def _send_stopping(self) -> None:
        if not self._stopping_sent:
            self._stopping_sent = True
            self.status.state("stopping", send=False)
            self.notifier.stopping(self.status.text())

    # --- the run -----------------------------------------------------------------------------
    def starting(self) -> None:
        self.status.state("loading engines")
        self._starting.enter_context(extending_timeout(self.notifier))

    def warming_up(self) -> None:
        self.status.state("warming up")

    def ready(
        self, load: Callable[[], VenusConfig], running: VenusConfig, parts: Sequence[Reloadable]
    ) -> None:
        """The engines are warm and the devices open: READY=1, then the watchdog and the
        reload thread. ``load`` re-reads the file for SIGHUP (see ``Reloader``)."""
        self._starting.close()
        self.status.state("listening", send=False)
        self.notifier.ready(self.status.text())
        self.watchdog.start()
        self.reloader = Reloader(load, running, self.notifier, self.status.text)
        self.reloader.start(parts)
        if self._hup.is_set():
            self.reloader.request()

    def on_record(self, _record: ChunkRecord) -> None:
        self.watchdog.progress()

    def on_device(self, event: HwEvent) -> None:
        self.status.device(event)

    def close(self) -> None:
        self._starting.close()
        self._send_stopping()
        self.watchdog.stop()
        if self.reloader is not None:
            self.reloader.stop()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
