"""The bundled demo scenario: its WAV, video and scenario.json agree, and it regenerates.

The same checks run on the committed assets (``venus.demo``'s ``scenario/``) and on a
fresh run of ``scripts/make-demo-scenario``; where the TTS engine and version match
the ones recorded, the regenerated audio and events are identical to the committed ones.
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

from venus.hw.video_file import VideoFile

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "make-demo-scenario"
COMMITTED = Path(str(importlib.resources.files("venus.demo") / "scenario"))
KINDS = {"greeting", "question", "backchannel", "interruption", "request"}
SPEECH_DBFS = -35.0  # an event's RMS is at least this
QUIET_DBFS = -55.0  # a gap's RMS is at most this
QUIET_PEAK_DBFS = -40.0  # and no sample in a gap is louder than this
MIN_GAP_S = 0.3  # between one utterance and the next
MARGIN_S = 0.02  # gaps are measured this far from the events around them


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
    assert scenario["tts"]["engine"] in ("espeak-ng", "flite") and scenario["tts"]["version"]
    events = scenario["events"]
    kinds = [e["kind"] for e in events]
    assert set(kinds) <= KINDS and {"backchannel", "interruption"} <= set(kinds)
    assert kinds[0] == "greeting" and "question" in kinds and "request" in kinds

    # one speaker: in order, inside the timeline, never overlapping, with room between
    assert all(e["text"] and 0 <= e["start_s"] < e["end_s"] <= duration_s for e in events)
    bounds = [0.0, *(t for e in events for t in (e["start_s"], e["end_s"])), duration_s]
    gaps = list(zip(bounds[2:-1:2], bounds[3::2], strict=True))  # between events
    assert all(end - start >= MIN_GAP_S for start, end in gaps)
    assert duration_s - events[-1]["end_s"] >= 5, "trailing silence for the last answer"

    # speech where the events say, near silence everywhere else
    for e in events:
        span = audio[round(e["start_s"] * rate) : round(e["end_s"] * rate)]
        assert dbfs(span) > SPEECH_DBFS, e
        frames = span[: len(span) // 320 * 320].reshape(-1, 320)  # 20 ms frames
        loud = np.mean([dbfs(f) > SPEECH_DBFS - 10 for f in frames])
        assert loud > 0.4, (e, loud)
    for start, end in zip(bounds[0::2], bounds[1::2], strict=True):  # around every event
        gap = audio[round((start + MARGIN_S) * rate) : round((end - MARGIN_S) * rate)]
        assert dbfs(gap) < QUIET_DBFS, (start, end)
        assert 20 * np.log10(np.max(np.abs(gap)) + 1e-20) < QUIET_PEAK_DBFS, (start, end)

    # a backchannel or an interruption comes while the assistant would be answering: after
    # a question or request with room for the answer to start, and no other turn between
    for n, e in enumerate(events):
        if e["kind"] in ("backchannel", "interruption"):
            asked = next(p for p in reversed(events[:n]) if p["kind"] != "backchannel")
            assert asked["kind"] in ("question", "interruption", "request"), e
            assert e["start_s"] - asked["end_s"] >= 2.0, e

    with VideoFile(folder / scenario["video"]["path"], size=64) as video:
        assert video.fps == scenario["video"]["fps"]
        assert video.frames == scenario["video"]["frames"]
        assert abs(video.duration_s - duration_s) <= 1 / video.fps
        first, middle = video.frame_at(0.0), video.frame_at(duration_s / 2)
        last = video.frame_at(duration_s)
        assert first is not None and middle is not None and last is not None
        assert last.seq == video.frames
        assert not np.array_equal(first.image, middle.image), "the picture moves"
        assert (last.source_width, last.source_height) == (
            scenario["video"]["width"],
            scenario["video"]["height"],
        )


def test_the_committed_scenario_is_consistent() -> None:
    check_scenario(COMMITTED)


def test_the_committed_assets_stay_small() -> None:
    sizes = {p.name: p.stat().st_size for p in COMMITTED.iterdir() if p.is_file()}
    assert set(sizes) == {"scenario.wav", "scenario.json", "scenario.avi"}
    assert sizes["scenario.avi"] < 1_500_000 and sum(sizes.values()) < 3_000_000


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None and shutil.which("flite") is None,
    reason="needs espeak-ng or flite (apt-get install espeak-ng; scripts/test installs it)",
)
def test_the_script_regenerates_it(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert str(tmp_path / "scenario.wav") in run.stdout
    check_scenario(tmp_path)
    committed, fresh = (
        json.loads((d / "scenario.json").read_text()) for d in (COMMITTED, tmp_path)
    )
    if fresh["tts"] == committed["tts"]:
        assert fresh["events"] == committed["events"]
        wav = "scenario.wav"
        assert (tmp_path / wav).read_bytes() == (COMMITTED / wav).read_bytes()


def test_the_script_names_the_missing_tts_program(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # neither espeak-ng nor flite in it
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert run.returncode == 1
    assert "apt-get install espeak-ng" in run.stderr and "flite" in run.stderr
    assert not list(tmp_path.iterdir()), "nothing written"
