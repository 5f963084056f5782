"""A `venus datagen` set as training examples: each sample's flat layout (``layout.py``),
its log-mel (the daemon's own front end, chunk by chunk) and its camera frames (as the
offline path reads them), ready to batch."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.mel import LogMel
from venus.errors import DeviceError, VenusError
from venus.hw.sources import FileAudioSource
from venus.hw.video_file import VideoFile
from venus.train.addressee import chunk_addressees
from venus.train.heard import Heard, heard_turns
from venus.train.layout import Encode, Layout, build_layout

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from venus.export.model.config import ModelConfig

__all__ = [
    "Builder",
    "Example",
    "TrainDataError",
    "crop_starts",
    "cropped",
    "layout_builder",
    "load_examples",
    "read_index",
    "sample_texts",
]

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
MIN_CROP_CHUNKS = 4  # a crop keeps at least this many chunks
UNANSWERED = ("backchannel", "aside")  # the user's turns no reply follows

Chunks = Sequence[Mapping[str, Any]]
Builder = Callable[[Chunks, Callable[[int], int | None]], Layout]  # (chunks, frame of chunk)
Units = Callable[[Path, int, float], NDArray[np.int64]]  # (assistant.wav, chunks, chunk_s)


class TrainDataError(VenusError):
    """The training data cannot be read: the message names the file."""


@dataclass(frozen=True)
class Example:
    sample_id: str
    category: str
    layout: Layout
    mel: NDArray[np.float32]  # [80, chunks * 100]
    frames: NDArray[np.float32] | None  # [n, 3, size, size] in [0, 1], or None (no video)
    chunks: tuple[Mapping[str, Any], ...] = ()  # the trajectory's chunks
    frame_index: tuple[int, ...] = ()  # per chunk: its frame in ``frames``, -1 for none
    crops: tuple[int, ...] = ()  # chunks a crop may start at (``crop_starts``)
    start: int = 0  # the chunk of the trajectory this example starts at
    units: NDArray[np.int64] | None = None  # [chunks, per chunk] speech units, or None
    heard: tuple[Heard, ...] = ()  # the user's turns, in the trajectory's chunks (heard.py)
    addressed: tuple[int, ...] = ()  # per chunk: whom its speech is for (addressee.py)

    @property
    def decisions(self) -> list[str]:
        return [str(c["decision"]) for c in self.chunks]


def crop_starts(
    chunks: Chunks,
    delegations: Sequence[Mapping[str, Any]] = (),
    min_chunks: int = MIN_CROP_CHUNKS,
    turns: Sequence[Mapping[str, Any]] = (),
    chunk_s: float = 1.0,
) -> list[int]:
    """Chunks a sample may be cut to start at, as the daemon joins a conversation (and as
    the Full-Duplex-Bench cuts do, from the user's last question): the assistant listened
    in the chunk before (no reply is cut in two), no result or cancel after the start
    belongs to a call made before it (the trajectory's ``delegations``; nothing refers to
    what the crop never saw), and ``min_chunks`` chunks are left. With the trajectory's
    ``turns``, also no turn of the user's runs across the cut, and the assistant's next
    reply after it follows something the user says after it: a crop never opens on a
    reply to words it cut off (which taught the model to answer a question it had not
    heard, and to start speaking into silence; docs/training-log.md, thirteenth round)."""
    blocked: set[int] = set()  # starts that would cut a call from its result or cancel
    for d in delegations:
        later = [c for c in (d.get("result_chunk"), d.get("cancel_chunk")) if c is not None]
        if later:
            blocked.update(range(int(d["call_chunk"]) + 1, max(later) + 1))
    user = [(float(t["start_s"]), float(t["end_s"]), t.get("role")) for t in turns
            if t.get("speaker") == "user"]  # fmt: skip
    said = sorted(a for a, _, role in user if role not in UNANSWERED)

    def hears_first(start: int) -> bool:
        cut_s = start * chunk_s
        if any(a < cut_s < b for a, b, _ in user):
            return False
        reply = next((k for k in range(start, len(chunks)) if chunks[k]["decision"] != "listen"),
                     None)  # fmt: skip
        return reply is None or any(cut_s <= a < reply * chunk_s for a in said)

    return [
        start
        for start in range(1, len(chunks) - min_chunks + 1)
        if chunks[start - 1]["decision"] == "listen"
        and start not in blocked
        and (not turns or hears_first(start))
    ]


def cropped(example: Example, start: int, build: Builder) -> Example:
    """``example`` from chunk ``start`` on: its layout rebuilt over the later chunks (audio
    slots and the encoder's left context start afresh, as in a daemon started there) and
    its log-mel from that chunk. The mel front end's carry at the cut (the overlap of one
    STFT window, 240 samples: 1.5 hops) is the earlier audio's, where a fresh daemon has
    zeros: at most the first two frames differ."""
    if start == 0:
        return example
    per_chunk = example.mel.shape[1] // len(example.chunks)
    index = example.frame_index[start:]
    layout = build(example.chunks[start:], _frame_of(list(index)))
    return replace(
        example,
        layout=layout,
        mel=np.ascontiguousarray(example.mel[:, start * per_chunk :]),
        chunks=example.chunks[start:],
        frame_index=index,
        crops=(),
        start=example.start + start,
        addressed=example.addressed[start:],
        units=None if example.units is None else example.units[start:],
    )


def read_index(data: Path, option: str = "--data") -> list[dict[str, Any]]:
    """The set's ``index.jsonl`` records (sample ids, categories), checked; ``option``
    names where the set was given."""
    index = data / "index.jsonl"
    if not index.is_file():
        raise TrainDataError(f"{option} {data}: no index.jsonl; make the set with `venus datagen`")
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


def layout_builder(
    special: Mapping[str, int],
    encode: Encode,
    *,
    audio_tokens: int,
    vision_tokens: int,
    max_text_tokens: int,
) -> Builder:
    """``build_layout`` with the model's figures bound: ``(chunks, frame of chunk) -> Layout``."""

    def build(chunks: Chunks, frames: Callable[[int], int | None]) -> Layout:
        return build_layout(
            chunks, special, encode,
            audio_tokens=audio_tokens, vision_tokens=vision_tokens,
            frames=frames, max_text_tokens=max_text_tokens,
        )  # fmt: skip

    return build


def model_layout(model_cfg: ModelConfig, tokenizer: Tokenizer, max_text_tokens: int) -> Builder:
    """``layout_builder`` with ``model_cfg``'s special tokens and token counts, and the text
    ids of ``tokenizer`` (a run's, or a checkpoint's)."""

    def encode(text: str) -> list[int]:
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    vision = model_cfg.vision
    return layout_builder(
        model_cfg.special_token_ids, encode,
        audio_tokens=model_cfg.audio_tokens_per_chunk,
        vision_tokens=vision.queries if vision is not None else 0,
        max_text_tokens=max_text_tokens,
    )  # fmt: skip


def load_examples(
    data: Path,
    records: Sequence[dict[str, Any]],
    build: Builder,
    *,
    image_size: int,
    units: Units | None = None,
    progress: Callable[[int, int], None] = lambda _d, _t: None,
    jobs: int = 1,
) -> list[Example]:
    """Every record's example, in order; with ``units`` (``(assistant.wav, chunks,
    chunk_s) -> codes``, ``speech_units.decided_units`` with a codebook) also its speech
    units per chunk. ``jobs`` > 1 loads in that many forked processes (the builder is a
    closure over the tokenizer, so the workers inherit it rather than unpickle it)."""
    load = partial(_load_example, data, build, image_size, units)
    if jobs <= 1 or len(records) < 2:
        out = []
        for n, r in enumerate(records, start=1):
            out.append(load(r))
            progress(n, len(records))
        return out
    import cv2

    try:
        import threadpoolctl  # noqa: F401 - the workers' (_one_thread); checked here, once
    except ImportError:
        raise TrainDataError(
            "--jobs loads in processes with threadpoolctl: pip install "
            "'realtime-venus[export]' (or threadpoolctl), or load in one (--jobs 1)"
        ) from None
    _LOADING["load"] = load
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # OpenCV's pool stopped here: a forked copy of it would hang
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(min(jobs, len(records)), context, _one_thread) as pool:
            out = []
            for n, example in enumerate(pool.map(_load_forked, records, chunksize=4), start=1):
                out.append(example)
                progress(n, len(records))
            return out
    except BrokenProcessPool:
        raise TrainDataError(
            f"--data {data}: a loading process died (out of memory?); try fewer --jobs"
        ) from None
    finally:
        _LOADING.clear()
        cv2.setNumThreads(threads)


_LOADING: dict[str, Callable[[Mapping[str, Any]], Example]] = {}  # the forked workers' loader


def _one_thread() -> None:
    """A loader process computes with one thread: the libraries' pools, inherited sized
    for every CPU, would otherwise put jobs x CPUs threads on the CPUs (measured on 16
    cores: 16 processes loaded no faster than one), and torch's, used in the parent
    before the fork, hangs a child that uses it (OpenCV's is stopped before the fork)."""
    from threadpoolctl import threadpool_limits

    _LIMITS.append(threadpool_limits(1))  # BLAS and OpenMP; kept, as it lasts while held
    if "torch" in sys.modules:  # the speech units' quantizer
        sys.modules["torch"].set_num_threads(1)


_LIMITS: list[object] = []


def _load_forked(record: Mapping[str, Any]) -> Example:
    return _LOADING["load"](record)  # set by load_examples before the fork


def _load_example(
    data: Path, build: Builder, image_size: int, units: Units | None, r: Mapping[str, Any]
) -> Example:
    sid = r["sample_id"]
    t = trajectory(data, sid)
    folder = data / "samples" / sid
    chunks = t["chunks"]
    mel = log_mel(folder / t["files"]["input"], len(chunks), t["chunk_s"])
    frames = None
    index: list[int] = [-1] * len(chunks)
    if image_size and t["files"].get("video"):
        frames, index = video_frames(folder / t["files"]["video"], image_size, len(chunks))
    layout = build(chunks, _frame_of(index))
    codes = None
    if units is not None:
        codes = units(folder / t["files"]["assistant"], len(chunks), t["chunk_s"])
    return Example(sid, t["category"], layout, mel, frames,
                   chunks=tuple(chunks), frame_index=tuple(index),
                   crops=tuple(crop_starts(chunks, t.get("delegations", ()), turns=t["turns"],
                                           chunk_s=t["chunk_s"])),
                   units=codes,
                   heard=heard_turns(t["turns"], t["chunk_s"]),
                   addressed=chunk_addressees(t["turns"], len(chunks), t["chunk_s"]))  # fmt: skip
