"""Inputs for the frontend tests: a configuration, WAV and video files."""

from __future__ import annotations

import dataclasses
import wave
from pathlib import Path
from typing import Any

import numpy as np

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.timeline import ChunkRecord


def config(engines: Path, **schedule: object) -> VenusConfig:
    cfg = VenusConfig()
    return dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, engines=engines),
        schedule=dataclasses.replace(cfg.schedule, **schedule),
    )


def write_wav(path: Path, seconds: float, rate: int = 16000, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 0.5 * t) > 0)
    x += 0.01 * rng.standard_normal(t.size)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int, int]:
    with wave.open(str(path), "rb") as w:
        raw = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return raw.reshape(-1, w.getnchannels()) / 32768.0, w.getframerate(), w.getnchannels()


def write_video(path: Path, seconds: float, fps: float = 4.0) -> None:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (96, 64))
    for i in range(round(seconds * fps)):
        frame = np.full((64, 96, 3), (i * 9) % 255, np.uint8)
        writer.write(frame)
    writer.release()


def chunk_record(**fields: Any) -> ChunkRecord:
    """A ChunkRecord of a quiet listening chunk, with ``fields`` changed."""
    values: dict[str, Any] = dict(
        index=0, start_s=0.0, decision="listen", text="", text_tokens=0, speech_tokens=0,
        reply_id=None, reply_ended=False, delegations=(), results=(), context_tokens=10,
        evicted_tokens=0, vision=False, speech_ratio=0.0, playback_stopped=False,
        latency_ms={"total": 1.0}, deadline_missed=False, degraded=(),
    )  # fmt: skip
    values.update(fields)
    return ChunkRecord(**values)
