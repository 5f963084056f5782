"""The playback controller: speech segments in, facts about what the user heard out.

The loop queues one segment per chunk (24 kHz mono PCM tagged with its reply id). The
controller hands it to an ``AudioOut`` and remembers where it will end in the output's
position (``play``'s return). ``poll`` compares those ends with what the output reports
as heard and emits ``Played`` for every segment heard in full; ``stop`` flushes the output
at once and emits ``Stopped`` for the reply it cut. The harness acknowledges delivery from
these events: the ``last`` segment of a reply ``Played`` means the user heard all of it.

Rules:

- A segment partly heard when ``stop`` is called is stopped, not played; the audio still
  inside the device buffer (at most one buffer) plays on, and segments that end inside it
  are ``Played`` by a later ``poll``.
- ``stop`` cuts every reply queued so far: later segments of a reply whose id is not
  newer than the last one cut are dropped (reply ids increase), so a cut reply never
  resumes mid-sentence.
- A segment the output will never play (device lost: ``play`` dropped it, or the queue
  emptied before it was heard) ends its reply with ``Stopped(reason="output_lost")``.

Every event is returned exactly once: by ``stop`` (the ``Stopped`` of the reply it cut)
or by the next ``poll`` (everything else, in the order found), and passed to ``on_event``
as it is returned, on that caller's thread; ``on_event`` must not block. ``TrackOut`` is
the offline output: its clock is the schedule, so an offline run renders a deterministic
track.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from venus.hw.speaker import Position

__all__ = [
    "OUTPUT_LOST",
    "AudioOut",
    "PlaybackController",
    "PlaybackEvent",
    "Played",
    "Stopped",
    "TrackOut",
]

log = logging.getLogger(__name__)

Samples = npt.NDArray[np.float32]
OUTPUT_LOST = "output_lost"  # Stopped.reason when the output dropped audio (device lost)
ROUNDING_SAMPLES = 2  # the speaker rounds played and queued to whole samples separately


class AudioOut(Protocol):
    """Where audio goes; ``venus.hw.speaker.Speaker`` and ``TrackOut`` are ones."""

    def play(self, pcm: Samples) -> int:
        """Queue mono source-rate samples; returns the played position at their end."""
        ...

    def flush(self) -> None:
        """Drop queued audio; what the device buffer holds still plays."""
        ...

    def position(self) -> Position: ...


@dataclass(frozen=True)
class Played:
    """A segment was heard in full; ``last``: it ended its reply."""

    reply_id: int
    start_sample: int  # output position (source-rate samples since playback start)
    end_sample: int
    tags: tuple[str, ...]
    last: bool


@dataclass(frozen=True)
class Stopped:
    """A reply was cut at ``at_sample``; after what the device buffer still holds (at
    most one buffer), its ``dropped_samples`` never play."""

    reply_id: int
    at_sample: int  # output position heard when it stopped (a device buffer still plays)
    dropped_samples: int  # source-rate samples of this reply that will never be heard
    reason: str
    tags: tuple[str, ...]  # tags of the cut and dropped segments, in order, no repeats


PlaybackEvent = Played | Stopped


def ignore_playback(_event: PlaybackEvent) -> None:
    """The default ``on_event``: the caller reads what ``poll`` and ``stop`` return."""


@dataclass(frozen=True)
class _Segment:
    reply_id: int
    start: int
    end: int
    tags: tuple[str, ...]
    last: bool


class PlaybackController:
    """Queue, stop and follow speech segments on one ``AudioOut``; all methods thread-safe."""

    def __init__(
        self, out: AudioOut, on_event: Callable[[PlaybackEvent], None] = ignore_playback
    ) -> None:
        self._out = out
        self._on_event = on_event
        self._emit_lock = threading.RLock()  # taken first: events leave in the order found
        self._lock = threading.Lock()  # the segments and the output calls
        self._segments: deque[_Segment] = deque()  # queued, not yet reported
        self._backlog: list[PlaybackEvent] = []  # found outside poll, returned by the next
        self._newest_reply: int | None = None  # highest reply id queued so far
        self._cut_reply: int | None = None  # segments of replies <= this are dropped

    @property
    def playing(self) -> bool:
        """True while a queued segment has not been heard in full."""
        with self._lock:
            played = self._out.position().played_samples
            return bool(self._segments) and self._segments[-1].end > played + ROUNDING_SAMPLES

    def played_samples(self) -> int:
        """Where playback is: source-rate samples heard since it started."""
        return self._out.position().played_samples

    @property
    def active_reply(self) -> int | None:
        """The reply of the first segment not yet heard in full, or None."""
        with self._lock:
            played = self._out.position().played_samples
            for seg in self._segments:
                if seg.end > played + ROUNDING_SAMPLES:
                    return seg.reply_id
            return None

    def queue(
        self, pcm: Samples, reply_id: int, tags: tuple[str, ...] = (), last: bool = False
    ) -> None:
        """Queue one segment of reply ``reply_id`` (mono, source rate; may be empty to mark
        the end of a reply); dropped if the reply was cut."""
        samples = np.ascontiguousarray(pcm, np.float32)
        if samples.ndim != 1:
            raise ValueError(f"queue() takes mono samples (1-D), got shape {samples.shape}")
        n = samples.shape[0]
        with self._lock:
            if self._cut_reply is not None and reply_id <= self._cut_reply:
                log.debug("dropping %d samples of reply %d: it was cut", n, reply_id)
                return
            before = self._out.position()
            end = self._out.play(samples) if n else before.played_samples + before.queued_samples
            if self._newest_reply is None or reply_id > self._newest_reply:
                self._newest_reply = reply_id
            if n > ROUNDING_SAMPLES and end < before.played_samples + n - ROUNDING_SAMPLES:
                # The output dropped it (a lost device answers where it stands): cut this
                # segment, as if it began at ``end``, and all queued before it.
                log.warning("output dropped %d samples of reply %d (device lost?)", n, reply_id)
                self._segments.append(_Segment(reply_id, end, end + n, tags, last))
                self._backlog.extend(self._cut_all_locked(end, end, OUTPUT_LOST))
            else:
                self._segments.append(_Segment(reply_id, end - n, end, tags, last))

    def stop(self, reason: str) -> Stopped | None:
        """Flush the output at once and cut every reply queued so far.

        Returns (and emits) the ``Stopped`` of the first reply cut, the one being heard, or
        None if nothing unheard was cut. Replies queued behind it get their own ``Stopped``
        and segments heard in full before the cut their ``Played``, from the next ``poll``.
        """
        with self._emit_lock:
            with self._lock:
                self._out.flush()
                after = self._out.position()
                self._backlog.extend(self._heard_locked(after.played_samples))
                end = after.played_samples + after.queued_samples  # what the device holds
                cut = self._cut_all_locked(after.played_samples, end, reason)
                self._backlog.extend(cut[1:])
            self._emit(cut[:1])
        if not cut:
            log.debug("stop(%s): nothing unheard to cut", reason)
            return None
        log.info("playback stopped (%s): %s", reason, cut[0])
        return cut[0]

    def poll(self) -> list[PlaybackEvent]:
        """Emit and return ``Played`` for every segment now heard in full, in order, and
        the ``Stopped`` events found since the last poll (replies cut behind the one
        ``stop`` returned; audio the output will never play)."""
        with self._emit_lock:
            with self._lock:
                pos = self._out.position()
                events: list[PlaybackEvent] = [*self._backlog]
                self._backlog.clear()
                events.extend(self._heard_locked(pos.played_samples))
                if self._segments and pos.queued_samples == 0:
                    log.warning("output dropped queued speech (device lost?)")
                    at = pos.played_samples
                    events.extend(self._cut_all_locked(at, at, OUTPUT_LOST))
            self._emit(events)
        return events

    def _heard_locked(self, played: int) -> list[Played]:
        """Forget the segments heard in full by output position ``played``."""
        heard = []
        while self._segments and self._segments[0].end <= played + ROUNDING_SAMPLES:
            seg = self._segments.popleft()
            heard.append(Played(seg.reply_id, seg.start, seg.end, seg.tags, seg.last))
        return heard

    def _cut_all_locked(self, at: int, end: int, reason: str) -> list[Stopped]:
        """Cut every reply queued so far, heard up to output position ``at``, output
        ending at ``end``: forget the segments that end after ``end``, one ``Stopped`` per
        reply, in order."""
        self._cut_reply = self._newest_reply
        cut: dict[int, tuple[int, list[str]]] = {}
        keep: deque[_Segment] = deque()
        for seg in self._segments:
            if seg.end <= end + ROUNDING_SAMPLES:
                keep.append(seg)  # inside the device buffer: it will be heard in full
                continue
            dropped, tags = cut.get(seg.reply_id, (0, []))
            tags.extend(t for t in seg.tags if t not in tags)
            cut[seg.reply_id] = (dropped + seg.end - max(seg.start, end), tags)
        self._segments = keep
        return [Stopped(r, at, d, reason, tuple(t)) for r, (d, t) in cut.items()]

    def _emit(self, events: Sequence[PlaybackEvent]) -> None:
        for event in events:
            log.debug("playback: %s", event)
            self._on_event(event)


class TrackOut:
    """An ``AudioOut`` whose clock is the schedule, not the wall: offline runs render a track.

    Positions are track samples from t = 0. ``play`` places audio at the later of the
    clock and the end of what is queued; ``flush`` drops audio after the clock plus
    ``buffer_samples`` (what a device buffer would still hold plays, as on the speaker).
    ``position().at_s`` is the schedule clock in seconds, not ``time.monotonic()``.
    """

    def __init__(self, rate: int = 24000, buffer_samples: int = 960) -> None:
        if rate <= 0 or buffer_samples < 0:
            raise ValueError(
                f"rate must be > 0 and buffer_samples >= 0, got {rate}, {buffer_samples}"
            )
        self.rate = rate  # Hz
        self.buffer_samples = buffer_samples  # 960: 40 ms at 24 kHz, the speaker's default
        self._lock = threading.Lock()
        self._audio = np.zeros(rate, np.float32)  # grows by doubling
        self._now = 0  # the schedule clock, in samples
        self._end = 0  # end of everything placed so far

    def advance_to(self, sample: int) -> None:
        """The schedule clock is now at ``sample``: audio queued before it has played."""
        with self._lock:
            if sample < self._now:
                raise ValueError(f"the clock runs forward: at {self._now}, asked for {sample}")
            self._now = sample

    def play(self, pcm: Samples) -> int:
        src = np.ascontiguousarray(pcm, np.float32)
        if src.ndim != 1:
            raise ValueError(f"play() takes mono samples (1-D), got shape {src.shape}")
        with self._lock:
            at = max(self._now, self._end)
            self._end = at + src.shape[0]
            if self._end > self._audio.shape[0]:
                grown = np.zeros(max(self._end, 2 * self._audio.shape[0]), np.float32)
                grown[: self._audio.shape[0]] = self._audio
                self._audio = grown
            self._audio[at : self._end] = src
            return self._end

    def flush(self) -> None:
        with self._lock:
            keep = self._now + self.buffer_samples
            if self._end > keep:
                self._audio[keep : self._end] = 0.0
                self._end = keep

    def position(self) -> Position:
        with self._lock:
            played = min(self._now, self._end)
            return Position(played, max(0, self._end - self._now), self._now / self.rate)

    def track(self, total_samples: int) -> Samples:
        """Everything rendered from t = 0, zero-padded or cut to ``total_samples``."""
        with self._lock:
            out = np.zeros(total_samples, np.float32)
            n = min(total_samples, self._end)
            out[:n] = self._audio[:n]
            return out
