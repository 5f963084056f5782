"""Progress of a run over several policies (or any named groups), as one line on stderr.

``eval duplex: model 40/167, vad 12/167, always-continue 0/167 (52 s, ETA 6m10s)``: redrawn
in place on a terminal, printed every ``LINE_EVERY_S`` otherwise, and once at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TextIO

__all__ = ["LINE_EVERY_S", "PolicyProgress"]

LINE_EVERY_S = 5.0  # progress lines when the stream is not a terminal


class PolicyProgress:
    """Samples done per policy, out of ``total`` each."""

    def __init__(
        self,
        stream: TextIO,
        policies: Sequence[str],
        total: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        tty: bool | None = None,
        name: str = "eval duplex",
    ) -> None:
        self.stream, self.clock, self.total, self.name = stream, clock, total, name
        self.tty = stream.isatty() if tty is None else tty
        self.done = dict.fromkeys(policies, 0)
        self.started = self.shown = clock()

    def __call__(self, policy: str) -> None:
        """One more sample of ``policy`` done."""
        self.done[policy] += 1
        self._show(force=False)

    def finish(self) -> None:
        self._show(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def line(self) -> str:
        counts = ", ".join(f"{p} {n}/{self.total}" for p, n in self.done.items())
        elapsed = self.clock() - self.started
        done, todo = sum(self.done.values()), self.total * len(self.done)
        eta = f", ETA {elapsed / done * (todo - done):.0f} s" if done and done < todo else ""
        return f"{self.name}: {counts} ({elapsed:.0f} s{eta})"

    def _show(self, force: bool) -> None:
        now = self.clock()
        if self.tty:
            self.stream.write("\r" + self.line())
        elif force or now - self.shown >= LINE_EVERY_S:
            self.stream.write(self.line() + "\n")
        else:
            return
        self.shown = now
        self.stream.flush()
