"""Speech for the VAD's tests: espeak-ng's voice at 16 kHz, and babble made of it (many
copies at random offsets, summed: a room full of talk, steady in level)."""

from __future__ import annotations

import io
import subprocess
import wave

import numpy as np
import soxr

from support.services import require_binary

RATE = 16000


def espeak(text: str) -> np.ndarray:
    """espeak-ng saying ``text``, float32 at 16 kHz, trimmed to start at its first sound."""
    binary = require_binary("espeak-ng", "espeak-ng")
    wav = subprocess.run(
        [binary, "--stdout", text], capture_output=True, check=True, timeout=30
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    x = soxr.resample(pcm.astype(np.float32) / 32768, rate, RATE).astype(np.float32)
    sound = np.flatnonzero(np.abs(x) > 0.01)
    return x[sound[0] : sound[-1] + 1]


def at_dbfs(x: np.ndarray, dbfs: float) -> np.ndarray:
    """``x`` scaled to an RMS of ``dbfs``."""
    return (x / np.sqrt(np.mean(x**2)) * 10 ** (dbfs / 20)).astype(np.float32)


def babble(speech: np.ndarray, seconds: float, dbfs: float, talkers: int = 8) -> np.ndarray:
    """``talkers`` copies of ``speech`` looped at random offsets (seeded), at ``dbfs``."""
    n = round(seconds * RATE)
    loop = np.resize(speech, n)
    rng = np.random.default_rng(0)
    room = sum(np.roll(loop, int(rng.integers(n))) for _ in range(talkers))
    return at_dbfs(np.asarray(room, np.float32), dbfs)
