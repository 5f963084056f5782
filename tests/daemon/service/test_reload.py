"""SIGHUP's reload on a real configuration file and a real frontend (the shipped tiny
engines): what is applied, what waits for a restart, what is refused."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path

import pytest
from support.frontend import config

from venus.daemon.config import load_config
from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.clock import OfflineClock
from venus.daemon.frontend.playback import TrackOut
from venus.daemon.frontend.session import Frontend, open_frontend
from venus.daemon.frontend.step import Samplers
from venus.daemon.service.notify import Notifier
from venus.daemon.service.reload import Reloadable, Reloader
from venus.daemon.service.reloadable import homeassistant_part, logging_part, sampling_part
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.sampler import Greedy, TopP
from venus.hw.sources import SyntheticAudioSource


class Sent(Notifier):
    def __init__(self) -> None:
        super().__init__(None)
        self.sent: list[str] = []

    def send(self, *fields: str) -> bool:
        self.sent.append(fields[0])
        return True


@pytest.fixture(scope="module")
def engines_dir() -> Iterator[Path]:
    with as_file(files("venus.demo") / "engines" / "tiny") as path:
        yield Path(path)


@pytest.fixture
def frontend(engines_dir: Path) -> Iterator[Frontend]:
    engines = Engines.open(engines_dir, EngineOptions(cache_dir=None))
    rate = engines.manifest.schedule.sample_rate_out
    track = TrackOut(rate)
    f = open_frontend(
        config(engines_dir), engines, track, OfflineClock(track, rate), lambda _r: None
    )
    yield f
    f.close()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def write(path: Path, engines: Path, body: str) -> Path:
    path.write_text(f'[model]\nengines = "{engines}"\n{body}')
    return path


def test_a_reload_applies_what_it_can_and_names_what_needs_a_restart(
    tmp_path: Path, engines_dir: Path, frontend: Frontend, restore_logging: None
) -> None:
    path = write(tmp_path / "venus.toml", engines_dir, "")
    sent = Sent()
    reloader = Reloader(lambda: load_config(path), load_config(path), sent)
    reloader.parts = [logging_part(None), sampling_part(frontend), homeassistant_part(None)]
    old_samplers = frontend.step.samplers
    write(
        path,
        engines_dir,
        'listen_bias = 5.0\n[audio]\ndevice = "hw:9"\n[logging]\nlevel = "DEBUG"\n'
        '[homeassistant]\nname = "Kitchen"\n',
    )
    report = reloader.reload()
    assert report.refused is None and report.failed == ()
    assert report.applied == (
        "logging.level: 'INFO' -> 'DEBUG'",
        "model.listen_bias: 0.0 -> 5.0",
        "homeassistant.name: 'Venus' -> 'Kitchen'",
    )
    assert report.needs_restart == ("audio.device",)
    assert sent.sent == ["RELOADING=1", "READY=1"]
    assert logging.getLogger().level == logging.DEBUG

    # the step still has its samplers until the loop reaches a chunk boundary
    assert frontend.step.samplers is old_samplers
    listen = frontend.engines.token_id("<|listen|>")
    with SyntheticAudioSource(duration_s=1.0) as audio:
        frontend.loop.run(frontend.stream, audio, max_chunks=1)
    bias = frontend.step.samplers.control.bias
    assert bias is not None and dict(bias.bias) == {listen: 5.0}

    # the running configuration has what was applied, not what waits for a restart
    assert reloader.running.model.listen_bias == 5.0
    assert reloader.running.audio.device == "default"
    again = reloader.reload()
    assert again.applied == () and again.needs_restart == ("audio.device",)


def test_a_temperature_taken_out_of_the_file_goes_back_to_the_engines(
    tmp_path: Path, engines_dir: Path, frontend: Frontend
) -> None:
    path = write(tmp_path / "venus.toml", engines_dir, "")
    reloader = Reloader(lambda: load_config(path), load_config(path), Sent())
    reloader.parts = [sampling_part(frontend)]
    assert isinstance(frontend.step.samplers.text.choose, Greedy)  # the shipped engines': 0

    def after_a_chunk() -> Samplers:
        with SyntheticAudioSource(duration_s=1.0) as audio:  # max_chunks counts every run's
            frontend.loop.run(frontend.stream, audio, max_chunks=frontend.loop.stats.chunks + 1)
        return frontend.step.samplers

    write(path, engines_dir, "temperature = 0.9\n")
    assert reloader.reload().applied == ("model.temperature: None -> 0.9",)
    text = after_a_chunk().text.choose
    assert isinstance(text, TopP) and text.temperature == 0.9
    write(path, engines_dir, "")
    assert reloader.reload().applied == ("model.temperature: 0.9 -> None",)
    assert isinstance(after_a_chunk().text.choose, Greedy)


def test_an_invalid_file_is_refused_and_the_running_configuration_kept(
    tmp_path: Path, engines_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "venus.toml", engines_dir, "listen_bias = 1.0\n")
    sent = Sent()
    applied: list[VenusConfig] = []
    part = Reloadable("sampling", frozenset({"model.listen_bias"}), applied.append)
    reloader = Reloader(lambda: load_config(path), load_config(path), sent)
    reloader.parts = [part]
    write(path, engines_dir, "listen_bias = 99.0\n[audio]\nsample_rte = 16000\n")
    report = reloader.reload()
    assert report.refused is not None
    assert "model.listen_bias" in report.refused and "did you mean sample_rate?" in report.refused
    assert "reload refused, the running configuration is kept" in caplog.text
    assert applied == [] and reloader.running.model.listen_bias == 1.0
    assert sent.sent == ["RELOADING=1", "READY=1"]  # never left reloading
    path.unlink()
    assert reloader.reload().refused is not None  # a vanished file too


def test_a_part_that_fails_keeps_its_old_values_and_the_others_apply(
    tmp_path: Path, engines_dir: Path
) -> None:
    path = write(tmp_path / "venus.toml", engines_dir, "")
    got: list[str] = []

    def broken(_cfg: VenusConfig) -> None:
        raise RuntimeError("the link is down")

    reloader = Reloader(lambda: load_config(path), load_config(path), Sent())
    reloader.parts = [
        Reloadable("homeassistant", frozenset({"homeassistant.name"}), broken),
        Reloadable(
            "sampling", frozenset({"model.top_p"}), lambda c: got.append(str(c.model.top_p))
        ),
    ]
    write(path, engines_dir, 'top_p = 0.5\n[homeassistant]\nname = "Hall"\n')
    report = reloader.reload()
    assert report.failed == ("homeassistant.name",) and got == ["0.5"]
    assert reloader.running.homeassistant.name == "Venus"
    assert reloader.running.model.top_p == 0.5


def test_a_sighup_request_wakes_the_reload_thread(tmp_path: Path, engines_dir: Path) -> None:
    path = write(tmp_path / "venus.toml", engines_dir, "")
    done: list[float] = []
    applied = threading.Event()

    def apply(cfg: VenusConfig) -> None:
        done.append(cfg.model.top_p)
        applied.set()

    reloader = Reloader(lambda: load_config(path), load_config(path), Sent())
    write(path, engines_dir, "top_p = 0.5\n")
    reloader.request()  # before the thread: served when it starts
    reloader.start([Reloadable("sampling", frozenset({"model.top_p"}), apply)])
    try:
        assert applied.wait(5.0)
    finally:
        reloader.stop()
    assert done == [0.5]
