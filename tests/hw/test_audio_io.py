"""Microphone and speaker through the real PortAudio, a real PulseAudio and its null sink.

What the speaker plays into the null sink comes back on its monitor, the default source,
so every claim is checked against what was actually heard: tone frequencies, the played
position against the time a click reached the monitor, silence after a flush, and a
sound server killed and restarted under running streams. The ring and the chunking are
checked alone, without a device, in ``test_audio_parts``.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from support.services import PulseServer

from venus.errors import DeviceError
from venus.hw.audio import SAMPLE_RATE, AudioChunk, Microphone, list_devices
from venus.hw.backends import rescan_devices
from venus.hw.events import DeviceLost, DeviceRestored, HwEvent, Overrun, Underflow
from venus.hw.speaker import Speaker

SOURCE_RATE = 24000  # what the speech decoder produces
BUFFER_MS = 40
WAIT_S = 10.0  # the longest any single wait in these tests may take


def tone(freq_hz: float, seconds: float, rate: int = SOURCE_RATE, level: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (level * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def peak_hz(samples: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[np.argmax(spectrum)])


class Recorder:
    """Reads a microphone on its own thread; finds audio by time.monotonic()."""

    def __init__(self, mic: Microphone) -> None:
        self.mic = mic
        self.chunks: list[AudioChunk] = []
        self._lock = threading.Lock()
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
            chunk = self.mic.read(timeout_s=WAIT_S)
            with self._lock:
                self.chunks.append(chunk)

    def wait_until(self, at_s: float) -> None:
        """Wait until chunks cover time.monotonic() ``at_s``."""
        deadline = time.monotonic() + WAIT_S
        while not self.covered(at_s):
            assert time.monotonic() < deadline, f"no audio recorded up to {at_s}"
            time.sleep(0.02)

    def covered(self, at_s: float) -> bool:
        with self._lock:
            last = self.chunks[-1] if self.chunks else None
        if last is None or last.captured_at_s is None:
            return False
        return last.captured_at_s + last.samples.size / SAMPLE_RATE >= at_s

    def audio(self, from_s: float, to_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(samples, their capture times) recorded in [from_s, to_s)."""
        self.wait_until(to_s)
        with self._lock:
            chunks = [c for c in self.chunks if c.captured_at_s is not None]
        times = np.concatenate(
            [c.captured_at_s + np.arange(c.samples.size) / SAMPLE_RATE for c in chunks]  # type: ignore[operator]
        )
        samples = np.concatenate([c.samples for c in chunks])
        keep = (times >= from_s) & (times < to_s)
        return samples[keep], times[keep]


@pytest.fixture(scope="module")
def pulse(pulseaudio: PulseServer) -> PulseServer:
    rescan_devices()  # PortAudio scans devices once: it may predate this server
    return pulseaudio


@pytest.fixture
def speaker(pulse: PulseServer) -> Iterator[Speaker]:
    with Speaker(buffer_ms=BUFFER_MS, source_rate=SOURCE_RATE) as spk:
        yield spk


def wait_quiet(spk: Speaker) -> None:
    deadline = time.monotonic() + WAIT_S
    while spk.playing:
        assert time.monotonic() < deadline, "the speaker never finished"
        time.sleep(0.01)


# --- Audio in and out through the null sink --------------------------------------------


