"""A `venus datagen` set as training examples: each sample's flat layout (``layout.py``),
its log-mel (the daemon's own front end, chunk by chunk) and its camera frames (as the
offline path reads them), ready to batch."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.mel import LogMel
from venus.errors import DeviceError, VenusError
from venus.hw.sources import FileAudioSource
from venus.hw.video_file import VideoFile
from venus.train.layout import Encode, Layout, build_layout

__all__ = ["Example", "TrainDataError", "load_examples", "read_index", "sample_texts"]

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000


class TrainDataError(VenusError):
    """The training data cannot be read: the message names the file."""


@dataclass(frozen=True)
class Example:
    sample_id: str
    category: str
    layout: Layout
    mel: NDArray[np.float32]  # [80, chunks * 100]
    frames: NDArray[np.float32] | None  # [n, 3, size, size] in [0, 1], or None (no video)


def read_index(data: Path) -> list[dict[str, Any]]:
    """The set's ``index.jsonl`` records (sample ids, categories), checked."""
    index = data / "index.jsonl"
    if not index.is_file():
        raise TrainDataError(f"--data {data}: no index.jsonl; make the set with `venus datagen`")
    try:
        return [json.loads(line) for line in index.read_text("utf-8").splitlines() if line]
    except (OSError, json.JSONDecodeError) as e:
        raise TrainDataError(f"{index}: not JSON Lines ({e})") from e


def trajectory(data: Path, sample_id: str) -> dict[str, Any]:
    path = data / "samples" / sample_id / "trajectory.json"
    try:
        doc: dict[str, Any] = json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise TrainDataError(f"{path}: cannot be read ({e})") from e
    return doc


def sample_texts(data: Path, records: Sequence[dict[str, Any]]) -> list[str]:
    """Every string the model reads or writes in the set (for the tokenizer)."""
    out: list[str] = []
    for r in records:
        for chunk in trajectory(data, r["sample_id"])["chunks"]:
            out += [chunk["text"], *chunk["delegate"], *chunk["results"]]
    return [t for t in out if t]


def log_mel(path: Path, chunks: int, chunk_s: float = 1.0) -> NDArray[np.float32]:
    """``path``'s log-mel as the daemon computes it offline: the chunks its
    ``FileAudioSource`` reads (16 kHz mono, the last one padded with zeros), each through
    ``LogMel`` with the stream's carry. ``chunks`` of them (silence past the file's end)."""
    front = LogMel(frames=round(chunk_s * 100))
    state = front.new_state()
    silence = np.zeros(round(chunk_s * SAMPLE_RATE), np.float32)
    mels: list[NDArray[np.float32]] = []
    try:
        with FileAudioSource(path, chunk_s=chunk_s) as source:
            for chunk in source:
                if len(mels) == chunks:
                    break
                mels.append(front(chunk.samples, state)[0])
    except DeviceError as e:
        raise TrainDataError(str(e)) from e
    while len(mels) < chunks:
        mels.append(front(silence, state)[0])
    return np.concatenate(mels, axis=1)


def video_frames(path: Path, size: int, chunks: int) -> tuple[NDArray[np.float32], list[int]]:
    """Pixels of the frame each chunk sees (the offline path's ``frame_at(end of chunk)``)
    and, per chunk, the index into them."""
    video = VideoFile(path, size=size)
    images: list[NDArray[np.float32]] = []
    index: list[int] = []
    seen: dict[int, int] = {}
    try:
        for k in range(chunks):
            frame = video.frame_at(float(k + 1))
            if frame is None:
                index.append(-1)
                continue
            key = frame.seq
            if key not in seen:
                seen[key] = len(images)
                images.append((frame.image.astype(np.float32) / 255.0).transpose(2, 0, 1))
            index.append(seen[key])
    finally:
        video.close()
    return np.stack(images) if images else np.zeros((0, 3, size, size), np.float32), index


def _frame_of(index: list[int]) -> Callable[[int], int | None]:
    return lambda k: index[k] if index[k] >= 0 else None


def load_examples(
    data: Path,
    records: Sequence[dict[str, Any]],
    special: dict[str, int],
    encode: Encode,
    *,
    audio_tokens: int,
    vision_tokens: int,
    image_size: int,
    max_text_tokens: int,
    progress: Callable[[int, int], None] = lambda _d, _t: None,
) -> list[Example]:
    out = []
    for n, r in enumerate(records, start=1):
        sid = r["sample_id"]
        t = trajectory(data, sid)
        folder = data / "samples" / sid
        chunks = t["chunks"]
        mel = log_mel(folder / t["files"]["input"], len(chunks), t["chunk_s"])
        frames = None
        index: list[int] = [-1] * len(chunks)
        if image_size and t["files"].get("video"):
            frames, index = video_frames(folder / t["files"]["video"], image_size, len(chunks))
        layout = build_layout(
            chunks, special, encode,
            audio_tokens=audio_tokens, vision_tokens=vision_tokens,
            frames=_frame_of(index), max_text_tokens=max_text_tokens,
        )  # fmt: skip
        out.append(Example(sid, t["category"], layout, mel, frames))
        progress(n, len(records))
    return out
