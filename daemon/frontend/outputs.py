"""Offline output files: what the assistant said, aligned sample for sample with the input.

``output.wav`` is the assistant's audio alone, mono 16-bit PCM at the input file's sample
rate and with exactly its frame count, from t = 0: Full-Duplex-Bench's convention, so an
evaluation can line the two files up without timestamps. ``conversation.wav`` puts both
on one stereo file to listen to: the input (mixed to mono) left, the assistant right.
The assistant track is resampled with soxr in one pass (its delay compensated, so sample
0 stays at t = 0), zero-padded or cut to length, and clipped to [-1, 1].
"""

from __future__ import annotations

import logging
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr  # type: ignore[import-untyped, unused-ignore]

from venus.errors import DeviceError
from venus.hw.sources import FileAudioSource, pcm_to_float

__all__ = [
    "CONVERSATION_WAV",
    "OUTPUT_WAV",
    "TIMELINE_JSONL",
    "OutputFiles",
    "read_wav_mono",
    "write_outputs",
]

log = logging.getLogger(__name__)

Samples = npt.NDArray[np.float32]
OUTPUT_WAV = "output.wav"
CONVERSATION_WAV = "conversation.wav"
TIMELINE_JSONL = "timeline.jsonl"  # written beside them by the offline path
_INT16_MAX = 32767  # full scale of 16-bit PCM (symmetric: -32767 .. 32767)


@dataclass(frozen=True)
class OutputFiles:
    output: Path  # the assistant alone, mono
    conversation: Path  # input left, assistant right
    rate_hz: int  # the input file's sample rate
    frames: int  # the input file's frame count, in both files
    clipped_samples: int  # assistant samples beyond [-1, 1] (clipped in both files)


def read_wav_mono(path: Path) -> tuple[Samples, int]:
    """(samples mixed to mono as float32 in [-1, 1), sample rate) of a PCM WAV file
    (8/16/24/32-bit, any rate, any channels).

    Raises:
        DeviceError: the file is missing or not PCM WAV (the message says how to convert).
    """
    src = FileAudioSource(path)  # checks the file and its sample width, with good messages
    try:
        with wave.open(str(path), "rb") as w:
            raw = w.readframes(src.frames)
    except (OSError, wave.Error, EOFError) as e:
        raise DeviceError(f"{path}: cannot read ({e})") from e
    pcm = pcm_to_float(raw, src.sample_width)
    frames = pcm.shape[0] // src.channels
    mono = pcm[: frames * src.channels].reshape(frames, src.channels).mean(axis=1)
    return mono.astype(np.float32, copy=False), src.rate_hz


def write_outputs(
    out_dir: Path, input_wav: Path, assistant: Samples, assistant_rate: int
) -> OutputFiles:
    """Write ``output.wav`` and ``conversation.wav`` into ``out_dir`` (created if needed).

    ``assistant``: mono float samples at ``assistant_rate`` Hz from t = 0 of the input.
    """
    track = np.asarray(assistant, np.float32)
    if track.ndim != 1:
        raise ValueError(f"assistant audio must be mono (1-D), got shape {track.shape}")
    if assistant_rate <= 0:
        raise ValueError(f"assistant_rate must be positive, got {assistant_rate}")
    heard, rate = read_wav_mono(input_wav)
    frames = heard.shape[0]
    aligned = _fit(_resample(track, assistant_rate, rate), frames)
    clipped = int(np.count_nonzero(np.abs(aligned) > 1.0))
    if clipped:
        log.warning("assistant audio: %d samples beyond full scale, clipped", clipped)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / OUTPUT_WAV
    conversation = out_dir / CONVERSATION_WAV
    _write_wav(output, aligned[:, None], rate)
    _write_wav(conversation, np.stack([heard, aligned], axis=1), rate)
    log.info("wrote %s and %s (%d frames at %d Hz)", output, conversation, frames, rate)
    return OutputFiles(output, conversation, rate, frames, clipped)


def _resample(samples: Samples, in_rate: int, out_rate: int) -> Samples:
    if in_rate == out_rate or samples.shape[0] == 0:
        return samples
    out: Samples = soxr.resample(samples, in_rate, out_rate, quality="HQ")
    return out.astype(np.float32, copy=False)


def _fit(samples: Samples, frames: int) -> Samples:
    """Zero-padded or cut to exactly ``frames``."""
    out = np.zeros(frames, np.float32)
    n = min(frames, samples.shape[0])
    out[:n] = samples[:n]
    return out


def _write_wav(path: Path, channels: Samples, rate: int) -> None:
    """Write ``channels`` (frames x channels, float) as 16-bit PCM, clipped to [-1, 1]."""
    pcm = np.round(np.clip(channels, -1.0, 1.0) * _INT16_MAX).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
