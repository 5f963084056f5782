"""Speech units: the output mel the flow decoder predicts, and the speech tokens of the
training speech (a k-means codebook of that mel).

The speech side is speech decoder -> speech tokens (25 Hz) -> flow decoder -> mel (50 Hz)
-> vocoder -> 24 kHz PCM. CosyVoice's S3 tokenizer, whose codes the architecture was
drawn for, cannot be downloaded here, so the tiny model's tokens are made from the mel
itself:

- **Output mel** (``output_mel``): 24 kHz PCM, hop 480 (20 ms, 50 frames/s, the vocoder's
  upsampling product), a 960-sample Hann window centred on its hop inside a 1024-point
  FFT, 80 Slaney mel bands 0-8000 Hz over the magnitude spectrum, ``ln(max(mel, 1e-5))``
  (the HiFi-GAN / CosyVoice recipe). Frame ``i`` is centred on the centre of hop ``i``
  (the audio of ``[i * 20 ms, (i + 1) * 20 ms)``, its window reaching 10 ms either side);
  ``len(pcm) // 480`` frames. The training speech is 16 kHz, resampled with soxr ("HQ"),
  so the top bands hold the resampler's roll-off just below 8 kHz.
- **Tokens** (``Codebook``): k-means of pairs of consecutive per-bin-standardised
  (``MelStats``) frames, 160 features a token, so one token is 2 frames (the flow
  decoder's ``frames_per_token``) and 25 tokens a second (the speech decoder's rate).
  K = 1024 of the 6561 ids the model's vocabulary has room for: enough for the data's
  few TTS voices, few enough that each code is seen often in a small set.
  Code ``SILENCE`` (0) is fixed to digital silence (every bin at the log floor), which the
  assistant track holds between turns and past its end; the other K - 1 are fitted.
- **Fitting** (``fit_units``) sees only where the assistant speaks: a token is kept when
  either of its frames' 20 ms hop is above ``SPEECH_FLOOR_DBFS`` (-60 dBFS RMS). The
  assistant track is exact zeros between turns (half of it or more); the TTS's own pauses
  sit near -65 dBFS and are left to the silence code and the quietest centroids.
"""

from __future__ import annotations

import logging
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import numpy as np
import soxr  # type: ignore[import-untyped, unused-ignore]
import torch
from numpy.typing import NDArray
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file
from torch import Tensor

from venus.engines.mel import hann, mel_filterbank
from venus.errors import DeviceError
from venus.export.model.config import (
    OUTPUT_MEL_FMAX_HZ,
    OUTPUT_MEL_N_FFT,
    OUTPUT_MEL_WINDOW,
    S3_VOCAB,
)
from venus.hw.sources import FileAudioSource, pcm_to_float
from venus.train.data import TrainDataError

__all__ = [
    "FRAME_PAD", "Codebook", "MelStats", "chunk_units", "decided_units", "fit_units",
    "frame_window", "kmeans", "mel_filters", "output_mel", "read_speech", "speech_frames",
]  # fmt: skip

log = logging.getLogger(__name__)

SAMPLE_RATE: Final = 24000  # the vocoder's output rate
HOP: Final = 480  # 20 ms at 24 kHz: 50 frames/s
N_FFT: Final = OUTPUT_MEL_N_FFT  # 1024
WINDOW: Final = OUTPUT_MEL_WINDOW  # 960: a 40 ms Hann (two hops), centred in the FFT frame
N_MELS: Final = 80
FMAX_HZ: Final = OUTPUT_MEL_FMAX_HZ  # 8 kHz
LOG_FLOOR: Final = 1e-5  # mel magnitude floor before ln (digital silence: ln(1e-5) = -11.5)
FRAMES_PER_TOKEN: Final = 2  # the flow decoder's frames_per_token
TOKENS_PER_S: Final = SAMPLE_RATE // (HOP * FRAMES_PER_TOKEN)  # 25, the speech decoder's rate
FEATURES: Final = N_MELS * FRAMES_PER_TOKEN  # 160 a token
SILENCE: Final = 0  # the code of digital silence
DEFAULT_K: Final = 1024
SPEECH_FLOOR_DBFS: Final = -60.0  # a hop's RMS above this is speech (for fitting only)
STD_FLOOR: Final = 1e-2  # per-bin std floor (log units)
BATCH: Final = 8192  # tokens per distance block: 8192 x 1024 floats = 32 MiB
FORMAT: Final = "venus-speech-units"
FORMAT_VERSION: Final = "1"
ASSISTANT_WAV: Final = "assistant.wav"

