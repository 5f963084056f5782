"""When ``when_idle`` results may come in (``Step._idle``), through the real loop, VAD and
scripted engines (they listen until a result comes): not while a voice near the
microphone speaks, but through babble webrtcvad takes for speech, and no longer than
``IDLE_WAIT_S`` of talk."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from support.babble import RATE, at_dbfs, babble, espeak
from support.frontend import config
from support.scripted import Scripted

from venus.daemon.frontend.channel import InjectedResult
from venus.daemon.frontend.offline import run_offline
from venus.daemon.frontend.step import IDLE_RISE_DB, IDLE_SPEECH_RATIO, IDLE_WAIT_S
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


def idle_by_chunk(engines: Path, signal: np.ndarray, out: Path) -> dict[int, bool]:
    wav = out.with_suffix(".wav")
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(signal, -1, 1) * 32767).astype(np.int16).tobytes())
    asked = Asked()
    done = run_offline(
        config(engines), Engines.open(engines, EngineOptions()), wav, out, harness=asked
    )
    # the timeline says it too, with the level that decided it
    assert {r.index: r.idle for r in done.records} == asked.idle
    for r in done.records:
        assert r.speech_rise_db is not None
        busy = r.speech_ratio >= IDLE_SPEECH_RATIO and r.speech_rise_db >= IDLE_RISE_DB
        assert r.idle or busy, r
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
    """A voice that talks on (a radio near the microphone): after ``IDLE_WAIT_S`` of it
    while the assistant listens, results come in anyway and the model decides."""
    seconds = round(IDLE_WAIT_S) + 3
    signal = at_dbfs(np.resize(speech, seconds * RATE), -20.0)
    idle = idle_by_chunk(scripted_export.engines, signal, tmp_path / "talk")
    waited = round(IDLE_WAIT_S)
    assert [idle[k] for k in range(waited)] == [False] * waited
    assert [idle[k] for k in range(waited, seconds)] == [True] * (seconds - waited)
