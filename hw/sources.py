"""File and synthetic sources with the microphone's and the camera's interfaces.

For offline mode (a WAV file instead of a microphone) and tests. Audio sources are not
paced: ``read`` returns the next chunk at once, so an offline loop runs as fast as it
can. At the end of the audio the last chunk is padded with zeros (``filled_s`` says how
many seconds of it are padding, as the microphone's says how much silence it filled in
while its device was lost) and the next ``read`` raises ``EOFError``: an end of input,
distinct from the microphone's ``TimeoutError`` ("nothing yet, go on"). Iterating over a
started source yields its chunks until that end.

``SyntheticCamera`` (in ``synthetic_camera``, re-exported here) stands in for the camera.
"""

from __future__ import annotations

import wave
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from venus.errors import DeviceError
from venus.hw.audio import SAMPLE_RATE, AudioChunk
from venus.hw.resample import StreamResampler
from venus.hw.synthetic_camera import SyntheticCamera, draw_frame

__all__ = [
    "FileAudioSource",
    "SyntheticAudioSource",
    "SyntheticCamera",
    "draw_frame",
    "pcm_to_float",
]

Samples = npt.NDArray[np.float32]
PCM_WIDTHS = (1, 2, 3, 4)  # bytes per sample: 8-bit unsigned, 16/24/32-bit signed
_Source = TypeVar("_Source", bound="_ChunkSource")


class _ChunkSource:
    """Chunk bookkeeping shared by the audio sources: index, start/stop, end of input."""

    name = "source"

    def __init__(self, chunk_s: float) -> None:
        if chunk_s <= 0:
            raise ValueError(f"chunk_s must be positive, got {chunk_s}")
        self.chunk_s = chunk_s
        self.chunk_samples = round(chunk_s * SAMPLE_RATE)
        self._index = 0
        self._started = False
        self._ended = False

    def start(self) -> None:
        self._index = 0
        self._ended = False
        self._started = True

    def stop(self) -> None:
        self._started = False

    def __enter__(self: _Source) -> _Source:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __iter__(self) -> Iterator[AudioChunk]:
        while True:
            try:
                yield self.read()
            except EOFError:
                return

    def read(self, timeout_s: float | None = None) -> AudioChunk:
        """The next chunk, at once (``timeout_s`` is accepted for the microphone's interface).

        Raises:
            DeviceError: the source is not started.
            EOFError: the previous chunk was the last one.
        """
        if not self._started:
            raise DeviceError(f"{self.name}: read before start(); use it as a context manager")
        if self._ended:
            raise EOFError(f"{self.name}: end of input")
        real = self._next(self.chunk_samples)
        if real.size == 0:
            self._ended = True
            raise EOFError(f"{self.name}: end of input")
        if real.size < self.chunk_samples:
            self._ended = True
        samples = np.zeros(self.chunk_samples, np.float32)
        samples[: real.size] = real
        chunk = AudioChunk(
            samples=samples,
            index=self._index,
            start_s=self._index * self.chunk_s,
            overruns=0,
            filled_s=(self.chunk_samples - real.size) / SAMPLE_RATE,
        )
        self._index += 1
        return chunk

    def _next(self, count: int) -> Samples:
        """Up to ``count`` real samples for chunk ``self._index``; fewer only at the end."""
        raise NotImplementedError


