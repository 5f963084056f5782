"""The streaming Whisper log-mel front end: microphone PCM -> one chunk of log-mel, numpy only.

Whisper's recipe (openai/whisper ``audio.py``): a periodic Hann window of ``N_FFT``
samples, the power spectrum ``|rfft|^2`` (``N_FFT // 2 + 1`` bins), a Slaney-scale,
Slaney-normalised mel filterbank (librosa's defaults, 0 Hz to ``sample_rate / 2``),
``log10(max(x, 1e-10))``, then ``x = max(x, x.max() - 8)`` and ``x = (x + 4) / 4``.

Two differences, both forced by streaming:

- **Chunk-causal framing.** Frame ``i`` of a chunk is the ``N_FFT`` samples that end at the
  end of hop ``i``: the previous chunk's last ``N_FFT - hop`` samples (``MelState.carry``;
  zeros at stream start) then the chunk. ``frames * hop`` new samples give exactly
  ``frames`` frames, and two chunks give the same frames as one-shot framing of their
  concatenation. Whisper centres its frames (reflect padding, half a window of lookahead).
- **Per-chunk normalisation.** Whisper clamps to 8 log10 units (80 dB) below the peak of
  its whole 30 s window; a streaming daemon cannot see the future, so the peak is the
  chunk's.

Written here rather than taken from librosa, which pulls in numba (a JIT compiler, large,
slow to import, often without wheels on Jetson): the filterbank is 30 lines.
``log_mel`` (before the clamp and scale) is public so tests can compare it with
``transformers.audio_utils.spectrogram``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from venus.engines.manifest import Schedule
from venus.errors import EngineError

N_FFT: Final = 400  # 25 ms at 16 kHz, Whisper's window
LOG_FLOOR: Final = 1e-10  # power floor before log10 (-100 dB)
DYNAMIC_RANGE: Final = 8.0  # log10 units kept below the chunk's peak (80 dB)


def hz_to_mel(hz: NDArray[np.float64]) -> NDArray[np.float64]:
    """Slaney's mel scale: linear below 1 kHz (3 mel / 200 Hz), logarithmic above."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    out = hz / f_sp
    log_part = hz >= min_log_hz
    out[log_part] = min_log_mel + np.log(hz[log_part] / min_log_hz) / logstep
    return out


def mel_to_hz(mel: NDArray[np.float64]) -> NDArray[np.float64]:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    out = mel * f_sp
    log_part = mel >= min_log_mel
    out[log_part] = min_log_hz * np.exp(logstep * (mel[log_part] - min_log_mel))
    return out


def mel_filterbank(
    n_mels: int, n_fft: int, sample_rate: int, fmax_hz: float | None = None
) -> NDArray[np.float64]:
    """[n_mels, n_fft // 2 + 1] triangles on the Slaney scale, each of unit area in Hz
    (librosa.filters.mel with its defaults: fmin 0, fmax sample_rate / 2 unless given)."""
    bins = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    top = hz_to_mel(np.array([sample_rate / 2 if fmax_hz is None else fmax_hz]))[0]
    edges = mel_to_hz(np.linspace(0.0, top, n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    out: NDArray[np.float64] = weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]  # Slaney
    return out


def hann(n: int) -> NDArray[np.float64]:
    """The periodic Hann window (torch.hann_window's default, Whisper's)."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)


def log_mel(
    audio: NDArray[np.float32], filters: NDArray[np.float32], hop: int
) -> NDArray[np.float32]:
    """log10 power mel [n_mels, frames] of ``audio`` framed every ``hop`` samples without
    padding (frames = (len - N_FFT) // hop + 1), before Whisper's clamp and scale."""
    frames = np.lib.stride_tricks.sliding_window_view(audio.astype(np.float64), N_FFT)[::hop]
    power = np.abs(np.fft.rfft(frames * hann(N_FFT), axis=-1)) ** 2
    # einsum, not `@`: a BLAS call here wakes OpenBLAS's thread pool, which competes with
    # ONNX Runtime's threads on a small CPU (40 ms instead of 0.7 ms per chunk on 2 cores).
    mel: NDArray[np.float64] = np.einsum("mf,tf->mt", filters.astype(np.float64), power)
    return np.log10(np.maximum(mel, LOG_FLOOR)).astype(np.float32)


@dataclass
class MelState:
    """One stream's front-end state: the audio the next chunk's first frames reach back to."""

    carry: NDArray[np.float32]  # the last N_FFT - hop samples seen (zeros at stream start)

    def reset(self) -> None:
        self.carry[:] = 0.0


class LogMel:
    """Whisper log-mel of one chunk at a time: ``mel = front_end(samples, state)``."""

    def __init__(
        self, n_mels: int = 80, sample_rate: int = 16000, hop: int = 160, frames: int = 100
    ) -> None:
        if not 0 < hop <= N_FFT or frames < 1:
            raise EngineError(
                f"log-mel hop {hop} and frames {frames}: need 0 < hop <= {N_FFT} and frames >= 1"
            )
        self.n_mels, self.sample_rate, self.hop, self.frames = n_mels, sample_rate, hop, frames
        self.samples = frames * hop  # new samples per chunk
        self.filters = mel_filterbank(n_mels, N_FFT, sample_rate).astype(np.float32)

    @classmethod
    def from_schedule(cls, schedule: Schedule) -> LogMel:
        """The front end an engine directory's chunk schedule asks for."""
        return cls(
            n_mels=schedule.n_mels,
            sample_rate=schedule.sample_rate_in,
            hop=schedule.hop_length,
            frames=schedule.mel_frames,
        )

    def new_state(self) -> MelState:
        """A stream start: the carried audio is silence."""
        return MelState(carry=np.zeros(N_FFT - self.hop, np.float32))

    def __call__(self, samples: NDArray[np.float32], state: MelState) -> NDArray[np.float32]:
        """One chunk of mono float PCM [frames * hop] -> log-mel [1, n_mels, frames]."""
        x = np.asarray(samples, dtype=np.float32)
        if x.shape != (self.samples,):
            raise EngineError(
                f"log-mel chunk has shape {x.shape}; expected ({self.samples},) samples "
                f"({self.frames} frames x hop {self.hop} at {self.sample_rate} Hz, mono)"
            )
        if state.carry.shape != (N_FFT - self.hop,):
            raise EngineError(
                f"log-mel state carries {state.carry.shape} samples, not ({N_FFT - self.hop},): "
                "it belongs to another front end; make one with new_state()"
            )
        audio = np.concatenate((state.carry, x))
        mel = log_mel(audio, self.filters, self.hop)
        state.carry[:] = audio[audio.size - state.carry.size :]
        mel = np.maximum(mel, mel.max() - DYNAMIC_RANGE)
        out: NDArray[np.float32] = ((mel + 4.0) / 4.0)[None]
        return out
