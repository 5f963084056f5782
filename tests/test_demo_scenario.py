"""The bundled demo scenario: its WAV, video and scenario.json agree, and it regenerates.

The scenario is two samples of a held-out datagen set (``train/recipes/demo-set.toml``,
seed 13), played one after the other. The same checks run on the committed assets
(``venus.demo``'s ``scenario/``) and on a fresh run of ``scripts/make-demo-scenario``;
where the TTS versions match the ones recorded, the regenerated audio and scenario.json
are identical to the committed ones.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from venus.evaluation.delegation_env import STAND_INS
from venus.hw.video_file import VideoFile

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "make-demo-scenario"
COMMITTED = Path(str(importlib.resources.files("venus.demo") / "scenario"))
KINDS = {"request", "question", "backchannel", "interruption"}
ANSWERED_AT_ONCE = {"calculator", "clock"}  # the built-ins that answer within the scenario
SPEECH_OVER_REST_DB = 10.0  # the user's turns are this much louder than the rest


def load(folder: Path) -> tuple[dict[str, Any], npt.NDArray[np.float64]]:
    """scenario.json and the WAV's samples (float in [-1, 1)), after checking the format."""
    scenario = json.loads((folder / "scenario.json").read_text())
    with wave.open(str(folder / "scenario.wav"), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 16_000)
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    return scenario, pcm.astype(np.float64) / 32768.0


def dbfs(samples: npt.NDArray[np.float64]) -> float:
    return float(10 * np.log10(np.mean(samples**2) + 1e-20))


def check_scenario(folder: Path) -> None:
    scenario, audio = load(folder)
    rate, duration_s = scenario["sample_rate"], scenario["duration_s"]
    assert rate == 16_000 and 30 <= duration_s <= 60
    assert len(audio) == round(duration_s * rate)

    source = scenario["source"]
    assert source["config"] == "train/recipes/demo-set.toml" and source["seed"] == 13
    assert (REPO / source["config"]).is_file()
    parts = source["samples"]
    assert len(parts) == 2 and parts[0]["offset_s"] == 0
    assert parts[1]["offset_s"] == parts[0]["duration_s"]
    assert parts[1]["offset_s"] + parts[1]["duration_s"] == duration_s
    assert set(source["tts"]) == {"espeak-ng", "flite"}

    # the user's turns: in order, inside the timeline, each one's speech in its span
    events = scenario["events"]
    assert {e["kind"] for e in events} <= KINDS
    actions = {(e["kind"], e["action"]) for e in events}
    assert {("backchannel", "continue_speaking"), ("interruption", "revise_response")} <= actions
    assert all(e["text"] and 0 <= e["start_s"] < e["end_s"] <= duration_s for e in events)
    starts = [e["start_s"] for e in events]
    assert starts == sorted(starts)
    spoken = np.zeros(len(audio), bool)
    for e in events:
        spoken[round(e["start_s"] * rate) : round(e["end_s"] * rate)] = True
    rest = dbfs(audio[~spoken])
    for e in events:
        span = audio[round(e["start_s"] * rate) : round(e["end_s"] * rate)]
        assert dbfs(span) > rest + SPEECH_OVER_REST_DB, (e, rest)

    # the data's assistant answers each exchange; a backchannel or an interruption comes
    # while it speaks
    turns = scenario["assistant"]
    assert turns and all(t["text"] and t["start_s"] < t["end_s"] <= duration_s for t in turns)
    for e in events:
        if e["kind"] in ("backchannel", "interruption"):
            assert any(t["start_s"] < e["start_s"] < t["end_s"] for t in turns), e

    # what the capabilities answer: stand-ins, or built-ins that answer at once
    answers = scenario["answers"]
    assert answers and all(a["text"] and a["latency_chunks"] >= 1 for a in answers)
    assert {a["capability"] for a in answers} <= set(STAND_INS) | ANSWERED_AT_ONCE

    with VideoFile(folder / scenario["video"]["path"], size=64) as video:
        assert video.fps == scenario["video"]["fps"]
        assert video.frames == scenario["video"]["frames"]
        assert abs(video.duration_s - duration_s) <= 1 / video.fps
        first, last = video.frame_at(0.0), video.frame_at(duration_s)
        assert first is not None and last is not None
        assert last.seq == video.frames
        assert not np.array_equal(first.image, last.image), "each sample has its own scene"
        assert (last.source_width, last.source_height) == (
            scenario["video"]["width"],
            scenario["video"]["height"],
        )


def test_the_committed_scenario_is_consistent() -> None:
    check_scenario(COMMITTED)


def test_the_committed_assets_stay_small() -> None:
    sizes = {p.name: p.stat().st_size for p in COMMITTED.iterdir() if p.is_file()}
    assert set(sizes) == {"scenario.wav", "scenario.json", "scenario.avi"}
    assert sizes["scenario.avi"] < 1_000_000 and sum(sizes.values()) < 3_000_000


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None or shutil.which("flite") is None,
    reason="needs espeak-ng and flite (apt-get install espeak-ng flite; scripts/test installs "
    "them)",
)
def test_the_script_regenerates_it(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert str(tmp_path / "scenario.wav") in run.stdout
    check_scenario(tmp_path)
    committed, fresh = (
        json.loads((d / "scenario.json").read_text()) for d in (COMMITTED, tmp_path)
    )
    if fresh["source"]["tts"] == committed["source"]["tts"]:
        assert fresh == {**committed, "opencv": fresh["opencv"]}
        wav = "scenario.wav"
        assert (tmp_path / wav).read_bytes() == (COMMITTED / wav).read_bytes()


def test_the_script_names_the_missing_tts_program(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # neither espeak-ng nor flite in it
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert run.returncode == 1
    assert "apt-get install espeak-ng flite" in run.stderr
    assert not list(tmp_path.iterdir()), "nothing written"
