"""The playback controller on the offline track (exact, deterministic) and on the real
speaker through PulseAudio's null sink, whose monitor tells what was actually heard."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from support.services import PulseServer

from venus.daemon.frontend.playback import (
    OUTPUT_LOST,
    PlaybackController,
    PlaybackEvent,
    Played,
    Stopped,
    TrackOut,
)
from venus.hw.audio import SAMPLE_RATE, AudioChunk, Microphone
from venus.hw.backends import rescan_devices
from venus.hw.speaker import Position, Speaker

RATE = 24000  # what the speech decoder produces
BUFFER = 960  # TrackOut's device buffer: 40 ms at 24 kHz
WAIT_S = 10.0  # the longest any single wait in these tests may take


def tone(seconds: float, freq_hz: float = 440.0, level: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (level * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def setup(buffer_samples: int = BUFFER) -> tuple[TrackOut, PlaybackController, list[PlaybackEvent]]:
    out = TrackOut(RATE, buffer_samples)
    seen: list[PlaybackEvent] = []
    return out, PlaybackController(out, seen.append), seen


def played(events: list[PlaybackEvent]) -> list[Played]:
    """``events``, which must all be ``Played``."""
    assert all(isinstance(e, Played) for e in events), events
    return [e for e in events if isinstance(e, Played)]


# --- On the offline track ---------------------------------------------------------------


def test_segments_are_played_when_heard_in_full_in_order() -> None:
    out, ctl, seen = setup()
    one, two = tone(1.0), tone(0.5, 880)
    ctl.queue(one, reply_id=1, tags=("a",))
    ctl.queue(two, reply_id=1, tags=("b",), last=True)
    assert ctl.poll() == [] and ctl.playing and ctl.active_reply == 1
    out.advance_to(RATE - 10)
    assert ctl.poll() == []  # 10 samples short of the end: not heard in full
    out.advance_to(RATE)
    assert ctl.poll() == [Played(1, 0, RATE, ("a",), False)]
    out.advance_to(2 * RATE)
    assert ctl.poll() == [Played(1, RATE, RATE + RATE // 2, ("b",), True)]
    assert ctl.poll() == [] and not ctl.playing and ctl.active_reply is None
    assert seen == [Played(1, 0, RATE, ("a",), False), Played(1, RATE, 36000, ("b",), True)]
    track = out.track(3 * RATE)
    assert np.array_equal(track[:RATE], one) and np.array_equal(track[RATE:36000], two)
    assert not track[36000:].any()


def test_audio_queued_after_a_pause_starts_at_the_clock() -> None:
    out, ctl, _ = setup()
    ctl.queue(tone(0.1), reply_id=1, last=True)
    out.advance_to(RATE)
    ctl.queue(tone(0.1), reply_id=2, last=True)
    out.advance_to(2 * RATE)
    assert [(e.reply_id, e.start_sample, e.end_sample) for e in played(ctl.poll())] == [
        (1, 0, 2400),
        (2, RATE, RATE + 2400),
    ]


def test_a_stop_cuts_within_one_buffer_and_reports_what_was_dropped() -> None:
    out, ctl, seen = setup()
    for i in range(3):
        ctl.queue(tone(1.0), reply_id=7, tags=(f"item-{i}", "reply"), last=i == 2)
    out.advance_to(30000)  # 0.25 s into the second segment
    stopped = ctl.stop("barge_in")
    assert stopped == Stopped(
        reply_id=7,
        at_sample=30000,
        dropped_samples=3 * RATE - 30000 - BUFFER,
        reason="barge_in",
        tags=("item-1", "reply", "item-2"),
    )
    assert seen == [stopped]
    assert ctl.poll() == [Played(7, 0, RATE, ("item-0", "reply"), False)]  # heard before
    out.advance_to(3 * RATE)
    assert ctl.poll() == []  # the partly heard segment is stopped, never played
    track = out.track(3 * RATE)
    assert np.abs(track[30000 : 30000 + BUFFER]).max() > 0.4  # the device buffer plays on
    assert not track[30000 + BUFFER :].any()
    assert ctl.stop("again") is None


def test_segments_inside_the_device_buffer_still_play_after_a_stop() -> None:
    out, ctl, seen = setup()
    for i in range(10):
        ctl.queue(tone(0.02), reply_id=1, tags=(str(i),))  # 480 samples each
    out.advance_to(1000)  # the buffer reaches 1960: segment 3 ends at 1920, 4 at 2400
    stopped = ctl.stop("barge_in")
    assert stopped is not None and stopped.at_sample == 1000
    assert stopped.dropped_samples == 4800 - 1960 and stopped.tags[0] == "4"
    out.advance_to(5000)
    assert [e.tags for e in ctl.poll()] == [("0",), ("1",), ("2",), ("3",)]
    assert seen[0] == stopped and len(seen) == 5


def test_a_cut_reply_stays_cut_and_a_newer_one_plays() -> None:
    out, ctl, seen = setup()
    ctl.queue(tone(0.5), reply_id=3)
    out.advance_to(RATE)
    assert ctl.stop("barge_in") is None  # heard in full already: nothing to cut
    ctl.queue(tone(0.5), reply_id=3, last=True)  # synthesized before the stop was seen
    ctl.queue(tone(0.5), reply_id=2)  # older still
    assert not ctl.playing
    ctl.queue(tone(0.5), reply_id=4, last=True)
    assert ctl.active_reply == 4
    out.advance_to(2 * RATE)
    assert seen == ctl.poll() == [Played(3, 0, 12000, (), False), Played(4, RATE, 36000, (), True)]


def test_a_stop_cuts_every_queued_reply_and_returns_the_one_heard() -> None:
    out, ctl, seen = setup()
    ctl.queue(tone(1.0), reply_id=1, last=True)
    ctl.queue(tone(1.0), reply_id=2, tags=("x",), last=True)
    out.advance_to(RATE // 2)
    stopped = ctl.stop("shutdown")
    assert stopped == Stopped(1, RATE // 2, RATE // 2 - BUFFER, "shutdown", ())
    assert seen == [stopped]
    assert ctl.poll() == [Stopped(2, RATE // 2, RATE, "shutdown", ("x",))]
    assert seen[1:] == [Stopped(2, RATE // 2, RATE, "shutdown", ("x",))]


def test_an_empty_last_segment_marks_the_end_of_a_reply() -> None:
    out, ctl, _ = setup()
    ctl.queue(tone(0.5), reply_id=1)
    ctl.queue(np.zeros(0, np.float32), reply_id=1, last=True)
    out.advance_to(RATE // 2)
    assert [(e.end_sample, e.last) for e in played(ctl.poll())] == [(12000, False), (12000, True)]


def test_queue_takes_only_mono() -> None:
    _, ctl, _ = setup()
    with pytest.raises(ValueError, match="mono"):
        ctl.queue(np.zeros((100, 2), np.float32), reply_id=1)


class LostTrack(TrackOut):
    """A device that gets lost: as the speaker, it drops its queue and plays nothing."""

    lost = False

    def play(self, pcm: np.ndarray) -> int:
        return self.position().played_samples if self.lost else super().play(pcm)

    def position(self) -> Position:
        pos = super().position()
        return Position(pos.played_samples, 0, pos.at_s) if self.lost else pos


def test_audio_a_lost_device_drops_ends_its_reply_as_output_lost() -> None:
    out = LostTrack(RATE, BUFFER)
    seen: list[PlaybackEvent] = []
    ctl = PlaybackController(out, seen.append)
    ctl.queue(tone(0.5), reply_id=1)
    ctl.queue(tone(0.5), reply_id=1, last=True)
    out.advance_to(RATE // 2)
    out.lost = True
    assert ctl.poll() == [
        Played(1, 0, RATE // 2, (), False),
        Stopped(1, RATE // 2, RATE // 2, OUTPUT_LOST, ()),
    ]
    ctl.queue(tone(0.5), reply_id=2, last=True)  # dropped by the lost device at once
    assert ctl.poll() == [Stopped(2, RATE // 2, RATE // 2, OUTPUT_LOST, ())] == seen[-1:]
    assert not ctl.playing


def test_threads_queue_and_poll_at_once() -> None:
    """One thread queues 400 small segments while another runs the clock and polls."""
    out, ctl, seen = setup()
    count, size = 400, 100
    polled: list[PlaybackEvent] = []
    done = threading.Event()

    def produce() -> None:
        for i in range(count):
            ctl.queue(np.full(size, i / count, np.float32), reply_id=1, last=i == count - 1)
            time.sleep(0.0002)
        done.set()

    def consume() -> None:
        clock = 0
        while not done.is_set() or ctl.playing:
            clock += 37
            out.advance_to(clock)
            polled.extend(ctl.poll())

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=WAIT_S)
        assert not t.is_alive()
    polled.extend(ctl.poll())
    assert polled == seen and len(seen) == count
    heard = played(seen)
    assert heard[-1].last and not any(e.last for e in heard[:-1])
    starts = [e.start_sample for e in heard]
    assert starts == sorted(starts) and all(e.end_sample - e.start_sample == size for e in heard)
    track = out.track(heard[-1].end_sample)
    for i, e in enumerate(heard):
        assert np.all(track[e.start_sample : e.end_sample] == np.float32(i / count))


# --- On the real speaker -------------------------------------------------------------------

BUFFER_MS = 40  # the speaker's device buffer
SERVER_SLACK_S = 0.05  # PulseAudio's own latency and the monitor's timestamps' jitter;
# the hw tests see none on the null sink, this leaves room for a loaded machine


class Recorder:
    """Reads the monitor of the null sink on its own thread, with capture times."""

    def __init__(self, mic: Microphone) -> None:
        self.mic = mic
        self.chunks: queue.Queue[AudioChunk] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.chunks.put(self.mic.read(timeout_s=WAIT_S))

    def audio(self, from_s: float, to_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(samples, their capture times) recorded in [from_s, to_s); waits for them."""
        got: list[AudioChunk] = []
        deadline = time.monotonic() + WAIT_S
        while True:
            chunk = self.chunks.get(timeout=max(0.01, deadline - time.monotonic()))
            got.append(chunk)
            at = chunk.captured_at_s
            if at is not None and at + chunk.samples.size / SAMPLE_RATE >= to_s:
                break
        timed = [(c.captured_at_s, c) for c in got if c.captured_at_s is not None]
        times = np.concatenate([at + np.arange(c.samples.size) / SAMPLE_RATE for at, c in timed])
        samples = np.concatenate([c.samples for _, c in timed])
        keep = (times >= from_s) & (times < to_s)
        return samples[keep], times[keep]


