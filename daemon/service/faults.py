"""Fault injection for the service tests: environment variables read by ``venus run``'s
live path only, never set in a unit. They exist so a test can make the real daemon fail
the way the watchdog guards against.

``VENUS_FAULT_STALL_S=SECONDS`` (or ``SECONDS@CHUNK``): once chunk ``CHUNK`` (default 3)
has been recorded, the loop's own thread blocks for SECONDS at its next chunk boundary,
as an engine call that hangs would hold it. The microphone keeps capturing meanwhile
(its ring overruns; the loop then skips the lost chunk indices), no chunk is recorded,
so the watchdog's pings stop. A stop request (SIGTERM) ends the stall early.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from venus.daemon.frontend.session import Frontend
from venus.daemon.frontend.timeline import ChunkRecord
from venus.errors import ConfigError

log = logging.getLogger(__name__)

STALL_ENV = "VENUS_FAULT_STALL_S"
STALL_AT_CHUNK = 3


class StallFault:
    def __init__(self, stall_s: float, at_chunk: int, stop: threading.Event) -> None:
        self.stall_s, self.at_chunk, self.stop = stall_s, at_chunk, stop
        self._frontend: Frontend | None = None
        self._done = False

    @classmethod
    def from_env(
        cls, stop: threading.Event, environ: Mapping[str, str] = os.environ
    ) -> StallFault | None:
        value = environ.get(STALL_ENV, "")
        if not value:
            return None
        seconds, _, chunk = value.partition("@")
        try:
            fault = cls(float(seconds), int(chunk) if chunk else STALL_AT_CHUNK, stop)
        except ValueError:
            raise ConfigError(
                f"{STALL_ENV}={value!r}: use SECONDS or SECONDS@CHUNK (a test hook; unset it)"
            ) from None
        log.warning(
            "fault injection (%s): the loop will stall %.1f s after chunk %d",
            STALL_ENV,
            fault.stall_s,
            fault.at_chunk,
        )
        return fault

    def attach(self, frontend: Frontend) -> None:
        self._frontend = frontend

    def on_record(self, record: ChunkRecord) -> None:
        if self._done or record.index < self.at_chunk or self._frontend is None:
            return
        self._done = True
        self._frontend.loop.call_soon(self._stall)

    def _stall(self) -> None:
        log.warning("fault injection: stalling the chunk loop for %.1f s", self.stall_s)
        self.stop.wait(self.stall_s)
        log.warning("fault injection: the stall is over")
