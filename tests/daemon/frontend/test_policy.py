"""Decision policies: the rules alone, then whole offline runs on real engines.

The runs use the scripted checkpoint (tests/support/scripted.py): it listens whenever no
result was injected and says "Sure <call> done" after ``<|speak|>``, so every decision
that is not ``listen`` comes from a result or from the policy. The user's speech is a
harmonic tone (150 Hz and its overtones) that the VAD calls speech, at known times.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyExport
from support.frontend import config, read_wav
from support.scripted import Scripted

from venus.capabilities.contract import Contract
from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.channel import Delegation, InjectedResult
from venus.daemon.frontend.offline import OfflineRun, run_offline
from venus.daemon.frontend.playback import PlaybackEvent
from venus.daemon.frontend.policy import (
    END_OF_TURN_S,
    POLICY_NAMES,
    AlwaysContinuePolicy,
    DecisionPoint,
    DecisionPolicy,
    ModelPolicy,
    UserTurn,
    VadPolicy,
    policy_named,
)
from venus.daemon.frontend.timeline import Decision, read_timeline
from venus.daemon.run_cli import register
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.errors import ConfigError
from venus.hw.vad import VadStats

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "demo" / "engines" / "tiny"
SPEECH_TOKENS = 50  # two seconds of speech per chunk: the queue outlasts the next boundary
RATE_IN = 16000
BUFFER_S = VenusConfig().playback.buffer_ms / 1000
FILTER_S = 0.005  # the output resampler's filter
# User speech: a turn that ends 0.9 s before the boundary at 2 s, and an overlap at 3.3 s
# that ends 1 s before the boundary at 5 s (webrtcvad hears ~0.1 s past a tone's end).
TURN, OVERLAP = (0.2, 1.1), (3.3, 4.0)


def stats(
    speech_s: float = 0.0, offsets: tuple[float, ...] = (), ends_in_speech: bool = False
) -> VadStats:
    return VadStats(speech_s, (), offsets, speech_s, speech_s, 33, ends_in_speech)


SILENT = stats()


def decide(
    policy: DecisionPolicy,
    turn: UserTurn,
    vad: VadStats | None,
    speaking: bool = False,
    model: Decision = "listen",
) -> Decision:
    return policy.decide(DecisionPoint(model, speaking, vad, 1.0), turn)


def test_the_vad_policy_answers_after_the_silence_and_yields_to_any_speech() -> None:
    vad, turn = VadPolicy(), UserTurn()
    assert decide(vad, turn, SILENT, model="speak") == "listen"  # nobody spoke: no reply
    assert decide(vad, turn, stats(0.7, ends_in_speech=True)) == "listen"
    assert turn == UserTurn(silence_s=0.0, spoke=True)
    # The turn ends 0.45 s before the boundary: 0.55 s of silence is not enough ...
    assert decide(vad, turn, stats(0.55, offsets=(0.55,))) == "listen"
    assert turn.silence_s == pytest.approx(0.45)
    # ... 1.45 s is: answer, and the turn is answered.
    assert decide(vad, turn, SILENT) == "speak"
    assert turn == UserTurn(silence_s=pytest.approx(1.45), spoke=False)
    # Speaking, the user silent: the model's listen is no yield, its turn_eos stands.
    assert decide(vad, turn, SILENT, speaking=True, model="listen") == "speak"
    assert decide(vad, turn, SILENT, speaking=True, model="speak") == "speak"
    assert decide(vad, turn, SILENT, speaking=True, model="turn_eos") == "turn_eos"
    assert decide(vad, turn, SILENT, model="speak") == "listen"  # answered: no new reply
    # Any speech over a reply (a backchannel too) cuts it, whatever the model wants ...
    assert decide(vad, turn, stats(0.09, offsets=(0.3,)), speaking=True, model="speak") == "listen"
    # ... and is answered once the user has been silent END_OF_TURN_S (0.6 s: exactly).
    assert decide(vad, turn, SILENT) == "speak"
    quick, turn = VadPolicy(end_of_turn_s=0.3), UserTurn()
    assert decide(quick, turn, stats(0.6, offsets=(0.6,))) == "speak"  # 0.4 s >= 0.3 s


def test_the_end_of_turn_silence_is_inclusive_and_counted_across_chunks() -> None:
    vad = VadPolicy()
    turn = UserTurn()
    edge = 1.0 - END_OF_TURN_S
    assert decide(vad, turn, stats(edge, offsets=(edge,))) == "speak"
    turn = UserTurn()
    assert decide(vad, turn, stats(0.8, offsets=(0.8,))) == "listen"  # 0.2 s
    assert decide(vad, turn, SILENT) == "speak"  # 1.2 s
    with pytest.raises(ConfigError, match="needs the loop's VAD"):
        decide(vad, UserTurn(), None)
    with pytest.raises(ConfigError, match="end_of_turn_s must be > 0"):
        VadPolicy(end_of_turn_s=0.0)


def test_always_continue_only_turns_a_yield_into_speak_and_the_model_policy_never_acts() -> None:
    keep, model, turn = AlwaysContinuePolicy(), ModelPolicy(), UserTurn()
    loud = stats(1.0, ends_in_speech=True)
    for speaking in (False, True):
        for choice in ("listen", "speak", "turn_eos"):
            d: Decision = choice  # type: ignore[assignment]
            assert decide(model, turn, loud, speaking, d) == d
            yielded = speaking and d == "listen"
            assert decide(keep, turn, loud, speaking, d) == ("speak" if yielded else d)
    assert turn == UserTurn()  # neither keeps any state


def test_policies_by_name_match_the_command_line() -> None:
    assert [policy_named(n).name for n in POLICY_NAMES] == list(POLICY_NAMES)
    assert POLICY_NAMES == ("model", "vad", "always-continue")
    with pytest.raises(ConfigError, match="unknown decision policy 'cascade'; one of model"):
        policy_named("cascade")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["run", "--offline", "x.wav", "--policy", "always-continue"])
    assert args.policy == "always-continue"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--policy", "cascade"])


# --- whole runs ---------------------------------------------------------------------


class Harness:
    """Injects results at given chunks; delegations and playback events are dropped."""

    def __init__(self, results: dict[int, list[InjectedResult]]) -> None:
        self.inject = results

    def contracts(self) -> Sequence[Contract]:
        return ()

    def delegate(self, delegation: Delegation) -> None:
        return None

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        return self.inject.get(chunk_index, [])

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        return None

    def playback(self, event: PlaybackEvent) -> None:
        return None


def speech_wav(path: Path, seconds: float, spans: tuple[tuple[float, float], ...]) -> Path:
    """Quiet noise, with a harmonic tone (which webrtcvad calls speech) over ``spans``."""
    t = np.arange(round(seconds * RATE_IN)) / RATE_IN
    tone = sum(0.1 / k * np.sin(2 * np.pi * 150 * k * t) for k in range(1, 20))
    on = np.zeros(t.size, bool)
    for a, b in spans:
        on |= (t >= a) & (t < b)
    x = tone * on + 0.001 * np.random.default_rng(0).standard_normal(t.size)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE_IN)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def run(
    engines: Path,
    out: Path,
    policy: DecisionPolicy | None,
    harness: Harness | None = None,
    seconds: float = 7,
) -> OfflineRun:
    cfg = config(engines, speech_tokens_per_chunk=SPEECH_TOKENS)
    wav = speech_wav(out.parent / f"{out.name}-in.wav", seconds, (TURN, OVERLAP))
    opened = Engines.open(engines, EngineOptions())
    if policy is None:
        return run_offline(cfg, opened, wav, out, harness=harness)
    return run_offline(cfg, opened, wav, out, harness=harness, policy=policy)


def loud(audio: np.ndarray, rate: int, a: float, b: float) -> float:
    return float(np.abs(audio[round(a * rate) : round(b * rate)]).max())


def test_the_vad_baseline_yields_to_overlapping_speech_and_answers_after_silence(
    scripted_export: Scripted, tmp_path: Path
) -> None:
    done = run(scripted_export.engines, tmp_path / "vad", VadPolicy())
    records = done.records
    assert [r.speech_ratio > 0 for r in records] == [True, True, False, True, True, False, False]
    # 1: the user has been silent ~0.8 s: answer. 2: the model would listen (yield); the
    # cascade keeps talking. 3: the user talks over the reply: yield, playback cut at 4 s.
    # 4: silent again ~0.9 s: answer the interruption.
    assert [r.decision for r in records] == [
        "listen", "speak", "speak", "listen", "speak", "speak", "speak",
    ]  # fmt: skip
    assert [r.overridden_by for r in records] == [
        None, "vad", "vad", None, "vad", "vad", "vad",
    ]  # fmt: skip
    assert [r.playback_stopped for r in records] == [False] * 3 + [True] + [False] * 3
    assert [r.reply_id for r in records] == [None, 0, 0, 0, 1, 1, 1]
    assert records[3].reply_ended and records[1].text == "Sure done"
    assert done.summary.playback_stops == 1

    audio, rate, _ = read_wav(done.files.output)
    assert loud(audio, rate, 0, 2) == 0  # nothing before the first answer
    assert loud(audio, rate, 2, 4) > 0.01  # the answer plays until the yield ...
    assert loud(audio, rate, 4 + BUFFER_S + FILTER_S, 5) < 1e-3  # ... cut: one buffer
    assert loud(audio, rate, 5, 7) > 0.01  # the interruption is answered
    assert json.loads((done.out_dir / "summary.json").read_text())["policy"] == "vad"
    on_disk = read_timeline(done.out_dir / "timeline.jsonl")
    assert [r.overridden_by for r in on_disk] == [r.overridden_by for r in records]


def test_always_continue_talks_through_overlapping_speech_where_the_model_yields(
    scripted_export: Scripted, tmp_path: Path
) -> None:
    answer = {1: [InjectedResult("item-1", "sunny")]}  # the model starts a reply at 1
    model = run(scripted_export.engines, tmp_path / "model", None, Harness(answer))
    keep = run(scripted_export.engines, tmp_path / "keep", AlwaysContinuePolicy(), Harness(answer))

    assert [r.decision for r in model.records] == ["listen", "speak"] + ["listen"] * 5
    assert model.records[2].playback_stopped  # the scripted model yields at once
    assert [r.decision for r in keep.records] == ["listen"] + ["speak"] * 6
    assert [r.overridden_by for r in keep.records] == [None, None] + ["always-continue"] * 5
    assert not any(r.playback_stopped or r.reply_ended for r in keep.records)
    assert {r.reply_id for r in keep.records[1:]} == {0}  # one reply, never cut
    audio, rate, _ = read_wav(keep.files.output)
    assert loud(audio, rate, 0, 2) == 0
    for second in range(2, 7):  # speech every second, through the overlap at 3.3-4.0 s
        assert loud(audio, rate, second, second + 1) > 0.01, second
    assert all(r.overridden_by is None for r in model.records)


def test_the_model_policy_is_the_default_byte_for_byte(
    scripted_export: Scripted, tmp_path: Path
) -> None:
    """On the scripted engines (an answer, then a yield that cuts it) and on the shipped
    tiny ones pushed to speak (sampled text and speech; venus-tiny on 6,000 samples holds
    its turn on this input up to a bias of -6)."""
    tiny = config(TINY)
    tiny = dataclasses.replace(tiny, model=dataclasses.replace(tiny.model, listen_bias=-12.0))
    scripted = config(scripted_export.engines, speech_tokens_per_chunk=SPEECH_TOKENS)
    wav = speech_wav(tmp_path / "in.wav", 5, (TURN, OVERLAP))
    for cfg, harness in (
        (scripted, Harness({1: [InjectedResult("item-1", "sunny")]})),
        (tiny, None),
    ):
        engines = Engines.open(cfg.model.engines, EngineOptions())
        out = tmp_path / cfg.model.engines.name
        plain = run_offline(cfg, engines, wav, out / "plain", harness=harness)
        model = run_offline(cfg, engines, wav, out / "model", harness=harness, policy=ModelPolicy())

        assert stable(plain) == stable(model)
        assert "speak" in [r.decision for r in model.records]
        assert harness is None or any(r.playback_stopped for r in model.records)
        assert all(r.overridden_by is None for r in model.records)
        for name in ("output.wav", "conversation.wav"):
            assert (out / "plain" / name).read_bytes() == (out / "model" / name).read_bytes()
        assert json.loads((out / "plain" / "summary.json").read_text())["policy"] == "model"


def stable(done: OfflineRun) -> list[dict[str, object]]:
    """The records without what depends on the machine's speed."""
    rows = [dataclasses.asdict(r) for r in done.records]
    for row in rows:
        row.pop("latency_ms")
        row.pop("deadline_missed")
    return rows


def test_venus_run_offline_takes_a_policy_and_only_offline(
    tmp_path: Path, tiny_export: TinyExport
) -> None:
    """On untrained engines, which listen throughout, the VAD policy answers the turn."""
    venus = Path(sys.executable).with_name("venus")
    wav = speech_wav(tmp_path / "in.wav", 3, (TURN,))
    args = [str(venus), "run", "--engines", str(tiny_export.engines), "--policy", "vad"]

    def call(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*args, *more], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300
        )

    done = call("--offline", str(wav), "--out", "o")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "speak" in done.stdout and "(vad)" in done.stdout  # the answer at chunk 1
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["policy"] == "vad"
    live = call()
    assert live.returncode == 1 and "--policy and --paced go with --offline" in live.stderr