FRAME_PAD: Final = (N_FFT - HOP) // 2  # 272: frame i spans samples [i*HOP - 272, i*HOP + 752)

Mel = NDArray[np.float32]  # [N_MELS, frames] natural-log mel
Codes = NDArray[np.int64]


@cache
def mel_filters() -> NDArray[np.float64]:
    """[N_MELS, N_FFT // 2 + 1] Slaney-normalised triangles 0..FMAX_HZ (librosa's
    ``filters.mel(sr=24000, n_fft=1024, n_mels=80, fmax=8000)``)."""
    return mel_filterbank(N_MELS, N_FFT, SAMPLE_RATE, FMAX_HZ)


@cache
def frame_window() -> NDArray[np.float64]:
    out = np.zeros(N_FFT)
    start = (N_FFT - WINDOW) // 2
    out[start : start + WINDOW] = hann(WINDOW)
    return out


def output_mel(pcm: NDArray[np.float32]) -> Mel:
    """The output mel [80, len(pcm) // 480] of 24 kHz mono ``pcm`` (zeros outside it)."""
    frames = len(pcm) // HOP
    if frames == 0:
        return np.zeros((N_MELS, 0), np.float32)
    padded = np.zeros(frames * HOP + N_FFT - HOP)
    padded[FRAME_PAD : FRAME_PAD + frames * HOP] = pcm[: frames * HOP]
    windows = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    spectrum = np.abs(np.fft.rfft(windows * frame_window(), axis=-1))
    mel: NDArray[np.float64] = np.einsum("mf,tf->mt", mel_filters(), spectrum)  # no BLAS pool
    return np.log(np.maximum(mel, LOG_FLOOR)).astype(np.float32)


def speech_frames(pcm: NDArray[np.float32]) -> NDArray[np.bool_]:
    """[len(pcm) // 480]: whether each 20 ms hop's RMS is above ``SPEECH_FLOOR_DBFS``."""
    frames = len(pcm) // HOP
    hops = pcm[: frames * HOP].astype(np.float64).reshape(frames, HOP)
    out: NDArray[np.bool_] = np.mean(hops**2, axis=1) > 10.0 ** (SPEECH_FLOOR_DBFS / 10)
    return out


