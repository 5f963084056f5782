"""Hand-built Full-Duplex-Bench samples with known answers: espeak-ng speech placed at
exact offsets (hard cuts where the model stops), written as WAV with metadata.json."""

from __future__ import annotations

import json
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from venus.datagen.tts import Voice, synthesize

RATE = 16000
Samples = NDArray[np.float32]


@dataclass(frozen=True)
class Speech:
    """Trimmed clips (16 kHz float32): speech from the first sample to the last."""

    answer: Samples  # ~5.6 s, the model's long reply
    reply: Samples  # ~2.2 s, the model's answer to the overlap
    question: Samples  # ~2 s, the user
    yeah: Samples  # ~0.4 s, a backchannel

    def seconds(self, name: str) -> float:
        clip: Samples = getattr(self, name)
        return len(clip) / RATE


@pytest.fixture(scope="session")
def speech() -> Speech:
    model, user = Voice("espeak-ng", "en-us"), Voice("espeak-ng", "en-us+f3")
    return Speech(
        answer=0.5 * synthesize(
            "the weather tomorrow will be sunny with a light breeze from the west and "
            "temperatures around twenty degrees", model),
        reply=0.5 * synthesize("sure, saturday looks rainy in the morning", model),
        question=0.5 * synthesize("okay wait, what about saturday", user),
        yeah=0.5 * synthesize("yeah", user),
    )  # fmt: skip


def place(duration_s: float, *parts: tuple[float, Samples, float | None]) -> Samples:
    """Silence of ``duration_s`` with each ``(start_s, clip, cut_after_s)`` added at
    ``start_s``, cut (hard) after ``cut_after_s`` seconds of it when not None."""
    out = np.zeros(round(duration_s * RATE), np.float32)
    for start_s, clip, cut_s in parts:
        piece = clip if cut_s is None else clip[: round(cut_s * RATE)]
        a = round(start_s * RATE)
        b = min(a + len(piece), len(out))
        out[a:b] += piece[: b - a]
    return out


def write_wav(path: Path, samples: Samples, rate: int = RATE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pcm = np.clip(np.round(samples.astype(np.float64) * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


class FdbBuilder:
    """Writes samples into ``data/<task>/<id>/`` and outputs into ``outputs/<task>/<id>/``."""

    place = staticmethod(place)
    write_wav = staticmethod(write_wav)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.outputs = root / "outputs"

    def sample(
        self,
        task: str,
        sample_id: str,
        heard: Samples,
        said: Samples | None,
        window: Sequence[float],
        *,
        extra: dict[str, object] | None = None,
        output_rate: int = RATE,
        annotation: str = "metadata.json",
    ) -> Path:
        folder = self.data / task / sample_id
        write_wav(folder / "input.wav", heard)
        meta: object = {"timestamps": list(window), **(extra or {})}
        if annotation != "metadata.json":  # v1: a list of events
            meta = [{"timestamp": list(window)}]
        (folder / annotation).write_text(json.dumps(meta), encoding="utf-8")
        if said is not None:
            if output_rate != RATE:
                import soxr  # type: ignore[import-untyped, unused-ignore]

                said = soxr.resample(said, RATE, output_rate).astype(np.float32)
            write_wav(self.outputs / task / sample_id / "output.wav", said, output_rate)
        return folder


@pytest.fixture
def fdb(tmp_path: Path) -> FdbBuilder:
    return FdbBuilder(tmp_path)


@pytest.fixture(scope="session")
def video_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short `venus datagen` set with Full-Duplex-Bench cuts: video-group samples with
    overlap events (proactive duplex), and an audio-group one (shared by the tests of a
    cut's source: its video, its reply, its assistant)."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    config = parse_config(
        {
            "samples": 4,
            "duration": {"min_s": 10.0, "max_s": 18.0},
            "mix": {
                "sampling": "stratified",
                "group": {"video": 0.5, "audio": 0.5},
                "category": {
                    "offline_understanding": 0.0,
                    "proactive_duplex": 1.0,
                    "delegation": 0.0,
                },
            },
            "output": {"full_duplex_bench": True, "timeline_plots": 0},
        }
    )
    out = tmp_path_factory.mktemp("video") / "set"
    run(config, out, seed=5)
    return out


@pytest.fixture(scope="session")
def delegation_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short `venus datagen` set, mostly delegation samples (seed 4; half of them video)."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    config = parse_config(
        {
            "samples": 8,
            "duration": {"min_s": 8.0, "max_s": 16.0},
            "mix": {
                "sampling": "stratified",
                "group": {"video": 0.5, "audio": 0.5},
                "category": {"offline_understanding": 0.125, "proactive_duplex": 0.125,
                             "delegation": 0.75},
            },
            "output": {"full_duplex_bench": False, "timeline_plots": 0},
        }
    )  # fmt: skip
    out = tmp_path_factory.mktemp("delegation") / "set"
    run(config, out, seed=4)
    return out
