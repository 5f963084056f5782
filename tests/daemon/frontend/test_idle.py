"""When ``when_idle`` results may come in (``Step._idle``), through the real loop, VAD and
scripted engines (they listen until a result comes): not while a voice near the
microphone speaks, but through babble webrtcvad takes for speech, and no longer than
the gate's wait of talk; and the gate is the ``[harness]`` idle_* keys of venus.toml."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from support.babble import RATE, at_dbfs, babble, espeak
from support.frontend import config
from support.scripted import Scripted

from venus.daemon.config import VenusConfig, load_config
from venus.daemon.frontend.channel import InjectedResult
from venus.daemon.frontend.offline import run_offline
from venus.daemon.frontend.step import IdleGate
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines

TEXT = "Hello there. Could you turn on the kitchen lights, please?"


class Asked:
    """A harness channel that injects nothing and records each boundary's ``idle``."""

    def __init__(self) -> None:
        self.idle: dict[int, bool] = {}

    def contracts(self) -> tuple[()]:
        return ()

    def delegate(self, delegation: object) -> None:
        raise AssertionError("the scripted engines delegate only when answering a result")

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        self.idle[chunk_index] = idle
        return []

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        raise AssertionError("no result came, so no reply")

    def playback(self, event: object) -> None:
        return None


def idle_by_chunk(
    engines: Path, signal: np.ndarray, out: Path, cfg: VenusConfig | None = None
) -> dict[int, bool]:
    wav = out.with_suffix(".wav")
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(signal, -1, 1) * 32767).astype(np.int16).tobytes())
    asked = Asked()
    cfg = cfg or config(engines)
    gate = IdleGate(cfg.harness.idle_speech_ratio, cfg.harness.idle_rise_db)
    done = run_offline(cfg, Engines.open(engines, EngineOptions()), wav, out, harness=asked)
    # the timeline says it too, with the level that decided it
    assert {r.index: r.idle for r in done.records} == asked.idle
    for r in done.records:
        assert r.speech_rise_db is not None
        assert r.idle or gate.busy(r.speech_ratio, r.speech_rise_db), r
    return asked.idle


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return espeak(TEXT)


def test_results_wait_for_a_near_voice_not_for_babble(
    scripted_export: Scripted, speech: np.ndarray, tmp_path: Path
) -> None:
    signal = babble(speech, 14.0, -35.0)  # speech to webrtcvad in every chunk
    signal[10 * RATE : 13 * RATE] += at_dbfs(speech, -20.0)[: 3 * RATE]  # the user, near
    idle = idle_by_chunk(scripted_export.engines, signal, tmp_path / "babble")
    assert [idle[k] for k in range(1, 10)] == [True] * 9  # the room: results may come
    assert [idle[k] for k in (10, 11, 12)] == [False] * 3  # the user speaks: they wait


def test_results_wait_no_longer_than_the_idle_wait(
    scripted_export: Scripted, speech: np.ndarray, tmp_path: Path
) -> None:
    """A voice that talks on (a radio near the microphone): after the gate's wait (8 s)
    of it while the assistant listens, results come in anyway and the model decides."""
    waited = round(IdleGate().wait_s)
    seconds = waited + 3
    signal = at_dbfs(np.resize(speech, seconds * RATE), -20.0)
    idle = idle_by_chunk(scripted_export.engines, signal, tmp_path / "talk")
    assert [idle[k] for k in range(waited)] == [False] * waited
    assert [idle[k] for k in range(waited, seconds)] == [True] * (seconds - waited)


def test_the_gate_is_the_configs(
    scripted_export: Scripted, speech: np.ndarray, tmp_path: Path
) -> None:
    """venus.toml's ``[harness]`` idle_wait_s and idle_rise_db move the gate: a shorter
    wait lets results in sooner; a loud room's higher rise takes the near voice for it."""
    signal = at_dbfs(np.resize(speech, 7 * RATE), -20.0)
    signal[: 3 * RATE] = 0.0  # a quiet room, then a near voice that talks on
    noise = np.random.default_rng(0).standard_normal(signal.size).astype(np.float32)
    signal += at_dbfs(noise, -50.0)
    configured = tmp_path / "venus.toml"
    engines = scripted_export.engines
    configured.write_text(f'[model]\nengines = "{engines}"\n[harness]\nidle_wait_s = 2.0\n')
    idle = idle_by_chunk(engines, signal, tmp_path / "wait", load_config(configured))
    assert [idle[k] for k in range(7)] == [True] * 3 + [False] * 2 + [True] * 2
    configured.write_text(f'[model]\nengines = "{engines}"\n[harness]\nidle_rise_db = 60\n')
    idle = idle_by_chunk(engines, signal, tmp_path / "loud", load_config(configured))
    assert [idle[k] for k in range(7)] == [True] * 7
