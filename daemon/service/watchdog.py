"""The systemd watchdog, fed only while the chunk loop makes progress.

The live run marks progress once per chunk record (``progress``: a chunk went through
the step and token-to-wave). A thread wakes every half watchdog interval and sends
``WATCHDOG=1`` only if progress was marked since its previous wake, so a loop that is
stuck (an engine call that never returns, a deadlock) stops the pings and systemd
restarts the service after ``WatchdogSec``. A lost microphone does not count as stuck:
it delivers silence and the loop keeps running.

``stalled_s`` (seconds since the last progress) is for ``/healthz``. ``[service]
watchdog = false`` keeps the bookkeeping and never pings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from venus.daemon.service.notify import Notifier

log = logging.getLogger(__name__)


def _nothing(_stalled: bool) -> None:
    return None


class ProgressWatchdog:
    """``interval_s``: systemd's (``notify.watchdog_interval_s``); None: no pings."""

    def __init__(
        self,
        notifier: Notifier,
        interval_s: float | None,
        enabled: bool = True,
        on_change: Callable[[bool], None] = _nothing,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_change(stalled)``: called from the watchdog's thread when the pings stop
        (True) and when progress resumes (False)."""
        self.notifier, self.interval_s, self.enabled = notifier, interval_s, True
        self.on_change, self.clock = on_change, clock
        self._lock = threading.Lock()
        self._last = clock()  # the last progress (or the start)
        self._progressed = False  # since the previous tick
        self._stalled = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.set_enabled(enabled)

    def set_enabled(self, enabled: bool) -> None:
        """``[service] watchdog``: False keeps the bookkeeping and never pings."""
        self.enabled = enabled
        if self.interval_s is not None and not enabled:
            log.warning(
                "service.watchdog is false but systemd expects WATCHDOG=1 every %.0f s "
                "(WatchdogSec): it will restart venus; set WatchdogSec=0 in the unit too",
                self.interval_s,
            )

    def progress(self) -> None:
        """A chunk went through (any thread)."""
        with self._lock:
            self._last = self.clock()
            self._progressed = True

    def stalled_s(self) -> float:
        """Seconds since the last progress (since ``start``, or since this object was made,
        before the first)."""
        with self._lock:
            return max(0.0, self.clock() - self._last)

    def tick(self) -> bool:
        """One wake of the thread: ping if progress was marked since the last. -> pinged."""
        with self._lock:
            progressed, self._progressed = self._progressed, False
        if progressed:
            if self._stalled:
                self._stalled = False
                log.info("the chunk loop is running again; watchdog pings resume")
                self.on_change(False)
            return self.notifier.watchdog() if self.enabled else False
        if not self._stalled and self.interval_s is not None:
            stalled = self.stalled_s()
            if stalled >= self.interval_s / 2:
                self._stalled = True
                log.warning(
                    "no chunk for %.1f s: watchdog pings withheld; systemd restarts venus "
                    "if none comes within %.0f s (WatchdogSec)",
                    stalled,
                    self.interval_s,
                )
                self.on_change(True)
        return False

    def start(self) -> None:
        """From now on (READY=1), ping every half interval while progress is marked."""
        with self._lock:
            self._last = self.clock()
        if self.interval_s is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="venus-watchdog", daemon=True)
        self._thread.start()
        log.info(
            "systemd watchdog: %.0f s; pinging every %.1f s while chunks run%s",
            self.interval_s,
            self.interval_s / 2,
            "" if self.enabled else " (off: service.watchdog = false)",
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        assert self.interval_s is not None
        while not self._stop.wait(self.interval_s / 2):
            self.tick()
