"""Real services for tests: a mosquitto broker and a PulseAudio null sink.

Each starts on loopback (or in a private runtime directory), waits until it answers,
and is stopped afterwards. A missing binary skips the test with the install command,
except under ``CI=true``, where it fails: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 15.0


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_binary(name: str, package: str) -> str:
    """Path of ``name``; skip (or fail under CI) naming the package that provides it."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")
    if found:
        return found
    reason = f"{name} not found; install it with: sudo apt-get install {package}"
    if in_ci():
        pytest.fail(f"{reason} (CI=true: missing services are failures, not skips)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(check: object, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Call ``check`` until it returns true; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if callable(check) and check():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout_s} s")
        time.sleep(0.05)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Broker:
    """A running mosquitto on 127.0.0.1."""

    host: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def run_mosquitto(workdir: Path, extra_config: str = "") -> Iterator[Broker]:
    """Start mosquitto (MQTT 5 capable) with a temporary config on a free loopback port."""
    binary = require_binary("mosquitto", "mosquitto")
    port = free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "persistence false\n"
        "set_tcp_nodelay true\n"  # as systemd/mosquitto/venus.conf
        "log_dest stderr\n"
        "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n" + extra_config
    )
    log_path = workdir / "mosquitto.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=log_file, stderr=log_file)
    try:
        wait_until(lambda: proc.poll() is not None or _port_open(port), "mosquitto")
        if proc.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {proc.returncode}:\n{log_path.read_text()}")
        yield Broker("127.0.0.1", port, log_path, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass(frozen=True)
class PulseServer:
    """A private PulseAudio daemon whose default sink is a null sink.

    ``env`` holds the variables a client needs (XDG_RUNTIME_DIR, PULSE_SERVER, ...);
    the monitor of the null sink is the default source, so what is played into the
    sink can be recorded back.
    """

    runtime_dir: Path
    env: dict[str, str]
    sink: str
    source: str

    def pactl(self, *args: str) -> str:
        out = subprocess.run(
            ["pactl", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout

    def start(self) -> None:
        """Start (or restart, after ``stop``) the daemon; returns once it answers."""
        binary = require_binary("pulseaudio", "pulseaudio")
        require_binary("pactl", "pulseaudio-utils")
        env = {**os.environ, **self.env}
        subprocess.run(
            [
                binary,
                "-n",
                "--daemonize=yes",
                "--exit-idle-time=-1",
                "--use-pid-file=yes",
                # Nice -11 where allowed (root, as CI runs): the test workers beside it
                # load both cores, and a starved server glitches the loop (test_aec.py).
                "--high-priority=yes",
                "--load=module-native-protocol-unix",
                f"--load=module-null-sink sink_name={self.sink} rate=48000",
                "--load=module-always-sink",
            ],
            env=env,
            check=True,
            timeout=30,
            capture_output=True,
        )
        wait_until(self._answers, "PulseAudio")
        self.pactl("set-default-sink", self.sink)
        self.pactl("set-default-source", self.source)

    def stop(self) -> None:
        """Stop the daemon (as a crash would look to clients: it simply goes away)."""
        pid_file = self.runtime_dir / "pulse" / "pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        wait_until(lambda: not _alive(pid), "PulseAudio shutdown")

    def _answers(self) -> bool:
        try:
            self.pactl("info")
            return True
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def run_pulseaudio(sink: str = "venus_null") -> Iterator[PulseServer]:
    """A private, headless PulseAudio with a null sink, in a fresh 0700 runtime dir."""
    # Short path: the native socket path must fit in sockaddr_un (108 bytes).
    runtime = Path(tempfile.mkdtemp(prefix="venus-pa-"))
    runtime.chmod(0o700)
    home = runtime / "home"
    home.mkdir()
    client_conf = runtime / "client.conf"
    client_conf.write_text("autospawn = no\n")
    server = PulseServer(
        runtime_dir=runtime,
        env={
            "XDG_RUNTIME_DIR": str(runtime),
            "HOME": str(home),
            "PULSE_SERVER": f"unix:{runtime}/pulse/native",
            "PULSE_CLIENTCONFIG": str(client_conf),
        },
        sink=sink,
        source=f"{sink}.monitor",
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(runtime, ignore_errors=True)


@contextmanager
def audio_priority(nice: int = -10) -> Iterator[None]:
    """This thread, and the audio threads that streams opened in it start, at ``nice``
    where allowed (root, as CI runs; else unchanged): on Linux the nice value is per
    thread and new threads inherit it. The test workers beside an audio test load both
    cores of a 2-core machine; a starved stream thread glitches the loop."""
    before: int | None = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except PermissionError:
        before = None
    try:
        yield
    finally:
        if before is not None:
            os.setpriority(os.PRIO_PROCESS, 0, before)