@pytest.fixture
def speaker(pulseaudio: PulseServer) -> Iterator[Speaker]:
    rescan_devices()  # PortAudio scans devices once: it may predate the sound server
    with Speaker(buffer_ms=BUFFER_MS, source_rate=RATE) as spk:
        yield spk


def test_a_stop_silences_the_real_speaker_within_one_buffer(speaker: Speaker) -> None:
    events: queue.Queue[PlaybackEvent] = queue.Queue()
    with Microphone(chunk_s=0.1) as mic, Recorder(mic) as rec:
        ctl = PlaybackController(speaker, events.put)
        for i in range(4):  # 2 s of tone in four segments
            ctl.queue(tone(0.5, 1000), reply_id=1, tags=("item-1",), last=i == 3)
        deadline = time.monotonic() + WAIT_S
        while speaker.position().played_samples < 0.75 * RATE:
            assert time.monotonic() < deadline, "the speaker never played"
            time.sleep(0.005)
        stopped_at = time.monotonic()
        stopped = ctl.stop("barge_in")
        heard, times = rec.audio(stopped_at - 0.3, stopped_at + 0.5)
        later = ctl.poll()
    assert isinstance(stopped, Stopped) and stopped.reply_id == 1 and stopped.tags == ("item-1",)
    assert stopped.dropped_samples > 0.5 * RATE
    buffer = BUFFER_MS * RATE // 1000
    assert 0.75 * RATE <= stopped.at_sample <= 0.75 * RATE + buffer  # heard at the stop
    # what is neither heard by then nor dropped is what the device still held: < 2 buffers
    assert 0 <= 2 * RATE - stopped.at_sample - stopped.dropped_samples < 2 * buffer
    assert events.get(timeout=WAIT_S) == stopped
    assert later == [Played(1, 0, RATE // 2, ("item-1",), False)]  # the cut one is not played
    assert events.get(timeout=WAIT_S) == later[0]
    assert np.sqrt(np.mean(heard[times < stopped_at] ** 2)) > 0.3  # it was playing
    after = heard[times >= stopped_at + BUFFER_MS / 1000 + SERVER_SLACK_S]
    assert after.size > 0 and np.max(np.abs(after)) < 1e-3
    assert not ctl.playing
