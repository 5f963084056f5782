"""The speaker: a playback queue in front of PortAudio, with the position actually heard.

``play`` resamples (soxr, streaming) from ``source_rate`` to the device rate and queues the
result; the output callback copies from the queue and plays silence when it is empty
(it never waits). The device buffer is sized from ``buffer_ms``: blocks of a quarter of
it and a requested latency of half of it, so that what the device holds at any moment
(PortAudio's ``outputBufferDacTime - currentTime`` plus one block) stays within about one
``buffer_ms``. Hence:

- ``position().played_samples`` counts, in source samples, only audio that has left the
  device (see ``playout``): heard time of each block = callback time + its DAC delay.
- ``flush()`` drops everything queued; the next block is silence, so output is silent
  one buffer after the call at the latest.

soxr holds the last ~32 ms of a stream back until more audio comes; when the queue runs
below one buffer, the watchdog thread flushes that tail into the queue so an utterance
plays to its end (audio played after that starts a new resampler stream).

A lost device (see ``stream_keeper``) drops the queue and what was inside the device,
plays nothing, and drops ``play`` calls until it is restored: nothing stale plays later,
and ``played_samples`` stops, so the owner never counts unplayed audio as delivered.

An underflow (the callback came too late and the device ran dry) is counted
(``underflows``) and reported to ``on_event`` as ``Underflow`` from the watchdog thread,
at most one event per ``UNDERFLOW_REPORT_S``: never from the audio callback.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import numpy.typing as npt

from venus.hw.backends import (
    AudioBackend,
    BackendName,
    Block,
    StreamHandle,
    find_device,
    get_backend,
)
from venus.hw.events import EventSink, Underflow, ignore_events
from venus.hw.playout import Playout
from venus.hw.resample import StreamResampler
from venus.hw.stream_keeper import STARTUP_S, KeeperHooks, StreamKeeper, StreamState

__all__ = ["Position", "Speaker"]

log = logging.getLogger(__name__)
UNDERFLOW_REPORT_S = 0.5  # at most one Underflow event per this long (a starved thread floods)

Samples = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Position:
    """Where playback is, in source-rate samples since ``start()``."""

    played_samples: int  # heard: left the device buffer
    queued_samples: int  # given to play() and not yet heard (device buffer included), not flushed
    at_s: float  # time.monotonic() of this report


class Speaker:
    """A live speaker; ``play``, ``flush`` and ``position`` may be called from any thread."""

    def __init__(
        self,
        device: str | int = "default",
        *,
        backend: BackendName | AudioBackend = "sounddevice",
        sample_rate: int = 48000,
        buffer_ms: int = 40,
        source_rate: int = 24000,
        on_event: EventSink = ignore_events,
    ) -> None:
        """``sample_rate``: device rate (Hz); ``source_rate``: rate of what ``play`` gets."""
        self.device = str(device)
        self.sample_rate, self.source_rate, self.buffer_ms = sample_rate, source_rate, buffer_ms
        self._block_frames = max(1, round(sample_rate * buffer_ms / 4000))  # a quarter buffer
        self._latency_s = buffer_ms / 2000  # half a buffer requested from the device
        self._backend = get_backend(backend) if isinstance(backend, str) else backend
        self._feed_lock = threading.Lock()  # the resampler and _pending_src; before _lock
        self._lock = threading.Lock()  # the playout; the audio callback takes it briefly
        self._resampler = StreamResampler(source_rate, sample_rate)
        self._pending_src = 0.0  # source samples inside the resampler, not yet output
        self._playout = Playout(sample_rate)
        self._underflows = 0  # audio callbacks that reported the device had run dry
        self._reported = (0, 0.0)  # (underflows, when) last sent as an Underflow event
        self._on_event = on_event
        hooks = KeeperHooks(self._open, self._on_lost, lambda: None, self._on_tick)
        self._keeper = StreamKeeper("speaker", self.device, self._backend, hooks, on_event)

    @property
    def state(self) -> StreamState:
        """``stopped``, ``opening``, ``running`` or ``lost`` (see ``StreamKeeper``)."""
        return self._keeper.state

    @property
    def lost(self) -> bool:
        return self._keeper.lost

    @property
    def underflows(self) -> int:
        """How many times the device ran dry since this speaker was made (the backend's
        output-underflow flag): a gap was heard, and what was played no longer lies at
        the times ``position`` predicted."""
        return self._underflows

    @property
    def playing(self) -> bool:
        """True while queued audio has not all been heard."""
        return self.position().queued_samples > 0

    def start(self) -> None:
        """Open the device (``DeviceError`` listing the outputs if it cannot be) and wait,
        up to 5 s, until it consumes audio: an idle sound server starts slowly."""
        with self._feed_lock, self._lock:
            self._resampler.reset()
            self._pending_src = 0.0
            self._playout = Playout(self.sample_rate)
        self._keeper.start()
        if not self._keeper.wait_running(STARTUP_S):
            log.warning("speaker %r opened but plays nothing yet", self.device)

    def stop(self) -> None:
        self._keeper.stop()

    def __enter__(self) -> Speaker:
        self.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

    def play(self, pcm: npt.ArrayLike) -> int:
        """Queue mono ``pcm`` at ``source_rate``; returns the ``played_samples`` at which it
        will have been heard (dropped, returning the current position, while lost)."""
        src = np.ascontiguousarray(pcm, np.float32)
        if src.ndim != 1:
            raise ValueError(f"play() takes mono samples (1-D), got shape {src.shape}")
        with self._feed_lock:
            if self._keeper.lost:
                log.debug("speaker %r lost: dropping %d samples", self.device, src.shape[0])
                return self.position().played_samples
            out = self._resampler.process(src)
            out_src = out.shape[0] * self.source_rate / self.sample_rate
            self._pending_src += src.shape[0] - out_src
            with self._lock:
                self._playout.enqueue(out, out_src)
                pos = self._position_locked()
        return pos.played_samples + pos.queued_samples

    def flush(self) -> None:
        """Drop everything queued at once: the next block the device gets is silence."""
        with self._feed_lock, self._lock:
            self._resampler.reset()
            self._pending_src = 0.0
            self._playout.drop_queue()

    def position(self) -> Position:
        with self._lock:
            return self._position_locked()

    def _position_locked(self) -> Position:
        now = time.monotonic()
        played = self._playout.played(now)
        queued = self._playout.queued_src + self._pending_src + self._playout.written_src - played
        return Position(round(played), max(0, round(queued)), now)

    def _open(self) -> StreamHandle:
        found = find_device(self._backend, self.device, "output")
        return self._backend.open_output(
            found.index, self.sample_rate, 1, self._block_frames, self._latency_s, self._on_audio
        )

    def _on_audio(self, block: Block, delay_s: float, underflowed: bool) -> None:
        """The audio callback: copy from the queue (or silence), record when it is heard."""
        now = time.monotonic()
        self._keeper.beat()
        if underflowed:
            self._underflows += 1
        with self._lock:
            self._playout.fill(block[:, 0], now + delay_s)
        if block.shape[1] > 1:
            block[:, 1:] = block[:, :1]

    def _report_underflows(self, now: float) -> None:
        total = self._underflows  # an int the callback alone writes: read without a lock
        reported, at = self._reported
        if total > reported and now - at >= UNDERFLOW_REPORT_S:
            self._reported = (total, now)
            self._on_event(Underflow("speaker", total - reported, total, now))

    def _on_lost(self, _last_audio_s: float) -> None:
        with self._feed_lock, self._lock:
            self._resampler.reset()
            self._pending_src = 0.0
            self._playout.drop_all(time.monotonic())

    def _on_tick(self, now: float) -> None:
        """Watchdog tick: report new underflows; flush the resampler's tail when the
        queue runs low."""
        self._report_underflows(now)
        low_water = self.sample_rate * self.buffer_ms // 1000
        with self._feed_lock:
            with self._lock:
                if self._pending_src <= 0 or self._playout.queued_frames > low_water:
                    return
            tail = self._resampler.flush()
            with self._lock:
                self._playout.enqueue(tail, self._pending_src)
            self._pending_src = 0.0
