"""The streaming log-mel front end against transformers' audio_utils (librosa-compatible)."""

from __future__ import annotations

import numpy as np
import pytest
from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

from venus.engines.manifest import Schedule
from venus.engines.mel import N_FFT, LogMel, log_mel, mel_filterbank
from venus.errors import EngineError

HOP = 160
CARRY = N_FFT - HOP


def reference_filters(n_mels: int = 80, sample_rate: int = 16000) -> np.ndarray:
    """transformers' Slaney filterbank, [n_freqs, n_mels]."""
    return mel_filter_bank(
        num_frequency_bins=N_FFT // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=sample_rate / 2,
        sampling_rate=sample_rate,
        norm="slaney",
        mel_scale="slaney",
    )


def reference_log_mel(audio: np.ndarray) -> np.ndarray:
    """log10 power mel [80, frames], frames every HOP samples with no padding."""
    return spectrogram(
        audio,
        window_function(N_FFT, "hann"),
        frame_length=N_FFT,
        hop_length=HOP,
        power=2.0,
        center=False,
        mel_filters=reference_filters(),
        log_mel="log10",
        mel_floor=1e-10,
    )


def whisper_scale(x: np.ndarray) -> np.ndarray:
    """Whisper's clamp to 8 below the peak and scale (openai/whisper audio.py)."""
    x = np.maximum(x, x.max() - 8.0)
    return (x + 4.0) / 4.0


def speechlike(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * 16000)) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1760 * t)
    return (tone + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filterbank_is_librosas_slaney(n_mels: int) -> None:
    ours = mel_filterbank(n_mels, N_FFT, 16000)
    assert ours.shape == (n_mels, 201) and ours.dtype == np.float64
    np.testing.assert_allclose(ours.T, reference_filters(n_mels), rtol=0, atol=1e-6)


def test_log_mel_of_carry_and_chunk_is_the_unpadded_spectrogram() -> None:
    audio = speechlike(1.0, 0)
    audio = np.concatenate((audio[:CARRY], audio))  # any carry, then one chunk
    ours = log_mel(audio, mel_filterbank(80, N_FFT, 16000).astype(np.float32), HOP)
    theirs = reference_log_mel(audio)
    assert ours.shape == theirs.shape == (80, 100)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)


def test_two_chunks_are_one_shot_framing_of_both() -> None:
    front = LogMel()
    state = front.new_state()
    audio = speechlike(2.0, 1)
    first = front(audio[:16000], state)
    np.testing.assert_array_equal(state.carry, audio[16000 - CARRY : 16000])
    second = front(audio[16000:], state)
    # One shot over the stream (silence before it), split into the chunks' frames.
    whole = reference_log_mel(np.concatenate((np.zeros(CARRY, np.float32), audio)))
    assert whole.shape == (80, 200)
    np.testing.assert_allclose(first[0], whisper_scale(whole[:, :100]), rtol=0, atol=1e-4)
    np.testing.assert_allclose(second[0], whisper_scale(whole[:, 100:]), rtol=0, atol=1e-4)


def test_output_shape_dtype_and_the_clamp() -> None:
    front = LogMel()
    chunk = np.zeros(16000, np.float32)
    chunk[8000:] = speechlike(0.5, 2)  # half silence: raw log-mel spans far more than 8
    state = front.new_state()
    out = front(chunk, state)
    assert out.shape == (1, 80, 100) and out.dtype == np.float32
    raw = log_mel(np.concatenate((np.zeros(CARRY, np.float32), chunk)), front.filters, HOP)
    assert raw.max() - raw.min() > 8.0
    assert out.max() - out.min() == pytest.approx(2.0, abs=1e-6)
    assert out.max() == pytest.approx((raw.max() + 4.0) / 4.0, abs=1e-6)


def test_reset_forgets_the_carry() -> None:
    front = LogMel()
    audio = speechlike(2.0, 3)
    state = front.new_state()
    front(audio[:16000], state)
    carried = front(audio[16000:], state)
    state.reset()
    fresh = front(audio[16000:], state)
    np.testing.assert_array_equal(fresh, front(audio[16000:], front.new_state()))
    assert np.abs(fresh - carried)[0, :, :2].max() > 0.01  # only the first frames differ
    np.testing.assert_array_equal(fresh[0, :, 2:], carried[0, :, 2:])


def test_a_wrong_length_names_the_expected_one() -> None:
    front = LogMel()
    with pytest.raises(EngineError, match=r"expected \(16000,\) samples"):
        front(np.zeros(15999, np.float32), front.new_state())
    with pytest.raises(EngineError, match=r"expected \(16000,\) samples"):
        front(np.zeros((2, 16000), np.float32), front.new_state())
    with pytest.raises(EngineError, match="another front end"):
        front(np.zeros(16000, np.float32), LogMel(hop=320, frames=50).new_state())


def test_from_schedule() -> None:
    schedule = Schedule(
        chunk_s=0.5,
        sample_rate_in=16000,
        hop_length=160,
        n_mels=128,
        mel_frames=50,
        audio_tokens=5,
        vision_tokens=0,
        image_size=0,
        speech_tokens=12,
        speech_codebook=6561,
        speech_end_token=6561,
        speech_start_token=6562,
        mel_frames_out=2,
        lookahead_tokens=3,
        prompt_frames=8,
        sample_rate_out=24000,
        hop_out=480,
    )
    front = LogMel.from_schedule(schedule)
    out = front(speechlike(0.5, 4), front.new_state())
    assert out.shape == (1, 128, 50)
