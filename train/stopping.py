"""A training run stopped by a signal ends its step and saves its state first.

``venus train`` takes minutes to hours and resumes from its saved state, but it saves
only every ``train.checkpoint_every`` steps (250 steps, half an hour, in the shipped
recipe on two cores). Stopped by Ctrl-C or ``systemctl stop``/``kill`` between two of
those, a run lost everything since the last. Inside ``with StopRequest()`` the first
SIGINT or SIGTERM only sets ``signal``: the loop ends the step it is in, saves, and
returns; a second one acts as it normally would (Ctrl-C twice stops at once).

Handlers can be set only from the main thread; elsewhere (a run started from a worker
thread) the signals keep their usual meaning.
"""

from __future__ import annotations

import signal as signals
import threading
from types import FrameType, TracebackType
from typing import Any

CAUGHT = (signals.SIGINT, signals.SIGTERM)


class StopRequest:
    """Catch the first SIGINT or SIGTERM while the ``with`` block runs (module doc).

    ``signal`` is the signal that asked the run to stop (``signal.Signals``), None
    until one did.
    """

    def __init__(self) -> None:
        self.signal: signals.Signals | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._before = {s: signals.getsignal(s) for s in CAUGHT}
            for s in CAUGHT:
                signals.signal(s, self._caught)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._restore()

    def _caught(self, signum: int, _frame: FrameType | None) -> None:
        # no output here: a handler that prints can land inside a print of the main
        # thread's, and buffered streams refuse that ("reentrant call")
        self.signal = signals.Signals(signum)
        self._restore()  # the next one acts as before

    def _restore(self) -> None:
        for signum, handler in self._before.items():
            signals.signal(signum, handler)