@pytest.mark.parametrize(
    ("freq_hz", "capture_rate", "channels"), [(440, 16000, 1), (1000, 48000, 2)]
)
def test_a_tone_played_comes_back_at_its_frequency(
    speaker: Speaker, freq_hz: int, capture_rate: int, channels: int
) -> None:
    mic = Microphone(sample_rate=capture_rate, channels=channels, chunk_s=0.25)
    with mic, Recorder(mic) as rec:
        end = speaker.play(tone(freq_hz, 1.0))
        started = time.monotonic()
        wait_quiet(speaker)
        assert speaker.position().played_samples == end == SOURCE_RATE
        heard, _ = rec.audio(started, started + 1.0)
    assert heard.dtype == np.float32
    where = np.flatnonzero(np.abs(heard) > 0.05)
    loud = heard[where[0] : where[-1] + 1]
    assert loud.size > 0.7 * SAMPLE_RATE  # most of the second carries the tone
    assert abs(peak_hz(loud) - freq_hz) < 3.0
    assert np.sqrt(np.mean(loud**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.1)


def test_played_position_matches_when_the_click_is_heard(speaker: Speaker) -> None:
    """The report says a click has played when it reaches the monitor, to a quarter buffer.

    A report that ignored the device buffer (callback time instead of DAC time) is 30 ms
    early here and fails; the design promise is one buffer (40 ms). A trial in which the
    speaker ran dry (a loaded machine starves the audio thread; CI once saw an ALSA underrun
    and a click 10.1 ms off) played at another time than its report, so it is measured
    again: three clean trials, in at most six.
    """
    clean = 0
    with Microphone(chunk_s=0.1) as mic, Recorder(mic) as rec:
        for trial in range(6):
            if clean == 3:
                break
            clip = np.zeros(SOURCE_RATE // 2, np.float32)
            at = SOURCE_RATE // 4 + 997 * trial
            clip[at : at + 48] = 0.8  # a 2 ms click
            before = speaker.underflows
            click = speaker.play(clip) - clip.size + at
            reports: list[tuple[float, int]] = []
            deadline = time.monotonic() + WAIT_S
            while speaker.playing:
                assert time.monotonic() < deadline
                pos = speaker.position()
                reports.append((pos.at_s, pos.played_samples))
                time.sleep(0.002)
            reported_at = next(at_s for at_s, played in reports if played > click)
            heard, times = rec.audio(reports[0][0], reports[-1][0] + 0.2)
            heard_at = float(times[np.argmax(np.abs(heard) > 0.2)])
            if speaker.underflows != before:
                continue
            clean += 1
            assert abs(reported_at - heard_at) < BUFFER_MS / 4000, (trial, reported_at - heard_at)
    assert clean == 3, f"the speaker ran dry in {6 - clean} of 6 trials"


CAPTURE_SLACK_S = 0.005


def test_flush_silences_the_output_within_one_buffer(speaker: Speaker) -> None:
    with Microphone(chunk_s=0.1) as mic, Recorder(mic) as rec:
        speaker.play(tone(1000, 2.0))
        time.sleep(0.5)
        flushed_at = time.monotonic()
        speaker.flush()
        # what the device already holds stays (one buffer, a few samples more when the
        # machine is loaded: 995 against 960 once, beside a training run); a queue not
        # dropped would hold 36,000
        queued = speaker.position().queued_samples
        assert queued < SOURCE_RATE * (BUFFER_MS / 1000 + CAPTURE_SLACK_S)
        heard, times = rec.audio(flushed_at - 0.3, flushed_at + 0.5)
    assert np.sqrt(np.mean(heard[times < flushed_at] ** 2)) > 0.3  # it was playing
    # + CAPTURE_SLACK_S: the recording's timestamps are estimated per capture block and
    # its resampler rings for a few samples after the tone stops (seen once under load:
    # 0.002 decaying to 0.0002 within 2 ms, right at the buffer's end).
    after = heard[times >= flushed_at + BUFFER_MS / 1000 + CAPTURE_SLACK_S]
    assert np.max(np.abs(after)) < 1e-3
    assert not speaker.playing


# --- Devices come and go ---------------------------------------------------------------


class Events:
    """An ``EventSink`` that keeps every event and waits for one of a kind."""

    def __init__(self) -> None:
        self._queue: queue.Queue[HwEvent] = queue.Queue()
        self.seen: list[HwEvent] = []

    def __call__(self, event: HwEvent) -> None:
        self._queue.put(event)

    def wait_for(self, kind: type, device: str, timeout_s: float = 15.0) -> HwEvent:
        """The first ``kind`` event of ``device`` not returned before (15 s: backoff up to
        5 s plus an idle sink's 2 s start)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.seen:
                if isinstance(event, kind) and event.device == device:
                    self.seen.remove(event)
                    return event
            self.seen.append(self._queue.get(timeout=max(0.01, deadline - time.monotonic())))


def test_a_killed_sound_server_is_lost_filled_and_restored(pulse: PulseServer) -> None:
    events = Events()
    spk = Speaker(buffer_ms=BUFFER_MS, on_event=events)
    mic = Microphone(chunk_s=0.25, on_event=events)
    assert (mic.state, spk.state) == ("stopped", "stopped")
    try:
        with spk, mic:
            assert mic.read(timeout_s=WAIT_S).filled_s == 0.0
            assert spk.state == "running"  # the speaker waits for its stream to run
            pulse.stop()
            lost = {events.wait_for(DeviceLost, d).device for d in ("microphone", "speaker")}
            assert lost == {"microphone", "speaker"}
            assert (mic.state, spk.state) == ("lost", "lost")
            assert spk.play(tone(440, 0.5)) == spk.position().played_samples  # dropped
            waited_s = 0.0
            while waited_s < 0.1:  # catch up with what was recorded and filled so far
                asked = time.monotonic()
                chunk = mic.read(timeout_s=WAIT_S)
                waited_s = time.monotonic() - asked
            assert chunk.filled_s == pytest.approx(0.25)
            began = time.monotonic()
            silent = [mic.read(timeout_s=1.0) for _ in range(4)]
            assert time.monotonic() - began == pytest.approx(1.0, abs=0.2)  # the loop's pace
            assert [c.index for c in silent] == list(range(chunk.index + 1, chunk.index + 5))
            assert all(c.filled_s == pytest.approx(0.25) for c in silent)
            assert not any(c.samples.any() for c in silent)
            pulse.start()
            for device in ("microphone", "speaker"):
                restored = events.wait_for(DeviceRestored, device)
                assert isinstance(restored, DeviceRestored) and restored.down_s > 0
            assert (mic.state, spk.state) == ("running", "running")
            spk.play(tone(440, 1.5))
            deadline = time.monotonic() + WAIT_S
            while True:  # real audio flows again, through both restored streams
                chunk = mic.read(timeout_s=WAIT_S)
                if chunk.filled_s == 0 and np.sqrt(np.mean(chunk.samples**2)) > 0.2:
                    break
                assert time.monotonic() < deadline, "no sound after the restore"
            assert abs(peak_hz(chunk.samples) - 440) < 5.0
    finally:
        try:
            pulse.pactl("info")
        except subprocess.CalledProcessError:
            pulse.start()  # leave the session's server running, null sink default


# --- Device lookup, the schedule, overruns ---------------------------------------------


def test_devices_are_listed_and_an_unknown_one_says_which_exist(pulse: PulseServer) -> None:
    devices = list_devices()
    assert any(d.default_input and d.max_input_channels > 0 for d in devices)
    assert any(d.default_output and d.max_output_channels > 0 for d in devices)
    with pytest.raises(DeviceError, match=r"no input device matches 'no-such-mic'.*default"):
        Microphone("no-such-mic").start()
    with pytest.raises(DeviceError, match=r"no output device matches '97'.*default"):
        Speaker(97).start()
    with Microphone("DEFAULT", chunk_s=0.1) as mic:  # names match case-insensitively
        assert mic.read(timeout_s=WAIT_S).samples.size == 1600


def test_the_pyaudio_backend_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyaudio", None)  # as if it were not installed
    with pytest.raises(DeviceError, match=r"pip install 'realtime-venus\[pyaudio\]'"):
        Microphone(backend="pyaudio")


def test_chunks_follow_the_schedule(pulse: PulseServer) -> None:
    with Microphone(sample_rate=48000, chunk_s=0.1) as mic:
        chunks = [mic.read(timeout_s=WAIT_S) for _ in range(12)]
    assert [c.index for c in chunks] == list(range(12))
    assert [c.start_s for c in chunks] == pytest.approx([0.1 * i for i in range(12)])
    assert all(c.samples.shape == (1600,) and c.samples.dtype == np.float32 for c in chunks)
    # Captured on the audio clock's cadence: the typical step is the chunk, and none is
    # lost or doubled; one callback may come late on a loaded machine (seen: 25 ms).
    steps = np.diff([c.captured_at_s for c in chunks])
    assert float(np.median(steps)) == pytest.approx(0.1, abs=0.005)
    assert np.all(np.abs(steps - 0.1) < 0.05), steps
    assert all(c.overruns == 0 and c.filled_s == 0 for c in chunks)
    with pytest.raises(DeviceError, match="not running"):
        mic.read(timeout_s=0.1)
    with Microphone(chunk_s=1.0) as slow, pytest.raises(TimeoutError):
        slow.read(timeout_s=0.05)


def test_a_reader_that_falls_behind_gets_overruns_and_fresh_audio(pulse: PulseServer) -> None:
    events = Events()
    with Microphone(chunk_s=0.1, ring_s=0.2, on_event=events) as mic:
        first = mic.read(timeout_s=WAIT_S)
        time.sleep(0.6)  # the ring holds 0.2 s
        later = mic.read(timeout_s=WAIT_S)
        overrun = events.wait_for(Overrun, "microphone")
    assert isinstance(overrun, Overrun) and overrun.total >= 1 and overrun.lost_samples > 0
    assert later.overruns >= 1
    assert later.index >= first.index + 4  # skipped to the freshest whole chunk
    assert later.start_s == pytest.approx(later.index * 0.1)


def test_the_pyaudio_backend_plays_and_records_a_tone(pulse: PulseServer) -> None:
    """The alternative backend behind the same interface: the same tone round trip."""
    pytest.importorskip("pyaudio", reason="pip install 'realtime-venus[pyaudio]'")
    with Speaker(backend="pyaudio", buffer_ms=BUFFER_MS, source_rate=SOURCE_RATE) as spk:
        mic = Microphone(backend="pyaudio", chunk_s=0.25)
        with mic, Recorder(mic) as rec:
            spk.play(tone(440, 1.0))
            started = time.monotonic()
            wait_quiet(spk)
            heard, _ = rec.audio(started, started + 1.0)
    where = np.flatnonzero(np.abs(heard) > 0.05)
    assert where.size, "nothing came back through the pyaudio backend"
    assert abs(peak_hz(heard[where[0] : where[-1] + 1]) - 440) < 3.0


def test_a_starved_audio_thread_is_counted_as_an_underflow(pulse: PulseServer) -> None:
    """The audio callback held up past its buffer (as a loaded machine does) leaves the
    device dry: the speaker counts it and reports it (from its watchdog thread, not the
    audio callback), so that who relies on its timing can tell."""
    events = Events()
    with Speaker(buffer_ms=BUFFER_MS, source_rate=SOURCE_RATE, on_event=events) as speaker:
        speaker.play(tone(440, 1.0))
        time.sleep(0.2)
        assert speaker.underflows == 0
        with speaker._lock:  # the callback waits on it: no audio for 0.3 s (7 buffers)
            time.sleep(0.3)
        underflow = events.wait_for(Underflow, "speaker", timeout_s=WAIT_S)
        assert speaker.underflows > 0
    assert isinstance(underflow, Underflow)
    assert 1 <= underflow.count == underflow.total <= speaker.underflows
