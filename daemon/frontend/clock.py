"""The two clocks of the frontend loop: real time and offline.

Real time: the microphone's sample clock paces the loop; a chunk's boundary is when its
last sample was captured, and deadlines are measured from there. Offline: chunks come
from a file at once (or, paced, one per chunk period); the playback device is a
``TrackOut`` advanced to each chunk's end on the schedule, and the loop waits for
token-to-wave before each step so that the track, the cuts and the timeline do not
depend on how fast the machine is.
"""

from __future__ import annotations

import time
from typing import Protocol

from venus.daemon.frontend.playback import TrackOut
from venus.daemon.frontend.speech_out import SpeechOut
from venus.hw.audio import AudioChunk


class Clock(Protocol):
    offline: bool

    def boundary(self, chunk: AudioChunk) -> float | None:
        """time.monotonic() when ``chunk`` was complete, or None (timed from the step)."""

    def before_step(self, speech_out: SpeechOut, end_s: float) -> None:
        """Called before each step; ``end_s`` is the chunk's end on the schedule."""

    def finish(self, speech_out: SpeechOut) -> None:
        """Called once after the last chunk."""


class RealTimeClock:
    offline = False

    def __init__(self, chunk_s: float) -> None:
        self.chunk_s = chunk_s

    def boundary(self, chunk: AudioChunk) -> float | None:
        if chunk.captured_at_s is None:
            return time.monotonic()
        return chunk.captured_at_s + self.chunk_s

    def before_step(self, speech_out: SpeechOut, end_s: float) -> None:
        return None

    def finish(self, speech_out: SpeechOut) -> None:
        return None


class OfflineClock:
    """``paced``: each step also waits until the chunk's end has passed in wall time since
    the first step began, as a microphone would deliver it, so that what runs beside the
    loop in wall time (the harness's capabilities and workers) answers on the input's
    clock; the run is then as long as the input (or longer, where steps fall behind)."""

    offline = True

    def __init__(self, track: TrackOut, rate: int, paced: bool = False) -> None:
        self.track, self.rate, self.paced = track, rate, paced
        self._started: float | None = None

    def boundary(self, chunk: AudioChunk) -> float | None:
        return None

    def before_step(self, speech_out: SpeechOut, end_s: float) -> None:
        speech_out.drain()
        self.track.advance_to(round(end_s * self.rate))
        if self.paced:
            now = time.monotonic()
            if self._started is None:  # the first chunk's audio began to arrive now
                self._started = now
            time.sleep(max(0.0, self._started + end_s - now))

    def finish(self, speech_out: SpeechOut) -> None:
        speech_out.drain()
