"""Start-up and stop in process: the warm-up, the STATUS line, the signal handlers."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import pytest
from support.frontend import config

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.clock import OfflineClock
from venus.daemon.frontend.playback import TrackOut
from venus.daemon.frontend.session import Frontend, open_frontend, warm_up
from venus.daemon.frontend.timeline import ChunkRecord
from venus.daemon.service.lifecycle import Lifecycle
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.hw.events import DeviceLost, DeviceRestored
from venus.hw.sources import SyntheticAudioSource

WAIT_S = 5.0


@pytest.fixture(scope="module")
def engines_dir() -> Iterator[Path]:
    with as_file(files("venus.demo") / "engines" / "tiny") as path:
        yield Path(path)


class Counting:
    """A runner that counts its ``step`` calls."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.steps = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        self.steps += 1
        return self.inner.step(*args, **kwargs)


def frontend_on(engines: Engines, engines_dir: Path) -> tuple[Frontend, list[ChunkRecord]]:
    rate = engines.manifest.schedule.sample_rate_out
    track = TrackOut(rate)
    records: list[ChunkRecord] = []
    f = open_frontend(
        config(engines_dir), engines, track, OfflineClock(track, rate), records.append
    )
    return f, records


def two_chunks(f: Frontend) -> list[tuple[str, str, int]]:
    with SyntheticAudioSource(tone_hz=220.0, duration_s=2.0) as audio:
        f.loop.run(f.stream, audio)
    f.close()
    return [(r.decision, r.text, r.speech_tokens) for r in f.records]


def test_the_warm_up_runs_every_engine_and_leaves_no_trace(engines_dir: Path) -> None:
    opened = Engines.open(engines_dir, EngineOptions(cache_dir=None))
    flow, vocoder = Counting(opened.flow), Counting(opened.vocoder)
    engines = dataclasses.replace(opened, flow=flow, vocoder=vocoder)
    warmed, records = frontend_on(engines, engines_dir)
    assert warm_up(warmed) > 0
    assert flow.steps == 1 and vocoder.steps == 1  # forced to speak: the speech path ran
    s = warmed.stream
    assert (s.chunks, s.backbone.length, s.replies, s.recent_audio.size) == (0, 0, 0, 0)
    assert records == [] and warmed.playback.played_samples() == 0
    cold, _ = frontend_on(opened, engines_dir)
    assert two_chunks(warmed) == two_chunks(cold)  # same seed, same run: nothing carried


class Listener:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(WAIT_S)

    def next(self) -> str:
        return self.sock.recv(4096).decode()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Lifecycle, Listener]]:
    listener = Listener(tmp_path / "notify")
    service = Lifecycle.from_env(VenusConfig(), {"NOTIFY_SOCKET": str(tmp_path / "notify")})
    yield service, listener
    service.close()
    listener.sock.close()


def test_status_follows_the_state_and_the_devices(service: tuple[Lifecycle, Listener]) -> None:
    s, got = service
    s.starting()
    assert got.next() == "STATUS=loading engines"
    assert got.next().startswith("EXTEND_TIMEOUT_USEC=")
    s.warming_up()
    assert got.next() == "STATUS=warming up"
    s.ready(VenusConfig, VenusConfig(), [])
    assert got.next() == "READY=1\nSTATUS=listening"
    s.on_device(DeviceLost("microphone", "hw:1", "unplugged", 0.0))
    assert got.next() == "STATUS=listening; microphone lost: unplugged"
    s.on_device(DeviceRestored("microphone", "hw:1", 3.0, 3.0))
    assert got.next() == "STATUS=listening"
    s.close()
    assert got.next() == "STOPPING=1\nSTATUS=stopping"


def test_sigterm_stops_once_and_a_second_is_only_logged(
    service: tuple[Lifecycle, Listener], caplog: pytest.LogCaptureFixture
) -> None:
    s, got = service
    before = signal.getsignal(signal.SIGTERM)
    s.install_signals()
    os.kill(os.getpid(), signal.SIGTERM)  # handled on this (the main) thread
    assert s.stop.wait(WAIT_S)
    assert got.next() == "STOPPING=1\nSTATUS=stopping"
    os.kill(os.getpid(), signal.SIGTERM)
    assert "SIGTERM while stopping: still stopping" in caplog.text
    s.close()  # STOPPING=1 is not sent twice
    got.sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        got.next()
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored


def test_a_sighup_while_starting_is_served_once_ready(
    service: tuple[Lifecycle, Listener], tmp_path: Path
) -> None:
    s, got = service
    s.install_signals()
    os.kill(os.getpid(), signal.SIGHUP)
    loaded = threading.Event()

    def load() -> VenusConfig:
        loaded.set()
        return VenusConfig()

    s.ready(load, VenusConfig(), [])
    assert loaded.wait(WAIT_S)
    assert got.next() == "READY=1\nSTATUS=listening"
    assert got.next().startswith("RELOADING=1\nSTATUS=reloading the configuration\n")
    assert got.next() == "READY=1\nSTATUS=listening"
