"""The frontend loop: read a chunk, step the model, act on playback, hand speech on.

One code path, two clocks (``clock``): in real time the microphone paces the loop and
its sample clock dates every chunk (an overrun skips chunk indices instead of drifting);
offline a file source returns chunks at once, the playback device is a track clocked by
the schedule, and the loop waits for token-to-wave at each boundary, so a run is
deterministic for a seed. A chunk that fails (an engine error, a broken harness) is
logged and dropped, and the session restarts from a fresh stream; three failures in a
row stop the loop with the error. When ``stop`` is set (SIGTERM) the reply being spoken
is cut, not finished, so a stop takes at most the chunk in hand. Work handed in with
``call_soon`` (a reload's new samplers) runs on the loop's thread between chunks. Per
chunk::

    audio chunk + latest frame -> ChunkStep -> (yield? cut playback) -> SpeechOut thread
                                                                          -> playback queue
                                                                          -> timeline record
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from venus.daemon.frontend.channel import HarnessChannel
from venus.daemon.frontend.clock import Clock
from venus.daemon.frontend.playback import PlaybackController, PlaybackEvent, Played, Stopped
from venus.daemon.frontend.speech_out import SpeechOut
from venus.daemon.frontend.step import ChunkInput, ChunkResult, ChunkStep
from venus.daemon.frontend.stream import Stream
from venus.errors import VenusError
from venus.hw.audio import AudioChunk
from venus.hw.frames import Frame
from venus.hw.vad import Vad

log = logging.getLogger(__name__)


class AudioSource(Protocol):
    """``Microphone`` and ``FileAudioSource``: ``EOFError`` ends the input,
    ``TimeoutError`` means nothing arrived yet."""

    def read(self, timeout_s: float | None = None) -> AudioChunk: ...


FrameSource = Callable[[float], Frame | None]  # schedule time (s) -> the latest frame


def no_frames(_t: float) -> Frame | None:
    return None


MAX_FAILURES = 3  # consecutive failed chunks before the loop gives up


@dataclass
class LoopStats:
    chunks: int = 0
    cuts: int = 0
    failures: int = 0  # chunks that failed (the session restarted after each)


class FrontendLoop:
    def __init__(
        self,
        step: ChunkStep,
        speech_out: SpeechOut,
        playback: PlaybackController,
        harness: HarnessChannel,
        clock: Clock,
        vad: Vad | None = None,
    ) -> None:
        self.step, self.speech_out, self.playback = step, speech_out, playback
        self.harness, self.clock, self.vad = harness, clock, vad
        self.period_s = step.schedule.chunk_s
        self.stats = LoopStats()
        self._soon: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop's thread before its next chunk (any thread may call this):
        how a reload swaps what the step reads at a chunk boundary."""
        self._soon.put(fn)

    def run(
        self,
        stream: Stream,
        audio: AudioSource,
        frames: FrameSource = no_frames,
        stop: threading.Event | None = None,
        max_chunks: int | None = None,
    ) -> LoopStats:
        """Step every chunk until the input ends, ``stop`` is set or ``max_chunks`` ran."""
        stop = stop or threading.Event()
        failed = 0
        while not stop.is_set() and (max_chunks is None or self.stats.chunks < max_chunks):
            self._run_soon()
            try:
                chunk = audio.read(timeout_s=2 * self.period_s)
            except TimeoutError:
                log.debug("no audio chunk within %.1f s", 2 * self.period_s)
                continue
            except EOFError:
                break
            try:
                self.one(stream, chunk, frames)
                failed = 0
            except VenusError as e:  # degrade: drop the chunk, restart the session
                failed += 1
                self.stats.failures += 1
                if failed >= MAX_FAILURES:
                    raise
                log.error("chunk %d failed: %s; a new session starts", chunk.index, e)
                self._restart(stream, "error")
        if stop.is_set():  # shutting down: what is left of a reply is cut, not spoken
            self._restart(stream, "shutdown", reset=False)
        self.speech_out.drain()
        self.clock.finish(self.speech_out)
        self._poll()
        return self.stats

    def one(self, stream: Stream, chunk: AudioChunk, frames: FrameSource) -> ChunkResult:
        end_s = chunk.start_s + self.period_s
        vad = self.vad.process(chunk.samples) if self.vad else None
        data = ChunkInput(
            index=chunk.index,
            start_s=chunk.start_s,
            samples=np.asarray(chunk.samples, np.float32),
            frame=frames(end_s),
            speech_ratio=vad.speech_ratio if vad else 0.0,
            vad=vad,
            boundary_s=self.clock.boundary(chunk),
        )
        self.clock.before_step(self.speech_out, end_s)
        self._poll()
        result = self.step(stream, data)
        if result.cut_reply is not None:
            self._yield(result)
        self.speech_out.submit(result)
        self.stats.chunks += 1
        return result

    def _yield(self, result: ChunkResult) -> None:
        """The model yielded mid-reply: cut what is left of it, and tell the harness
        whether the reply was heard to its end (nothing left) or cut."""
        reply = result.cut_reply
        assert reply is not None
        unsaid = self.speech_out.cut(reply)
        stopped = self.playback.stop("yield")
        at = self.playback.played_samples()
        if stopped is not None:
            result.playback_stopped = True
            self.stats.cuts += 1
            event: PlaybackEvent = stopped
        elif unsaid:  # its speech never reached the queue
            event = Stopped(reply, at, 0, "yield", result.tags)
        else:  # everything it said was heard already
            event = Played(reply, at, at, result.tags, last=True)
        self.harness.playback(event)

    def _restart(self, stream: Stream, reason: str, reset: bool = True) -> None:
        """Cut the reply being spoken (skip its token-to-wave, flush playback), then start
        a fresh session if ``reset``."""
        if stream.reply_id is not None:
            self.speech_out.cut(stream.reply_id)
        stopped = self.playback.stop(reason)
        if stopped is not None:
            self.harness.playback(stopped)
        if reset:
            stream.reset()

    def _run_soon(self) -> None:
        while True:
            try:
                fn = self._soon.get_nowait()
            except queue.Empty:
                return
            fn()

    def _poll(self) -> None:
        for event in self.playback.poll():
            self.harness.playback(event)
