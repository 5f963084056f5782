"""File and synthetic sources: real WAV files through the stdlib and soxr, drawn frames."""

from __future__ import annotations

import time
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from venus.errors import DeviceError
from venus.hw.sources import (
    FileAudioSource,
    SyntheticAudioSource,
    SyntheticCamera,
    draw_frame,
    pcm_to_float,
)

RATE = 16000


def write_wav(path: Path, samples: npt.NDArray[np.float64], rate: int, width: int = 2) -> Path:
    """``samples`` [frames, channels] in [-1, 1) as little-endian PCM of ``width`` bytes."""
    if width == 1:
        raw = np.round(samples * 127 + 128).astype(np.uint8).tobytes()
    else:
        full = 1 << (8 * width - 1)
        ints = np.clip(np.round(samples * full), -full, full - 1).astype(np.int64)
        raw = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints.ravel())
    with wave.open(str(path), "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)
    return path


def tone(seconds: float, hz: float, rate: int, amplitude: float = 0.5) -> npt.NDArray[np.float64]:
    t = np.arange(round(seconds * rate)) / rate
    return amplitude * np.sin(2 * np.pi * hz * t)


def peak_hz(samples: npt.NDArray[np.float32]) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / RATE)[np.argmax(spectrum)])


def test_stereo_44k_file_becomes_16k_mono_chunks_with_a_padded_end(tmp_path: Path) -> None:
    left = tone(2.5, 1000.0, 44100)
    path = write_wav(tmp_path / "a.wav", np.stack([left, np.zeros_like(left)], axis=1), 44100)
    source = FileAudioSource(path, chunk_s=1.0)
    assert (source.rate_hz, source.channels, source.duration_s) == (44100, 2, 2.5)

    with source:
        chunks = list(source)
        with pytest.raises(EOFError):
            source.read(timeout_s=0.1)

    assert [c.index for c in chunks] == [0, 1, 2]
    assert [c.start_s for c in chunks] == [0.0, 1.0, 2.0]
    assert [c.filled_s for c in chunks] == [0.0, 0.0, 0.5]  # seconds of padding
    for chunk in chunks:
        assert chunk.samples.dtype == np.float32
        assert chunk.samples.shape == (RATE,)
        assert chunk.overruns == 0
    middle = chunks[1].samples
    assert peak_hz(middle) == pytest.approx(1000.0, abs=1.0)
    # The left channel at 0.5 mixed with a silent right one: a 0.25 peak sine.
    assert float(np.sqrt(np.mean(middle**2))) == pytest.approx(0.25 / np.sqrt(2), rel=0.01)
    last = chunks[2].samples
    assert np.all(last[RATE // 2 :] == 0.0)
    assert float(np.abs(last[RATE // 2 - 400 : RATE // 2 - 200]).max()) > 0.2


def test_exact_length_file_ends_without_an_empty_chunk(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "b.wav", tone(2.0, 440.0, RATE)[:, None], RATE)
    with FileAudioSource(path, chunk_s=0.5) as source:
        chunks = list(source)
    assert [c.filled_s for c in chunks] == [0.0] * 4
    # Same rate: the resampler passes the samples through.
    expected = np.round(tone(2.0, 440.0, RATE) * 32768) / 32768
    got = np.concatenate([c.samples for c in chunks])
    assert np.allclose(got, expected, atol=1e-6)


def test_restart_reads_from_the_beginning(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "c.wav", tone(1.5, 300.0, 22050)[:, None], 22050)
    source = FileAudioSource(path)
    with source:
        first = source.read()
    with source:
        again = source.read()
    assert again.index == 0
    assert np.array_equal(first.samples, again.samples)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_widths_decode_to_the_same_signal(tmp_path: Path, width: int) -> None:
    values = np.array([0.0, 0.5, -0.5, 0.25, -1.0, 0.75])
    if width == 1:
        values = np.round(values * 127) / 127
    path = write_wav(tmp_path / f"w{width}.wav", values[:, None], RATE, width)
    with FileAudioSource(path, chunk_s=0.01) as source:
        chunk = source.read()
    tolerance = 1 / 127 if width == 1 else 1e-4
    assert np.allclose(chunk.samples[: values.size], values, atol=tolerance)
    assert chunk.filled_s == (chunk.samples.size - values.size) / RATE


def test_pcm_to_float_sign_extends_24_bit() -> None:
    raw = (0x7FFFFF).to_bytes(3, "little") + (-(1 << 23)).to_bytes(3, "little", signed=True)
    assert pcm_to_float(raw, 3).tolist() == [pytest.approx(1.0, abs=1e-6), -1.0]


def test_bad_files_are_device_errors_saying_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="no such file"):
        FileAudioSource(tmp_path / "missing.wav")
    text = tmp_path / "notes.wav"
    text.write_text("not audio")
    with pytest.raises(DeviceError, match=r"not a PCM WAV file.*sox"):
        FileAudioSource(text)


def test_read_before_start_is_an_error(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "d.wav", tone(0.5, 440.0, RATE)[:, None], RATE)
    with pytest.raises(DeviceError, match="before start"):
        FileAudioSource(path).read()


def test_synthetic_audio_is_deterministic_for_a_seed() -> None:
    def first_chunks(seed: int) -> list[npt.NDArray[np.float32]]:
        with SyntheticAudioSource(tone_hz=440.0, noise_dbfs=-30.0, seed=seed) as source:
            return [source.read().samples for _ in range(3)]

    a, b, c = first_chunks(7), first_chunks(7), first_chunks(8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[0], a[1])  # each chunk has its own noise


def test_synthetic_tone_and_noise_levels() -> None:
    with SyntheticAudioSource(tone_hz=1250.0, tone_dbfs=-6.0) as source:
        chunk = source.read()
    assert peak_hz(chunk.samples) == pytest.approx(1250.0, abs=1.0)
    assert float(np.abs(chunk.samples).max()) == pytest.approx(10 ** (-6 / 20), rel=1e-3)
    with SyntheticAudioSource(noise_dbfs=-40.0, seed=1) as source:
        noise = source.read().samples
    rms_dbfs = 20 * np.log10(np.sqrt(np.mean(noise.astype(np.float64) ** 2)))
    assert rms_dbfs == pytest.approx(-40.0, abs=0.2)
    with SyntheticAudioSource() as source:
        assert not source.read().samples.any()  # neither: silence


def test_synthetic_duration_pads_the_last_chunk_then_ends() -> None:
    with SyntheticAudioSource(chunk_s=1.0, tone_hz=200.0, duration_s=2.25) as source:
        chunks = list(source)
        with pytest.raises(EOFError):
            source.read()
    assert [c.filled_s for c in chunks] == [0.0, 0.0, 0.75]
    assert np.all(chunks[2].samples[RATE // 4 :] == 0.0)
    assert chunks[2].samples[: RATE // 4].any()


def test_synthetic_camera_frames() -> None:
    camera = SyntheticCamera(size=224, seed=3, fps=50.0)
    assert camera.latest() is None
    assert camera.wait_frame(0, 0.1) is None  # stopped: at once
    with camera:
        info = camera.info()
        assert (info.width, info.height, info.fps, info.backend) == (224, 224, 50.0, "SYNTHETIC")
        first = camera.wait_frame(0, 1.0)
        assert first is not None
        assert first.image.shape == (224, 224, 3)
        assert first.image.dtype == np.uint8
        assert not first.image.flags.writeable
        nxt = camera.wait_frame(first.seq, 1.0)
        assert nxt is not None and nxt.seq > first.seq
        assert nxt.captured_at_s > first.captured_at_s
        assert not np.array_equal(first.image, nxt.image)
        latest = camera.latest()
        assert latest is not None and latest.seq >= nxt.seq
        # A frame that cannot come within the timeout: None after waiting.
        began = time.monotonic()
        assert camera.wait_frame(latest.seq + 100, 0.05) is None
        assert time.monotonic() - began >= 0.04
    assert camera.latest() is None
    with pytest.raises(DeviceError, match="stopped"):
        camera.info()


def test_synthetic_camera_follows_its_clock() -> None:
    now = [100.0]
    camera = SyntheticCamera(size=64, fps=10.0, clock=lambda: now[0])
    with camera:
        frame = camera.latest()
        assert frame is not None and frame.seq == 1
        now[0] += 0.35
        frame = camera.wait_frame(1, 0.0)
        assert frame is not None and frame.seq == 4
        assert frame.captured_at_s == pytest.approx(100.3)


def test_drawn_frames_depend_only_on_seed_and_number() -> None:
    assert np.array_equal(draw_frame(5, 448, 0), draw_frame(5, 448, 0))
    assert not np.array_equal(draw_frame(5, 448, 0), draw_frame(6, 448, 0))
    assert not np.array_equal(draw_frame(5, 448, 0), draw_frame(5, 448, 1))
    image = draw_frame(12, 448, 0)
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 4  # background, shapes, text
    assert (image[10:50, 10:200] == 255).all(axis=2).any()  # white "frame 12" text
