"""Echo cancellation in the live loop: the speaker's output as the canceller's reference.

``EchoPath`` sits in front of the speaker (it is an ``AudioOut``) and remembers what it
was given to play, at 16 kHz, with the ``time.monotonic()`` at which each sample will be
heard (from the speaker's played position: what is queued plays after what was queued
before). For a microphone chunk (timed by the microphone's sample clock) it renders the
reference heard over the same span and runs the
configured canceller (``audio.echo_cancellation``, see ``venus.hw.aec``) over it in 10 ms
frames. The ``suppress`` strategy cannot remove the echo, so frames where the assistant
(or its echo tail) is heard are muted: the model does not hear itself, and cannot hear
a barge-in either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import replace

import numpy as np
import soxr  # type: ignore[import-untyped, unused-ignore]
from numpy.typing import NDArray

from venus.daemon.frontend.playback import AudioOut
from venus.hw.aec import EchoCanceller, frame_samples
from venus.hw.audio import SAMPLE_RATE, AudioChunk
from venus.hw.speaker import Position

log = logging.getLogger(__name__)

KEEP_S = 10.0  # reference kept behind the newest microphone chunk
REANCHOR_S = 0.05  # a microphone clock this far off its anchor was restarted


class EchoPath:
    def __init__(
        self,
        out: AudioOut,
        canceller: EchoCanceller,
        source_rate: int,
        buffer_ms: int,
    ) -> None:
        self.out, self.canceller, self.source_rate = out, canceller, source_rate
        self.buffer_s = buffer_ms / 1000
        self._segments: deque[tuple[float, NDArray[np.float32]]] = deque()  # (heard at, pcm)
        self._lock = threading.Lock()
        self._frame = frame_samples(SAMPLE_RATE)
        # Both sides are timed by their sample clocks, anchored to time.monotonic() once:
        # per-chunk timestamps jitter by milliseconds, which an adaptive filter cannot follow.
        self._play_anchor: float | None = None  # when source sample 0 was heard
        self._mic_anchor: float | None = None  # captured_at_s - start_s of the microphone

    # --- AudioOut: what the playback controller calls -----------------------------------
    def play(self, pcm: NDArray[np.float32]) -> int:
        pos = self.out.position()
        rate = self.source_rate
        if self._play_anchor is None or pos.queued_samples == 0:
            # playback (re)starts: source sample 0 would have been heard at this time
            self._play_anchor = pos.at_s - pos.played_samples / rate
        heard_at = self._play_anchor + (pos.played_samples + pos.queued_samples) / rate
        ref = soxr.resample(pcm, self.source_rate, SAMPLE_RATE).astype(np.float32)
        with self._lock:
            self._segments.append((heard_at, ref))
        return self.out.play(pcm)

    def flush(self) -> None:
        self.out.flush()
        cut = time.monotonic() + self.buffer_s  # what the device holds still plays
        with self._lock:
            kept: deque[tuple[float, NDArray[np.float32]]] = deque()
            for at, pcm in self._segments:
                if at < cut:
                    kept.append((at, pcm[: max(0, round((cut - at) * SAMPLE_RATE))]))
            self._segments = kept

    def position(self) -> Position:
        return self.out.position()

    # --- the microphone side --------------------------------------------------------------
    def reference(self, start_s: float, samples: int) -> NDArray[np.float32]:
        """What was heard from the speaker over ``samples`` from ``start_s`` (monotonic)."""
        ref = np.zeros(samples, np.float32)
        with self._lock:
            while self._segments and (
                self._segments[0][0] + self._segments[0][1].size / SAMPLE_RATE < start_s - KEEP_S
            ):
                self._segments.popleft()
            segments = list(self._segments)
        for at, pcm in segments:
            offset = round((at - start_s) * SAMPLE_RATE)
            lo, hi = max(0, offset), min(samples, offset + pcm.size)
            if lo < hi:
                ref[lo:hi] += pcm[lo - offset : hi - offset]
        return ref

    def process(self, chunk: AudioChunk) -> AudioChunk:
        """The chunk with the assistant's echo removed (or muted, for ``suppress``)."""
        if chunk.captured_at_s is None or self.canceller.strategy in ("off", "headset"):
            return chunk
        offset = chunk.captured_at_s - chunk.start_s
        if self._mic_anchor is None or abs(offset - self._mic_anchor) > REANCHOR_S:
            self._mic_anchor = offset  # the first chunk, or the device was reopened
        mic = np.asarray(chunk.samples, np.float32)
        ref = self.reference(self._mic_anchor + chunk.start_s, mic.size)
        out = np.empty_like(mic)
        f = self._frame
        whole = mic.size - mic.size % f
        for i in range(0, whole, f):
            block = self.canceller.process(mic[i : i + f], ref[i : i + f])
            out[i : i + f] = 0.0 if self.canceller.ignore_onsets else block
        out[whole:] = mic[whole:]
        return replace(chunk, samples=out)
