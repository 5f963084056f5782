"""The speaker's bookkeeping: queued audio, what went into the device, what was heard.

Positions are in source samples (the rate ``play`` is given), as floats internally. Each
output block that carries audio leaves a record: its first frame is heard at
``heard_at_s`` (callback time plus PortAudio's ``outputBufferDacTime - currentTime``),
and it spans source positions ``[src_start, src_end)`` over ``frames`` device frames. The
played position at time ``t`` interpolates inside the record playing at ``t``, so audio
still inside the device buffer is never counted as played.

Not locked and no threads: the ``Speaker`` holds its lock around every call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Samples = npt.NDArray[np.float32]


@dataclass
class _Segment:
    samples: Samples  # device-rate audio
    offset: int  # frames already written to the device
    src_per_frame: float  # source samples per device frame in this segment


@dataclass(frozen=True)
class _Record:
    heard_at_s: float  # time.monotonic() when the block's first frame is heard
    src_start: float
    src_end: float
    frames: int  # device frames of audio in the block (silence after them is not recorded)


class Playout:
    """Queue of device-rate audio plus the record of what was played when."""

    def __init__(self, device_rate_hz: int) -> None:
        self.rate_hz = device_rate_hz
        self._segments: deque[_Segment] = deque()
        self._records: deque[_Record] = deque()
        self.queued_frames = 0  # device frames waiting in the queue
        self.queued_src = 0.0  # source samples they carry
        self.written_src = 0.0  # source position written into the device so far
        self._played_src = 0.0  # source position of everything whose record has ended

    def enqueue(self, samples: Samples, src: float) -> None:
        """Queue device-rate ``samples`` that carry ``src`` source samples."""
        if samples.shape[0] == 0:
            return
        self._segments.append(_Segment(samples, 0, src / samples.shape[0]))
        self.queued_frames += samples.shape[0]
        self.queued_src += src

    def fill(self, out: Samples, heard_at_s: float) -> None:
        """Write the next ``len(out)`` frames into ``out`` (silence when the queue is empty)."""
        src_start = self.written_src
        taken = 0
        while taken < out.shape[0] and self._segments:
            seg = self._segments[0]
            n = min(out.shape[0] - taken, seg.samples.shape[0] - seg.offset)
            out[taken : taken + n] = seg.samples[seg.offset : seg.offset + n]
            seg.offset += n
            taken += n
            self.written_src += n * seg.src_per_frame
            self.queued_src -= n * seg.src_per_frame
            if seg.offset == seg.samples.shape[0]:
                self._segments.popleft()
        out[taken:] = 0.0
        self.queued_frames -= taken
        if not self._segments:
            self.queued_src = 0.0  # no float residue when the queue runs dry
        if taken:
            self._records.append(_Record(heard_at_s, src_start, self.written_src, taken))

    def played(self, now_s: float) -> float:
        """Source samples heard by ``now_s`` (a time.monotonic() not before earlier calls)."""
        while self._records:
            rec = self._records[0]
            if rec.heard_at_s + rec.frames / self.rate_hz > now_s:
                break
            self._played_src = rec.src_end
            self._records.popleft()
        if self._records and self._records[0].heard_at_s <= now_s:
            rec = self._records[0]
            part = (now_s - rec.heard_at_s) * self.rate_hz / rec.frames
            return rec.src_start + (rec.src_end - rec.src_start) * part
        return self._played_src

    def drop_queue(self) -> None:
        """Forget everything not yet written to the device (a flush)."""
        self._segments.clear()
        self.queued_frames = 0
        self.queued_src = 0.0

    def drop_all(self, now_s: float) -> None:
        """The device is gone: also what was inside it never plays."""
        self.drop_queue()
        self._played_src = self.played(now_s)
        self._records.clear()
        self.written_src = self._played_src
