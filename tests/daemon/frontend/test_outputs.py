"""Offline output files: exact length and rate of the input, channels, alignment, clipping."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from venus.daemon.frontend.outputs import write_outputs
from venus.errors import DeviceError

ASSISTANT_RATE = 24000


def tone(freq_hz: float, frames: int, rate: int, level: float = 0.5) -> np.ndarray:
    return (level * np.sin(2 * np.pi * freq_hz * np.arange(frames) / rate)).astype(np.float32)


def write_wav(path: Path, channels: np.ndarray, rate: int, width: int) -> None:
    """``channels``: frames x channels floats in [-1, 1), as ``width``-byte PCM."""
    if width == 1:
        raw = np.round(channels * 127 + 128).astype(np.uint8).tobytes()
    elif width == 3:
        ints = np.round(channels * (2**23 - 1)).astype("<i4").reshape(-1, 1).view(np.uint8)
        raw = ints.reshape(-1, 4)[:, :3].tobytes()
    else:
        ints = np.round(channels * (2 ** (8 * width - 1) - 1)).astype(f"<i{width}")
        raw = ints.tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)


def read_wav(path: Path) -> tuple[np.ndarray, int, int]:
    """(frames x channels floats, rate, sample width) of a 16-bit WAV."""
    with wave.open(str(path), "rb") as w:
        rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
        data = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    return data.reshape(-1, channels).astype(np.float64) / 32767, rate, width


def corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


@pytest.mark.parametrize(
    ("rate", "channels", "width"),
    [(16000, 1, 2), (44100, 2, 3), (8000, 1, 1), (48000, 2, 4)],
)
def test_outputs_match_the_input_in_rate_and_length(
    tmp_path: Path, rate: int, channels: int, width: int
) -> None:
    frames = round(2.3 * rate) + 7  # not a whole number of assistant samples
    heard = tone(440, frames, rate)
    path = tmp_path / "input.wav"
    write_wav(path, np.repeat(heard[:, None], channels, axis=1), rate, width)
    said = tone(1000, ASSISTANT_RATE * 2, ASSISTANT_RATE)  # 2 s: shorter than the input
    files = write_outputs(tmp_path / "out", path, said, ASSISTANT_RATE)
    assert (files.rate_hz, files.frames, files.clipped_samples) == (rate, frames, 0)

    out, out_rate, out_width = read_wav(files.output)
    assert (out.shape, out_rate, out_width) == ((frames, 1), rate, 2)
    conv, conv_rate, conv_width = read_wav(files.conversation)
    assert (conv.shape, conv_rate, conv_width) == ((frames, 2), rate, 2)

    expected = tone(1000, 2 * rate, rate)  # the assistant's tone at the input rate
    body = slice(rate // 10, 2 * rate - rate // 10)  # away from the resampler's edges
    assert corr(out[body, 0], expected[body]) > 0.99
    assert not out[2 * rate + 50 :, 0].any()  # zero-padded after the assistant's 2 s
    assert np.array_equal(conv[:, 1], out[:, 0])
    assert corr(conv[body, 0], heard[body]) > 0.99  # left: the input
    assert abs(corr(conv[body, 0], conv[body, 1])) < 0.05  # the two do not mix


@pytest.mark.parametrize("rate", [16000, 44100])
def test_the_assistant_is_aligned_from_zero_and_cut_to_the_input(tmp_path: Path, rate: int) -> None:
    frames = rate  # a 1 s input
    path = tmp_path / "input.wav"
    write_wav(path, np.zeros((frames, 1), np.float32), rate, 2)
    said = np.zeros(3 * ASSISTANT_RATE, np.float32)  # 3 s: longer than the input
    said[ASSISTANT_RATE // 2] = 0.9  # a click at 0.5 s
    files = write_outputs(tmp_path, path, said, ASSISTANT_RATE)
    out, _, _ = read_wav(files.output)
    assert out.shape == (frames, 1)
    assert abs(int(np.argmax(np.abs(out[:, 0]))) - rate // 2) <= 1


def test_loud_audio_is_clipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "input.wav"
    write_wav(path, np.zeros((ASSISTANT_RATE, 1), np.float32), ASSISTANT_RATE, 2)
    said = tone(200, ASSISTANT_RATE, ASSISTANT_RATE, level=1.5)
    files = write_outputs(tmp_path, path, said, ASSISTANT_RATE)
    out, _, _ = read_wav(files.output)
    assert files.clipped_samples > 0
    assert out.max() == 1.0 and out.min() == -1.0
    assert np.count_nonzero(np.abs(out) == 1.0) == files.clipped_samples


def test_bad_input_says_what_to_do(tmp_path: Path) -> None:
    said = np.zeros(10, np.float32)
    with pytest.raises(DeviceError, match="no such file"):
        write_outputs(tmp_path, tmp_path / "missing.wav", said, ASSISTANT_RATE)
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not a wav")
    with pytest.raises(DeviceError, match="convert it"):
        write_outputs(tmp_path, junk, said, ASSISTANT_RATE)
    write_wav(path := tmp_path / "ok.wav", np.zeros((10, 1), np.float32), 16000, 2)
    with pytest.raises(ValueError, match="mono"):
        write_outputs(tmp_path, path, np.zeros((10, 2), np.float32), ASSISTANT_RATE)
