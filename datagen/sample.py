"""One sample, written: ``generate_sample(config, index, seed, out) -> SampleRecord``.

``out/samples/<sample_id>/`` holds ``trajectory.json`` (``venus.datagen.trajectory``),
``input.wav``, ``clean_input.wav`` and ``assistant.wav`` (16 kHz mono PCM16; the mixes
peak at -1 dBFS, so nothing clips) and, in the video group, ``video.avi`` (MJPG, one frame
per chunk). The directory is written under a temporary name in ``out/samples`` and
renamed into place, so an interrupted run never leaves half a sample under the real
name (a leftover ``.tmp-`` directory is the runner's to remove). The same config, index
and seed give the same bytes in every file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import wave
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import get_args

import numpy as np
from numpy.typing import NDArray

from venus.datagen.align import build_trajectory
from venus.datagen.config import GenerationConfig
from venus.datagen.plan import EventKind
from venus.datagen.realize import SAMPLE_RATE, realize, video_scene
from venus.datagen.trajectory import Files
from venus.datagen.tts import SynthesisCache
from venus.datagen.video import write_frames
from venus.errors import DatagenError

FILES = Files("input.wav", "clean_input.wav", "assistant.wav", "video.avi")
TRAJECTORY = "trajectory.json"
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)  # the plan's order
PCM_FULL_SCALE = 32767  # PCM16: float 1.0 is 32767


class SampleError(DatagenError):
    """A sample's files could not be written."""


@dataclass(frozen=True)
class SampleRecord:
    """A written sample, as a line of ``index.jsonl``: ``events`` counts the overlap
    events by kind (every kind, in a fixed order), ``overlap_s`` is their windows' total
    length, ``path`` the trajectory relative to the set's directory and ``sha256`` its
    digest."""

    sample_id: str
    index: int
    group: str
    category: str
    duration_s: float
    events: dict[str, int]
    delegations: int
    overlap_s: float
    path: str
    sha256: str

    def to_json(self) -> str:
        """One compact line, keys in field order."""
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))


def generate_sample(
    config: GenerationConfig,
    index: int,
    seed: int,
    out: Path,
    *,
    cache: SynthesisCache | None = None,
) -> SampleRecord:
    """Realize, align and write sample ``index`` of the set ``seed`` under ``out``."""
    r = realize(config, index, seed, cache=cache)
    plan = r.plan
    files = FILES if plan.scene is not None else replace(FILES, video=None)
    trajectory = build_trajectory(r, files)
    text = trajectory.to_json().encode()
    samples = Path(out) / "samples"
    final = samples / plan.sample_id
    staging = samples / f".tmp-{plan.sample_id}-{os.getpid()}"
    try:
        _remove(staging)
        staging.mkdir(parents=True)
        write_wav(staging / files.input, r.input)
        write_wav(staging / files.clean_input, r.clean_input)
        write_wav(staging / files.assistant, r.assistant)
        if plan.scene is not None and files.video is not None:
            s = plan.scene
            write_frames(video_scene(s), plan.duration_s, staging / files.video,
                         fps=1 / plan.chunk_s, size=(s.width_px, s.height_px))  # fmt: skip
        (staging / TRAJECTORY).write_bytes(text)
        _remove(final)
        staging.rename(final)
    except BaseException as e:
        _remove(staging)
        if isinstance(e, OSError):
            raise SampleError(
                f"{final}: {e.strerror or e}; check that the output directory is writable "
                "and has space, then run again"
            ) from e
        raise
    counts = Counter(e.kind for e in trajectory.events)
    return SampleRecord(
        plan.sample_id, plan.index, plan.group, plan.category, plan.duration_s,
        {kind: counts[kind] for kind in EVENT_KINDS}, len(trajectory.delegations),
        round(math.fsum(b - a for a, b in r.windows_s), 6),
        f"samples/{plan.sample_id}/{TRAJECTORY}", hashlib.sha256(text).hexdigest(),
    )  # fmt: skip


def write_wav(path: Path, audio: NDArray[np.float32]) -> None:
    """``audio`` (float, within +-1) as 16 kHz mono PCM16."""
    pcm = np.clip(np.round(audio.astype(np.float64) * PCM_FULL_SCALE), -32768, 32767)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.astype("<i2").tobytes())


def read_wav(path: Path) -> NDArray[np.float32]:
    """A 16 kHz mono PCM16 file as float32 (the inverse of ``write_wav``)."""
    with wave.open(str(path), "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, SAMPLE_RATE):
            raise ValueError(f"{path}: not 16 kHz mono PCM16")
        raw = w.readframes(w.getnframes())
    return (np.frombuffer(raw, "<i2").astype(np.float32) / PCM_FULL_SCALE).astype(np.float32)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
