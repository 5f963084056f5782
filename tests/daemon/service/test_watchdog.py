"""The progress watchdog: WATCHDOG=1 only when the loop progressed since the last ping."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from venus.daemon.service.notify import Notifier
from venus.daemon.service.watchdog import ProgressWatchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Pings(Notifier):
    """A notifier that counts instead of sending."""

    def __init__(self) -> None:
        super().__init__(None)
        self.pings = 0

    def watchdog(self) -> bool:
        self.pings += 1
        return True


def test_pings_only_after_progress_and_reports_a_stall_once() -> None:
    clock, pings, changes = Clock(), Pings(), []
    w = ProgressWatchdog(pings, 2.0, on_change=changes.append, clock=clock)
    w.start()
    assert not w.tick() and pings.pings == 0  # no chunk yet
    w.progress()
    assert w.tick() and pings.pings == 1
    assert not w.tick() and pings.pings == 1  # nothing since the last ping
    clock.now += 0.5
    assert not w.tick() and changes == []  # withheld, but not yet a stall
    clock.now += 1.0
    assert not w.tick() and not w.tick()
    assert changes == [True]  # reported once
    assert w.stalled_s() == 1.5
    w.progress()
    assert w.stalled_s() == 0.0
    assert w.tick() and pings.pings == 2 and changes == [True, False]


def test_disabled_it_never_pings_but_still_measures_the_stall() -> None:
    clock, pings = Clock(), Pings()
    w = ProgressWatchdog(pings, 2.0, enabled=False, clock=clock)
    w.progress()
    assert not w.tick() and pings.pings == 0
    clock.now += 7.0
    assert w.stalled_s() == 7.0
    w.set_enabled(True)
    w.progress()
    assert w.tick() and pings.pings == 1


def test_the_thread_pings_a_real_socket_while_progress_is_marked(tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(2.0)
    w = ProgressWatchdog(Notifier(str(tmp_path / "notify")), 0.1)
    w.start()
    try:
        for _ in range(3):
            w.progress()
            assert sock.recv(64) == b"WATCHDOG=1"
        sock.settimeout(0.3)  # three intervals without progress: silence
        with pytest.raises(TimeoutError):
            sock.recv(64)
    finally:
        w.stop()
        sock.close()
