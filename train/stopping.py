"""A training run stopped by a signal ends its step and saves its state first.

``venus train`` takes minutes to hours and resumes from its saved state, but it saves
only every ``train.checkpoint_every`` steps (250 steps, half an hour, in the shipped
recipe on two cores). Stopped by Ctrl-C or ``systemctl stop``/``kill`` between two of
those, a run lost everything since the last. Inside ``stop_requests()`` the first
SIGINT or SIGTERM only sets ``signal``: the loop ends the step it is in, saves, and
returns; a second one acts as it normally would (Ctrl-C twice stops at once).

Handlers can be set only from the main thread; elsewhere (a run started from a worker
thread) the signals keep their usual meaning.
"""

from __future__ import annotations

import signal as signals
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

CAUGHT = (signals.SIGINT, signals.SIGTERM)


class StopRequest:
    """The signal that asked the run to stop (``signal.Signals``), None until one did."""

    def __init__(self) -> None:
        self.signal: signals.Signals | None = None
        self._before: dict[int, Any] = {}

    def _caught(self, signum: int, _frame: FrameType | None) -> None:
        # no output here: a handler that prints can land inside a print of the main
        # thread's, and buffered streams refuse that ("reentrant call")
        self.signal = signals.Signals(signum)
        for s, handler in self._before.items():  # the next one acts as before
            signals.signal(s, handler)


@contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """Catch the first SIGINT or SIGTERM while the block runs (module doc)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    request._before = {s: signals.getsignal(s) for s in CAUGHT}
    for s in CAUGHT:
        signals.signal(s, request._caught)
    try:
        yield request
    finally:
        for signum, handler in request._before.items():
            signals.signal(signum, handler)
