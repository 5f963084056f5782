"""``venus run`` as systemd runs it (``Type=notify``, ``WatchdogSec=``), as a real process.

The test plays systemd's part: it owns the notification socket (an abstract one, as
systemd's ``@``-addresses can be), sets ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC``, and
``WATCHDOG_PID`` to the daemon's own pid (a ``sh -c 'WATCHDOG_PID=$$ exec venus ...'``
wrapper, so the daemon's sd_watchdog_enabled(3) check is exercised). The daemon runs
live on the private PulseAudio null sink, on the shipped tiny engines, with a broker.

The stall. Nothing outside the process can honestly block the chunk loop: a lost or
silent microphone still delivers chunks (``hw/audio.py`` fills silence), and pausing the
whole process (SIGSTOP) would stop the watchdog thread too, proving nothing about it.
So the daemon's documented test hook ``VENUS_FAULT_STALL_S`` (``daemon/service/faults.py``,
read by the live path only) blocks the loop's own thread for a few seconds after chunk
3, as a hung engine call would: the microphone keeps capturing, no chunk completes, and
the watchdog must withhold ``WATCHDOG=1`` until chunks run again.

Then a SIGHUP (a reloadable and a restart-only change), a work item through the same
journal (``venus call``), and SIGTERM: ``STOPPING=1``, ``offline`` on the broker, exit
0, and a journal that passes its consistency check with the item in it.
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from importlib.resources import as_file, files
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from support.services import Broker

from venus.capabilities.mqtt_socket import stop_loop
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State

WATCHDOG_S = 3.0  # WATCHDOG_USEC: pings every 1.5 s while chunks (1 s each) run
STALL_S = 6.0
START_S = 120.0  # engines, warm-up and devices on two busy cores, with room
WAIT_S = 30.0


class Systemd:
    """The notification socket's end: every datagram with the time it arrived."""

    def __init__(self) -> None:
        self.address = f"@venus-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.address[1:])
        self.sock.settimeout(0.2)
        self.got: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.got.put((time.monotonic(), data.decode()))

    def until(self, want: str, timeout_s: float = WAIT_S) -> float:
        """Wait for a message holding the line ``want`` (or starting ``STATUS=`` + it, for
        a STATUS); -> when it arrived. Everything is kept in ``seen``."""
        end = time.monotonic() + timeout_s
        while True:
            at, message = self.got.get(timeout=max(0.01, end - time.monotonic()))
            self.seen.append((at, message))
            if any(line == want or line.startswith(want) for line in message.split("\n")):
                return at

    def pings(self, start: float, end: float) -> list[float]:
        return [t for t, m in self.seen if m == "WATCHDOG=1" and start <= t <= end]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.sock.close()


class NodeStatus:
    """The daemon's ``status`` topic on the broker (``online`` / ``offline``)."""

    def __init__(self, broker: Broker) -> None:
        self.got: queue.Queue[bytes] = queue.Queue()
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="status-watcher")
        c.on_message = lambda _c, _u, m: self.got.put(bytes(m.payload))
        c.connect(broker.host, broker.port)
        c.subscribe("venus/v1/nodes/venus/status", qos=1)
        c.loop_start()
        self.client = c

    def until(self, want: bytes, timeout_s: float = WAIT_S) -> None:
        end = time.monotonic() + timeout_s
        while self.got.get(timeout=max(0.01, end - time.monotonic())) != want:
            pass

    def close(self) -> None:
        stop_loop(self.client)
        self.client.disconnect()


def test_venus_run_tells_systemd_its_state_and_stops_cleanly(
    pulseaudio: object, mosquitto: Broker, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.sqlite3"
    config = tmp_path / "venus.toml"
    venus = Path(sys.executable).with_name("venus")
    systemd = Systemd()
    status = NodeStatus(mosquitto)
    log = (tmp_path / "venus.log").open("w+")
    with as_file(files("venus.demo") / "engines" / "tiny") as engines:
        base = (
            f'[model]\nengines = "{engines}"\n[video]\nenabled = false\n'
            f'[harness]\njournal = "{journal}"\nbroker_url = "{mosquitto.url}"\n'
        )
        config.write_text(base)
        env = {
            **os.environ,
            "NOTIFY_SOCKET": systemd.address,
            "WATCHDOG_USEC": str(round(WATCHDOG_S * 1e6)),
            "VENUS_FAULT_STALL_S": f"{STALL_S}@3",
        }
        wrapper = 'WATCHDOG_PID=$$ exec "$0" "$@"'
        proc = subprocess.Popen(
            ["sh", "-c", wrapper, str(venus), "--config", str(config), "run", "--quiet"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            # start-up: STATUS as it goes, READY=1 only after the warm-up
            loading = systemd.until("STATUS=loading engines", START_S)
            warming = systemd.until("STATUS=warming up", START_S)
            ready = systemd.until("READY=1", START_S)
            assert loading < warming < ready
            assert systemd.pings(0.0, ready) == []  # no watchdog before READY

            # the stall: pings stop while the loop is blocked, and resume after
            while True:  # (a busy machine may report a short stall first; skip it)
                stalled = systemd.until("STATUS=listening; chunk loop stalled", WAIT_S)
                running = systemd.until("STATUS=listening", WAIT_S)  # the stall is over
                if running - stalled >= STALL_S / 2:
                    break
            resumed = systemd.until("WATCHDOG=1", WAIT_S)
            before = systemd.pings(ready, stalled)
            assert len(before) >= 1, systemd.seen  # periodic pings while chunks ran
            assert systemd.pings(stalled, running) == []
            assert resumed - before[-1] >= STALL_S - WATCHDOG_S, systemd.seen
            gaps = [b - a for a, b in itertools.pairwise(before)]
            assert all(g < 2 * WATCHDOG_S for g in gaps), gaps  # no other gap near a miss

            # SIGHUP: one key applied live, one that needs a restart; never a crash
            config.write_text(base.replace("[video]", "listen_bias = 2.0\n[video]"))
            with config.open("a") as f:
                f.write('[audio]\ndevice = "elsewhere"\n')
            proc.send_signal(signal.SIGHUP)
            systemd.until("RELOADING=1")
            systemd.until("READY=1")
            systemd.until("WATCHDOG=1")  # still running

            # a work item in the daemon's journal, then SIGTERM
            call = subprocess.run(
                [str(venus), "call", "clock", "--journal", str(journal)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert call.returncode == 0, call.stderr
            proc.send_signal(signal.SIGTERM)
            systemd.until("STOPPING=1")
            assert proc.wait(timeout=WAIT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            systemd.close()
    try:
        status.until(b"online", 1.0)  # (sent at start, so already here)
        status.until(b"offline")
    finally:
        status.close()
    log.seek(0)
    out = log.read()
    assert "reload: model.listen_bias: 0.0 -> 2.0" in out, out
    assert "reload: audio.device changed ('default' -> 'elsewhere'): needs a restart" in out
    assert "SIGTERM: stopping" in out
    j = Journal.open(journal, read_only=True)
    try:
        assert j.check() == []
        counts = {s: n for s, n in j.counts().items() if n}
        assert counts == {State.DELIVERED: 1}, counts  # `venus call` delivers
    finally:
        j.close()