class FileAudioSource(_ChunkSource):
    """A PCM WAV file (8/16/24/32-bit, any rate, any channels) as 16 kHz mono chunks."""

    def __init__(self, path: Path | str, *, chunk_s: float = 1.0) -> None:
        super().__init__(chunk_s)
        self.path = Path(path)
        self.name = str(self.path)
        with self._open() as w:
            self.rate_hz = w.getframerate()
            self.channels = w.getnchannels()
            self.sample_width = w.getsampwidth()
            self.frames = w.getnframes()
        if self.sample_width not in PCM_WIDTHS:
            raise DeviceError(f"{self.path}: {8 * self.sample_width}-bit samples; {_CONVERT}")
        self._wav: wave.Wave_read | None = None
        self._resampler = StreamResampler(self.rate_hz, SAMPLE_RATE)
        self._pending = np.zeros(0, np.float32)
        self._drained = False

    @property
    def duration_s(self) -> float:
        return self.frames / self.rate_hz

    def _open(self) -> wave.Wave_read:
        try:
            return wave.open(str(self.path), "rb")
        except FileNotFoundError:
            raise DeviceError(f"{self.path}: no such file") from None
        except (wave.Error, EOFError) as e:
            raise DeviceError(f"{self.path}: not a PCM WAV file ({e}); {_CONVERT}") from e
        except OSError as e:
            raise DeviceError(f"{self.path}: cannot read ({e.strerror or e})") from e

    def start(self) -> None:
        self.stop()
        self._wav = self._open()
        self._resampler.reset()
        self._pending = np.zeros(0, np.float32)
        self._drained = False
        super().start()

    def stop(self) -> None:
        super().stop()
        if self._wav is not None:
            self._wav.close()
            self._wav = None

    def _next(self, count: int) -> Samples:
        assert self._wav is not None  # read() checked that we are started
        block = max(1, round(self.chunk_s * self.rate_hz))
        parts = [self._pending]
        have = self._pending.size
        while have < count and not self._drained:
            raw = self._wav.readframes(block)
            pcm = pcm_to_float(raw, self.sample_width)
            mono = pcm.reshape(-1, self.channels).mean(axis=1, dtype=np.float32)
            self._drained = mono.size < block
            out = self._resampler.process(mono)
            if self._drained:
                out = np.concatenate([out, self._resampler.flush()])
            parts.append(out)
            have += out.size
        joined = np.concatenate(parts)
        self._pending = joined[count:]
        return joined[:count]


_CONVERT = "convert it with `sox IN -b 16 OUT.wav` or `ffmpeg -i IN -c:a pcm_s16le OUT.wav`"


def pcm_to_float(raw: bytes, width: int) -> Samples:
    """Little-endian PCM bytes as float32 in [-1, 1): 8-bit unsigned, 16/24/32-bit signed."""
    data = np.frombuffer(raw, np.uint8)
    if width == 1:
        return (data.astype(np.float32) - 128.0) / 128.0
    if width == 3:
        b = data.reshape(-1, 3).astype(np.int32)
        value = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        value = (value << 8) >> 8  # sign-extend 24 -> 32 bits
        return value.astype(np.float32) / float(1 << 23)
    dtype = np.dtype("<i2") if width == 2 else np.dtype("<i4")
    return np.frombuffer(raw, dtype).astype(np.float32) / float(1 << (8 * width - 1))


class SyntheticAudioSource(_ChunkSource):
    """Deterministic audio: a tone, white noise, both or silence, endless or ``duration_s``.

    ``tone_dbfs`` is the sine's peak level, ``noise_dbfs`` the noise's RMS level. Chunk
    ``i`` depends only on the arguments and ``i`` (noise is seeded with ``(seed, i)``).
    """

    name = "synthetic audio"

    def __init__(
        self,
        *,
        chunk_s: float = 1.0,
        tone_hz: float | None = None,
        tone_dbfs: float = -12.0,
        noise_dbfs: float | None = None,
        seed: int = 0,
        duration_s: float | None = None,
    ) -> None:
        super().__init__(chunk_s)
        if tone_hz is not None and not 0 < tone_hz < SAMPLE_RATE / 2:
            raise ValueError(f"tone_hz must be in (0, {SAMPLE_RATE // 2}) Hz, got {tone_hz}")
        self.tone_hz = tone_hz
        self.tone_dbfs = tone_dbfs
        self.noise_dbfs = noise_dbfs
        self.seed = seed
        self.total_samples = None if duration_s is None else round(duration_s * SAMPLE_RATE)

    def _next(self, count: int) -> Samples:
        first = self._index * self.chunk_samples
        if self.total_samples is not None:
            count = max(0, min(count, self.total_samples - first))
        out = np.zeros(count, np.float64)
        if self.tone_hz is not None:
            t = (first + np.arange(count)) / SAMPLE_RATE
            out += 10 ** (self.tone_dbfs / 20) * np.sin(2 * np.pi * self.tone_hz * t)
        if self.noise_dbfs is not None:
            rng = np.random.default_rng([self.seed, self._index])
            out += 10 ** (self.noise_dbfs / 20) * rng.standard_normal(count)
        return np.clip(out, -1.0, 1.0).astype(np.float32)
