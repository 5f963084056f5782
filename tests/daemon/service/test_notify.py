"""sd_notify over a real datagram socket the test owns, as systemd's would be."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from venus.daemon.service.notify import Notifier, extending_timeout, watchdog_interval_s

WAIT_S = 5.0


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(WAIT_S)
    yield sock, path
    sock.close()


def receive(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


def test_messages_arrive_as_sent(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    n = Notifier(path)
    assert n.enabled
    assert n.status("loading engines")
    n.extend_timeout(30)
    n.ready("listening")
    n.watchdog()
    n.reloading()
    n.stopping()
    got = [receive(sock) for _ in range(6)]
    assert got[:4] == [
        "STATUS=loading engines",
        "EXTEND_TIMEOUT_USEC=30000000",
        "READY=1\nSTATUS=listening",
        "WATCHDOG=1",
    ]
    reloading = got[4].split("\n")
    assert reloading[:2] == ["RELOADING=1", "STATUS=reloading the configuration"]
    assert reloading[2].startswith("MONOTONIC_USEC=") and int(reloading[2].split("=")[1]) > 0
    assert got[5] == "STOPPING=1\nSTATUS=stopping"
    n.close()


def test_an_abstract_socket_address_starts_with_at() -> None:
    name = f"venus-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(WAIT_S)
    try:
        assert Notifier.from_env({"NOTIFY_SOCKET": "@" + name}).ready()
        assert receive(sock) == "READY=1"
    finally:
        sock.close()


def test_without_a_socket_every_call_is_a_no_op() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert not n.ready("listening")
    assert not n.watchdog()
    with extending_timeout(n, every_s=0.01):
        pass


def test_a_failing_send_warns_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = Notifier(str(tmp_path / "nobody-listens"))
    with caplog.at_level(logging.DEBUG, "venus.daemon.service.notify"):
        assert not n.watchdog()
        assert not n.watchdog()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "sd_notify to" in warnings[0].getMessage()


def test_extending_timeout_asks_again_and_again_until_the_block_ends(
    listener: tuple[socket.socket, str],
) -> None:
    sock, path = listener
    with extending_timeout(Notifier(path), by_s=2.5, every_s=0.05):
        got = [receive(sock) for _ in range(3)]
    assert got == ["EXTEND_TIMEOUT_USEC=2500000"] * 3
    sock.settimeout(0.2)
    while True:  # what was in flight when the block ended, then nothing
        try:
            receive(sock)
        except TimeoutError:
            break


def test_the_watchdog_interval_follows_sd_watchdog_enabled() -> None:
    me = os.getpid()
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}) == 30.0  # no PID: ours
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(me)}) == 2.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(me + 1)}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}) is None


def test_extending_stops_after_its_limit(
    listener: tuple[socket.socket, str], caplog: pytest.LogCaptureFixture
) -> None:
    sock, path = listener
    with extending_timeout(Notifier(path), every_s=0.02, max_s=0.1):
        got = receive(sock)
        sock.settimeout(0.3)
        while True:  # a few, then none although the block still runs
            try:
                receive(sock)
            except TimeoutError:
                break
    assert got.startswith("EXTEND_TIMEOUT_USEC=")
    assert "no more EXTEND_TIMEOUT_USEC" in caplog.text
