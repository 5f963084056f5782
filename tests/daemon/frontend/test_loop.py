"""The frontend loop end to end on real ONNX Runtime engines, offline and in real time.

The scripted checkpoint (tests/support/scripted.py) forces a known conversation: listen
until a result is injected, then answer it with "Sure <call> done" (a delegation inside
the text) and, at the next chunk, yield mid-reply (listen), which must cut playback.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import wave
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyExport
from support.frontend import config, read_wav, write_video, write_wav
from support.scripted import CALL, WORDS, Scripted, swap_tokenizer

from venus.capabilities.contract import Contract
from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.channel import Delegation, InjectedResult
from venus.daemon.frontend.offline import OfflineRun, run_offline
from venus.daemon.frontend.playback import PlaybackEvent, Played, Stopped
from venus.daemon.frontend.timeline import read_timeline
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.errors import HarnessError

SPEECH_TOKENS = 50  # two seconds of speech per chunk: the queue outlasts the next boundary
OUT_RATE = 24000


class Harness:
    """A harness channel that injects results at given chunks and records what it gets."""

    def __init__(self, results: dict[int, list[InjectedResult]] | None = None) -> None:
        self.inject = results or {}
        self.delegations: list[Delegation] = []
        self.events: list[PlaybackEvent] = []
        self.replies: list[tuple[int, tuple[str, ...]]] = []

    def contracts(self) -> Sequence[Contract]:
        return ()

    def delegate(self, delegation: Delegation) -> None:
        self.delegations.append(delegation)

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        return self.inject.get(chunk_index, [])

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        self.replies.append((reply_id, item_ids))

    def playback(self, event: PlaybackEvent) -> None:
        self.events.append(event)


@pytest.fixture
def scripted(scripted_export: Scripted) -> Scripted:
    return scripted_export


def run_scripted(engines: Path, out: Path, harness: Harness, seconds: float = 6) -> OfflineRun:
    cfg = config(engines, speech_tokens_per_chunk=SPEECH_TOKENS)
    wav = write_wav(out.parent / f"{out.name}-in.wav", seconds)
    return run_offline(cfg, Engines.open(engines, EngineOptions()), wav, out, harness=harness)


def test_a_result_is_answered_with_a_delegation_and_the_yield_cuts_playback(
    scripted: Scripted, tmp_path: Path
) -> None:
    harness = Harness({2: [InjectedResult("item-1", "sunny")]})
    done = run_scripted(scripted.engines, tmp_path / "out", harness)

    decisions = [r.decision for r in done.records]
    assert decisions == ["listen", "listen", "speak", "listen", "listen", "listen"]
    answer, yielded = done.records[2], done.records[3]
    assert answer.text == "Sure done"  # the call inside the text is never spoken
    assert answer.results[0].item_id == "item-1" and answer.results[0].tokens == 1
    assert answer.speech_tokens == SPEECH_TOKENS and not answer.reply_ended
    (call,) = answer.delegations
    assert call.valid and call.name == "weather" and call.arguments == {"city": "Paris"}
    (delegation,) = harness.delegations
    assert (delegation.name, delegation.arguments, delegation.chunk_index) == (
        "weather",
        {"city": "Paris"},
        2,
    )
    assert yielded.playback_stopped and yielded.reply_ended and yielded.reply_id == 0
    assert harness.replies == [(0, ("item-1",))]  # the reply answers the injected result

    stops = [e for e in harness.events if isinstance(e, Stopped)]
    assert len(stops) == 1 and stops[0].reply_id == 0 and stops[0].tags == ("item-1",)
    assert stops[0].at_sample == 4 * OUT_RATE and stops[0].dropped_samples > 0
    assert not [e for e in harness.events if isinstance(e, Played) and e.last]

    # output.wav: silent until the answer starts at 3 s, speech until the cut at 4 s,
    # silent from one playback buffer after the cut.
    audio, rate, _ = read_wav(done.files.output)
    buffer_s = VenusConfig().playback.buffer_ms / 1000
    assert np.abs(audio[: 3 * rate]).max() == 0
    assert np.abs(audio[3 * rate : 4 * rate]).max() > 0.01
    tail = audio[round((4 + buffer_s + 0.005) * rate) :]  # + the resampler's filter
    assert np.abs(tail).max() < 1e-3
    assert [r.index for r in read_timeline(tmp_path / "out" / "timeline.jsonl")] == list(range(6))


def test_a_malformed_delegation_is_counted_not_spoken_nor_dispatched(
    scripted: Scripted, tmp_path: Path
) -> None:
    words = {w if w != CALL else '{"name": oops': i for w, i in WORDS.items()}
    engines = swap_tokenizer(scripted.engines, tmp_path / "engines", words)
    harness = Harness({1: [InjectedResult("item-2", "sunny")]})
    done = run_scripted(engines, tmp_path / "out", harness, seconds=3)
    answer = done.records[1]
    assert answer.decision == "speak" and answer.text == "Sure done"
    (call,) = answer.delegations
    assert not call.valid and call.raw == '{"name": oops' and "JSON" in (call.error or "")
    assert harness.delegations == []
    assert done.summary.delegations_malformed == 1


def test_the_schedule_is_one_record_per_chunk_and_deterministic(
    tiny_export: TinyExport, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "in.wav", 7.3, rate=22050)
    video = tmp_path / "in.avi"
    write_video(video, seconds=8)
    cfg = config(tiny_export.engines)
    engines = Engines.open(tiny_export.engines, EngineOptions())
    runs = [run_offline(cfg, engines, wav, tmp_path / f"out{i}", video) for i in range(2)]

    records = runs[0].records
    assert [r.index for r in records] == list(range(8))  # 7.3 s: the last chunk is padded
    assert all(b.start_s - a.start_s == pytest.approx(1.0) for a, b in pairwise(records))
    assert all(r.vision for r in records)  # the omni frontend saw a frame every chunk
    out, rate, channels = read_wav(runs[0].files.output)
    with wave.open(str(wav)) as w:
        assert (out.shape[0], rate, channels) == (w.getnframes(), 22050, 1)
    conv, _, channels = read_wav(runs[0].files.conversation)
    assert channels == 2 and conv.shape[0] == out.shape[0]

    def stable(run: OfflineRun) -> list[dict[str, object]]:
        rows = [dataclasses.asdict(r) for r in run.records]
        for row in rows:
            row.pop("latency_ms")
            row.pop("deadline_missed")
        return rows

    assert stable(runs[0]) == stable(runs[1])
    assert runs[0].files.output.read_bytes() == runs[1].files.output.read_bytes()
    summary = json.loads((tmp_path / "out0" / "summary.json").read_text())
    assert summary["chunks"] == 8


def test_a_full_context_evicts_old_chunks_and_keeps_running(
    tiny_export: TinyExport, tmp_path: Path
) -> None:
    cfg = config(tiny_export.engines, max_context_tokens=512, sink_tokens=64)
    wav = write_wav(tmp_path / "in.wav", 30)
    done = run_offline(cfg, Engines.open(tiny_export.engines, EngineOptions()), wav, tmp_path / "o")
    assert len(done.records) == 30
    assert sum(r.evicted_tokens for r in done.records) > 0
    assert max(r.context_tokens for r in done.records) <= 512


def test_the_audio_frontend_runs_the_same_loop_without_frames(
    scripted: Scripted, tmp_path: Path
) -> None:
    engines = Engines.open(scripted.engines, EngineOptions())
    assert engines.vision is None and engines.manifest.frontend == "audio"
    video = tmp_path / "v.avi"
    write_video(video, seconds=3)
    cfg = config(scripted.engines)
    done = run_offline(cfg, engines, write_wav(tmp_path / "in.wav", 3), tmp_path / "o", video)
    assert [r.vision for r in done.records] == [False] * 3


def test_real_time_on_the_sound_server(pulseaudio: object, tiny_export: TinyExport) -> None:
    from venus.daemon.frontend.realtime import run_realtime
    from venus.hw.backends import rescan_devices

    rescan_devices()
    cfg = config(tiny_export.engines)
    cfg = dataclasses.replace(cfg, video=dataclasses.replace(cfg.video, enabled=False))
    engines = Engines.open(tiny_export.engines, EngineOptions())
    stop = threading.Event()
    seen = []

    def on_record(record: object) -> None:
        seen.append(record)
        if len(seen) >= 3:
            stop.set()

    timer = threading.Timer(30, stop.set)  # a bound on the test, not an expectation
    timer.start()
    try:
        stats = run_realtime(cfg, engines, stop, on_record=on_record)
    finally:
        timer.cancel()
    assert stats.chunks >= 3 and len(seen) >= 3
    indices = [r.index for r in seen]
    assert indices == sorted(set(indices))
    assert all(r.start_s == pytest.approx(r.index * 1.0) for r in seen)


class BrokenHarness(Harness):
    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        if chunk_index == 2:
            raise HarnessError("the journal is locked")
        return super().results(session_id, chunk_index, idle)


def test_a_failing_chunk_is_dropped_and_the_session_restarts(
    tiny_export: TinyExport, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tiny_export.engines)
    engines = Engines.open(tiny_export.engines, EngineOptions())
    wav = write_wav(tmp_path / "in.wav", 5)
    done = run_offline(cfg, engines, wav, tmp_path / "o", harness=BrokenHarness())
    assert [r.index for r in done.records] == [0, 1, 3, 4]
    assert "chunk 2 failed: the journal is locked; a new session starts" in caplog.text
    # a fresh stream: chunk 3 holds what chunk 0 held, chunk 4 what chunk 1 held
    assert [r.context_tokens for r in done.records[2:]] == [
        r.context_tokens for r in done.records[:2]
    ]
