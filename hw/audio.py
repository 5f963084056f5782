"""The microphone: PortAudio capture -> ring buffer -> 16 kHz mono chunks on a schedule.

The audio callback only mixes each block down to mono and copies it into a ring (plus a
counter and a timestamp). ``read`` pulls from the ring on the caller's thread, resamples
to 16 kHz with soxr's streaming resampler and cuts chunks of ``chunk_s``.

Timestamps. ``start_s`` counts samples: chunk ``k`` starts ``k * chunk_s`` seconds into the
capture sample clock since ``start()``; silence filled in while the device was lost counts
too, so the schedule keeps pace with the wall clock through an outage. ``captured_at_s``
maps the same position to ``time.monotonic()``: each block's capture time (callback time
minus PortAudio's ``currentTime - inputBufferAdcTime``) minus its position, the median over
the last second of blocks. A delay beyond what the stream can hold (PulseAudio's ALSA
plugin reports ~0.65 s for the first second of a stream) is replaced by one block (the
block just arrived). It is comparable with the speaker's ``Position.at_s``: on the null
sink, within 1 ms once running, 10 ms while a stream starts.

Overruns. A block the device flagged ``input_overflow``, or a block that found the ring full
(the reader fell more than ``ring_s`` behind: the oldest audio is dropped and ``read``
resumes at the next chunk boundary, skipping indices). Each counts once in
``AudioChunk.overruns``; the watchdog thread reports them as ``Overrun`` events, at most
one per ``OVERRUN_REPORT_S``, with the audio lost since the last (in 16 kHz samples).

Lost device (see ``stream_keeper``). While it is lost the watchdog thread writes silence
into the ring at the capture rate, so ``read`` keeps returning chunks (``filled_s`` says how
much of each is silence) and the loop keeps running.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import numpy.typing as npt

from venus.errors import DeviceError
from venus.hw.backends import (
    AudioBackend,
    AudioDevice,
    BackendName,
    Block,
    StreamHandle,
    find_device,
    get_backend,
    list_devices,
)
from venus.hw.events import EventSink, Overrun, ignore_events
from venus.hw.resample import ChunkAssembler
from venus.hw.ring import SampleRing
from venus.hw.stream_keeper import KeeperHooks, StreamKeeper, StreamState

__all__ = ["SAMPLE_RATE", "AudioChunk", "AudioDevice", "Microphone", "list_devices"]

SAMPLE_RATE = 16000  # Hz: what the audio encoder reads (Whisper log-mel)
_CLOCK_BLOCKS = 50  # capture-time observations: about 1 s of 20 ms blocks
OVERRUN_REPORT_S = 0.5  # at most one Overrun event per this long (a stalled reader floods)

Samples = npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class AudioChunk:
    """One scheduled chunk of microphone audio."""

    samples: Samples  # float32 mono at 16 kHz, chunk_s * 16000 of them
    index: int  # position in the schedule; after an overrun some indices are skipped
    start_s: float  # index * chunk_s: capture sample clock since start()
    overruns: int  # overruns counted since start()
    filled_s: float  # seconds of silence inserted while the device was lost
    captured_at_s: float | None = None  # time.monotonic() of the first sample, if known


class Microphone:
    """A live microphone. ``read`` is for one consumer thread."""

    def __init__(
        self,
        device: str | int = "default",
        *,
        backend: BackendName | AudioBackend = "sounddevice",
        sample_rate: int = 16000,
        channels: int = 1,
        block_ms: int = 20,
        chunk_s: float = 1.0,
        ring_s: float = 4.0,
        on_event: EventSink = ignore_events,
    ) -> None:
        """``sample_rate`` is the capture (device) rate in Hz; ``ring_s`` how far ``read``
        may fall behind before audio is dropped."""
        self.device = str(device)
        self.sample_rate, self.channels, self.chunk_s = sample_rate, channels, chunk_s
        self._block_frames = round(sample_rate * block_ms / 1000)
        if self._block_frames < 1 or channels < 1:
            raise ValueError(f"need block_ms > 0 and channels >= 1, got {block_ms}, {channels}")
        ring_samples = round(ring_s * sample_rate)
        if ring_samples < 2 * self._block_frames:
            raise ValueError(f"ring_s={ring_s} must hold at least two blocks of {block_ms} ms")
        self._backend = get_backend(backend) if isinstance(backend, str) else backend
        self._on_event = on_event
        self._cond = threading.Condition(threading.Lock())  # guards everything below
        self._ring = SampleRing(ring_samples)
        self._assembler = ChunkAssembler(sample_rate, SAMPLE_RATE, chunk_s)
        self._clock: deque[float] = deque(maxlen=_CLOCK_BLOCKS)  # capture time - position/rate
        self._overruns = self._lost = 0  # blocks that lost audio; capture samples dropped
        self._reported = (0, 0, 0.0)  # (overruns, lost, when) last sent as an Overrun event
        self._filling = False
        self._fill_origin = (0.0, 0)  # (time.monotonic(), ring position) where the fill began
        self._running = False
        hooks = KeeperHooks(self._open, self._on_lost, lambda: None, self._on_tick)
        self._keeper = StreamKeeper("microphone", self.device, self._backend, hooks, on_event)

    @property
    def state(self) -> StreamState:
        """``stopped``, ``opening``, ``running`` or ``lost`` (see ``StreamKeeper``)."""
        return self._keeper.state

    @property
    def lost(self) -> bool:
        """True while the device is gone (``read`` returns silence)."""
        return self._keeper.lost

    def start(self) -> None:
        """Open the device; ``DeviceError`` (listing the input devices) if it cannot be."""
        with self._cond:
            self._ring = SampleRing(self._ring.capacity)
            self._assembler = ChunkAssembler(self.sample_rate, SAMPLE_RATE, self.chunk_s)
            self._clock.clear()
            self._overruns = self._lost = 0
            self._reported = (0, 0, 0.0)
            self._filling = False
            self._running = True
        try:
            self._keeper.start()
        except DeviceError:
            with self._cond:
                self._running = False
            raise

    def stop(self) -> None:
        self._keeper.stop()
        with self._cond:
            self._running = False
            self._cond.notify_all()

    def __enter__(self) -> Microphone:
        self.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

    def read(self, timeout_s: float | None = None) -> AudioChunk:
        """The next chunk of the schedule; waits for it (``TimeoutError`` after ``timeout_s``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            done = self._assembler.pop()
            if done is not None:
                return self._chunk(*done)
            with self._cond:
                while self._ring.available == 0:
                    if not self._running:
                        raise DeviceError(
                            f"microphone {self.device!r} is not running; call start()"
                        )
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(
                            f"no audio from microphone {self.device!r} in {timeout_s} s"
                        )
                    self._cond.wait(remaining)
                start, samples, filled = self._ring.read()
            self._assembler.feed(start, samples, filled)

    def _chunk(self, index: int, samples: Samples, filled_s: float) -> AudioChunk:
        with self._cond:
            overruns = self._overruns
            offset = float(np.median(self._clock)) if self._clock else None
        first = index * self._assembler.in_chunk / self.sample_rate
        captured = None if offset is None else offset + first
        return AudioChunk(samples, index, index * self.chunk_s, overruns, filled_s, captured)

    def _open(self) -> StreamHandle:
        found = find_device(self._backend, self.device, "input")
        if found.max_input_channels < self.channels:
            raise DeviceError(
                f"input device {found.describe()} has fewer than {self.channels} channels; "
                "set audio.channels lower"
            )
        return self._backend.open_input(
            found.index, self.sample_rate, self.channels, self._block_frames, self._on_audio
        )

    def _on_audio(self, block: Block, delay_s: float, overflowed: bool) -> None:
        """The audio callback: mix down and copy, nothing else."""
        now = time.monotonic()
        self._keeper.beat()
        mono = block[:, 0].copy() if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)
        block_s = mono.shape[0] / self.sample_rate
        if delay_s > 4 * (self._keeper.latency_s + block_s):  # not a delay the stream can have
            delay_s = block_s
        with self._cond:
            if self._filling:  # first real audio after an outage: a new device clock
                self._filling = False
                self._clock.clear()
            if self._write(mono, False, now - delay_s) or overflowed:
                self._overruns += 1

    def _write(self, samples: Samples, filled: bool, captured_at_s: float) -> int:
        """Append to the ring (``self._cond`` held), wake the reader; samples dropped."""
        position = self._ring.written
        dropped = self._ring.write(samples, filled)
        self._lost += dropped
        self._clock.append(captured_at_s - position / self.sample_rate)
        self._cond.notify_all()
        return dropped

    def _on_lost(self, last_audio_s: float) -> None:
        with self._cond:
            self._filling = True
            self._fill_origin = (last_audio_s, self._ring.written)

    def _on_tick(self, now: float) -> None:
        """Watchdog tick: fill silence while lost, report new overruns."""
        with self._cond:
            if self._filling:
                origin_s, origin_pos = self._fill_origin
                due = origin_pos + round((now - origin_s) * self.sample_rate) - self._ring.written
                if due > 0:
                    at = origin_s + (self._ring.written - origin_pos) / self.sample_rate
                    if self._write(np.zeros(due, np.float32), True, at):
                        self._overruns += 1
            overruns, lost = self._overruns, self._lost
            reported_overruns, reported_lost, reported_at = self._reported
            due = overruns > reported_overruns and now - reported_at >= OVERRUN_REPORT_S
            if due:
                self._reported = (overruns, lost, now)
        if due:
            lost_16k = round((lost - reported_lost) * SAMPLE_RATE / self.sample_rate)
            self._on_event(Overrun("microphone", lost_16k, overruns, now))