def read_speech(path: Path) -> NDArray[np.float32]:
    """A PCM WAV file as 24 kHz mono float32 (soxr "HQ", delay compensated)."""
    try:
        rate = FileAudioSource(path).rate_hz  # checks the file, with the usual messages
        with wave.open(str(path), "rb") as w:
            channels, width = w.getnchannels(), w.getsampwidth()
            raw = w.readframes(w.getnframes())
    except DeviceError as e:
        raise TrainDataError(str(e)) from e
    except (OSError, wave.Error, EOFError) as e:
        raise TrainDataError(f"{path}: cannot read ({e})") from e
    pcm = pcm_to_float(raw, width)
    mono: NDArray[np.float32] = pcm[: len(pcm) // channels * channels].reshape(-1, channels)
    mono = mono.mean(axis=1, dtype=np.float32)
    if rate == SAMPLE_RATE or mono.size == 0:
        return mono
    out: NDArray[np.float32] = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    return out.astype(np.float32, copy=False)


@dataclass(frozen=True, eq=False)
class MelStats:
    """Per-bin mean and std of the training mel: tokens are fitted in these units."""

    mean: NDArray[np.float32]  # [80] log units
    std: NDArray[np.float32]  # [80] log units, at least STD_FLOOR

    @classmethod
    def fit(cls, mel: Mel) -> MelStats:
        x = mel.astype(np.float64)
        std = np.maximum(x.std(axis=1), STD_FLOOR)
        return cls(x.mean(axis=1).astype(np.float32), std.astype(np.float32))

    def normalise(self, mel: Mel) -> Mel:
        return ((mel - self.mean[:, None]) / self.std[:, None]).astype(np.float32)

    def denormalise(self, z: Mel) -> Mel:
        return (z * self.std[:, None] + self.mean[:, None]).astype(np.float32)


def _nearest(x: Tensor, centroids: Tensor, batch: int) -> tuple[Tensor, Tensor]:
    """(index of the nearest centroid [n], squared distance to it [n]), ``batch`` rows of
    the [n, k] distance matrix at a time."""
    c_norm = (centroids * centroids).sum(1)
    codes, dists = [], []
    for start in range(0, len(x), batch):
        xb = x[start : start + batch]
        d, i = (c_norm[None, :] - 2.0 * xb @ centroids.T).min(1)
        codes.append(i)
        dists.append((d + (xb * xb).sum(1)).clamp(min=0.0))
    return torch.cat(codes), torch.cat(dists)


def kmeans(x: Tensor, k: int, *, iterations: int, seed: int, batch: int = BATCH) -> Tensor:
    """Lloyd's k-means of the rows of ``x`` [n, d] -> centroids [k, d]. Starts from ``k``
    distinct rows drawn with ``seed``; a cluster left empty takes the row that fits its
    own centroid worst. Stops early once no assignment changes. Deterministic."""
    if len(x) < k:
        raise ValueError(f"k-means of {len(x)} rows into {k} clusters: need at least {k} rows")
    gen = torch.Generator().manual_seed(seed)
    centroids = x[torch.randperm(len(x), generator=gen)[:k]].clone()
    previous: Tensor | None = None
    for it in range(iterations):
        codes, dist = _nearest(x, centroids, batch)
        sums = torch.zeros(k, x.shape[1], dtype=torch.float64)
        for start in range(0, len(x), batch):
            sums.index_add_(0, codes[start : start + batch], x[start : start + batch].double())
        counts = torch.bincount(codes, minlength=k)
        centroids = (sums / counts.clamp(min=1)[:, None]).float()
        empty = counts == 0
        if empty.any():
            centroids[empty] = x[dist.topk(int(empty.sum())).indices]
        log.debug("k-means %d/%d: mse/dim %.4f, %d empty", it + 1, iterations,
                  float(dist.mean()) / x.shape[1], int(empty.sum()))  # fmt: skip
        if previous is not None and torch.equal(codes, previous) and not empty.any():
            break
        previous = codes
    return centroids


@dataclass(frozen=True, eq=False)
class Codebook:
    """Speech tokens: each code a pair of normalised mel frames (row ``SILENCE`` is
    digital silence). ``encode`` and ``decode`` take and give log-mel [80, 2n]."""

    stats: MelStats
    centroids: NDArray[np.float32]  # [K, 160]: frame 2j's 80 bins, then frame 2j+1's

    @property
    def size(self) -> int:
        return len(self.centroids)

    @staticmethod
    def silence(stats: MelStats) -> NDArray[np.float32]:
        """The token of digital silence [160], in normalised units."""
        floor = np.full((N_MELS, FRAMES_PER_TOKEN), np.log(LOG_FLOOR), np.float32)
        out: NDArray[np.float32] = _tokens(stats.normalise(floor))[0]
        return out

    @classmethod
    def fit(
        cls, stats: MelStats, tokens: NDArray[np.float32], k: int = DEFAULT_K,
        *, iterations: int = 20, seed: int = 0,
    ) -> Codebook:  # fmt: skip
        """k - 1 centroids of ``tokens`` [n, 160] (normalised pairs) after ``SILENCE``."""
        fitted = kmeans(torch.from_numpy(tokens), k - 1, iterations=iterations, seed=seed)
        return cls(stats, np.concatenate([cls.silence(stats)[None], fitted.numpy()]))

    def encode(self, mel: Mel) -> Codes:
        """Codes [n] of log-mel [80, 2n]."""
        if mel.ndim != 2 or mel.shape[0] != N_MELS or mel.shape[1] % FRAMES_PER_TOKEN:
            raise ValueError(f"encode needs log-mel [80, 2n], got {mel.shape}")
        x = torch.from_numpy(_tokens(self.stats.normalise(mel)))
        codes, _ = _nearest(x, torch.from_numpy(self.centroids), BATCH)
        return codes.numpy()

    def decode(self, codes: Codes) -> Mel:
        """Log-mel [80, 2n] of codes [n]: each code's centroid, de-normalised."""
        z = self.centroids[codes].reshape(-1, N_MELS).T
        return self.stats.denormalise(np.ascontiguousarray(z))

    def save(self, path: Path) -> None:
        tensors = {"centroids": self.centroids, "mean": self.stats.mean, "std": self.stats.std}
        save_file(tensors, str(path), metadata={"format": FORMAT, "version": FORMAT_VERSION})

    @classmethod
    def load(cls, path: Path) -> Codebook:
        try:
            with safe_open(str(path), framework="np") as f:
                meta: dict[str, str] = f.metadata() or {}
                t: dict[str, Any] = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
        except (OSError, SafetensorError) as e:
            raise TrainDataError(f"{path}: not a speech codebook ({e})") from e
        got = (meta.get("format"), meta.get("version"))
        if got != (FORMAT, FORMAT_VERSION):
            raise TrainDataError(
                f"{path}: format {got}, expected ({FORMAT!r}, {FORMAT_VERSION!r}); "
                "fit the codebook again with this version"
            )
        if set(t) != {"centroids", "mean", "std"}:
            raise TrainDataError(f"{path}: tensors {sorted(t)}, expected centroids, mean, std")
        centroids, mean, std = (np.asarray(t[n], np.float32) for n in ("centroids", "mean", "std"))
        if (
            centroids.ndim != 2 or centroids.shape[1] != FEATURES or len(centroids) < 2
            or mean.shape != (N_MELS,) or std.shape != (N_MELS,) or not (std > 0).all()
            or not np.isfinite(centroids).all()
        ):  # fmt: skip
            raise TrainDataError(
                f"{path}: centroids {centroids.shape}, mean {mean.shape}, std {std.shape}: "
                f"not a speech codebook (expected [K, {FEATURES}], [{N_MELS}], [{N_MELS}])"
            )
        return cls(MelStats(mean, std), centroids)


def _tokens(z: Mel) -> NDArray[np.float32]:
    """[80, 2n] -> [n, 160] (frame 2j's bins, then frame 2j+1's)."""
    return np.ascontiguousarray(z.T).reshape(-1, FEATURES)


def chunk_units(assistant_wav: Path, chunks: int, chunk_s: float, codebook: Codebook) -> Codes:
    """Codes [chunks, 25 * chunk_s]: row k is the assistant's speech in seconds
    ``[k * chunk_s, (k + 1) * chunk_s)``, digital silence past the file's end."""
    per_chunk = round(chunk_s * TOKENS_PER_S)
    if per_chunk < 1 or abs(per_chunk - chunk_s * TOKENS_PER_S) > 1e-6:
        raise ValueError(f"chunk_s {chunk_s}: must be a whole number of 40 ms tokens")
    samples = chunks * per_chunk * FRAMES_PER_TOKEN * HOP
    pcm = np.zeros(samples, np.float32)
    speech = read_speech(assistant_wav)[:samples]
    pcm[: len(speech)] = speech
    return codebook.encode(output_mel(pcm)).reshape(chunks, per_chunk)


def decided_units(assistant_wav: Path, chunks: int, chunk_s: float, codebook: Codebook) -> Codes:
    """Codes [chunks, 25 * chunk_s]: row k is the speech *decided* in chunk k, which is
    heard in the next one (``[(k + 1) * chunk_s, (k + 2) * chunk_s)``; docs/timeline.md,
    ``datagen/align.py``). The daemon likewise plays chunk k's speech from the end of chunk
    k. These are the speech decoder's targets for chunk k's text."""
    return chunk_units(assistant_wav, chunks + 1, chunk_s, codebook)[1:]


def fit_units(
    data: Path, records: Sequence[dict[str, Any]], k: int = DEFAULT_K,
    *, iterations: int = 20, seed: int = 0,
    progress: Callable[[int, int], None] = lambda _d, _t: None,
) -> tuple[MelStats, Codebook]:  # fmt: skip
    """Mel statistics and a ``k``-code codebook of the speech in the records'
    ``assistant.wav`` (``codebook.stats`` is the returned stats)."""
    if not 2 <= k <= S3_VOCAB:
        raise ValueError(f"k {k}: must be in [2, {S3_VOCAB}] (the model's speech codebook)")
    kept: list[NDArray[np.float32]] = []
    for n, r in enumerate(records, start=1):
        pcm = read_speech(data / "samples" / r["sample_id"] / ASSISTANT_WAV)
        mel, active = output_mel(pcm), speech_frames(pcm)
        pairs = mel.shape[1] // FRAMES_PER_TOKEN
        voiced = active[: pairs * FRAMES_PER_TOKEN].reshape(pairs, -1).any(axis=1)
        kept.append(_tokens(mel[:, : pairs * FRAMES_PER_TOKEN])[voiced])
        progress(n, len(records))
    raw = np.concatenate(kept) if kept else np.zeros((0, FEATURES), np.float32)
    if len(raw) < k:
        raise TrainDataError(
            f"{data}: {len(raw)} tokens of assistant speech in {len(records)} samples, "
            f"fewer than the {k} codes; fit on more samples or a smaller k"
        )
    stats = MelStats.fit(raw.reshape(-1, N_MELS).T)
    tokens = _tokens(stats.normalise(raw.reshape(-1, N_MELS).T))
    log.info("fitting %d speech codes to %d tokens (%.0f s of speech)", k, len(tokens),
             len(tokens) / TOKENS_PER_S)  # fmt: skip
    return stats, Codebook.fit(stats, tokens, k, iterations=iterations, seed=seed)
