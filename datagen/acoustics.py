"""Acoustic conditions on 16 kHz float32 audio: noise at an SNR, babble, reverberation,
distant sources, level changes, mixing, and energy-based speech detection.

Pure numpy. Randomness comes only from the ``numpy.random.Generator`` passed in, so a
seeded generator gives the same samples every time.

Levels are in dB relative to full scale: ``10 * log10(mean(x ** 2))``, so a full-scale
sine reads -3 dB and unit-RMS noise 0 dB. The *active level* of speech is its power over
the regions :func:`onsets` finds (pauses excluded); SNRs are measured as the signal's
active level over the noise's power across the signal's length.

Levels and speech detection (``level_db``, ``active_level_db``, ``onsets``, ``Region``)
are in ``venus.datagen.levels`` and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from venus.datagen.levels import (
    HOP_MS,
    SAMPLE_RATE,
    SILENCE_DB,
    SPEECH_BAND_HZ,
    Region,
    active_level_db,
    fft_convolve,
    level_db,
    onsets,
)

__all__ = [
    "HOP_MS", "NOISE_LEVEL_DB", "SAMPLE_RATE", "SILENCE_DB", "SPEECH_BAND_HZ", "Audio",
    "Normalized", "Region", "active_level_db", "add_noise", "babble", "brown_noise",
    "distant", "level_changes", "level_db", "lowpass", "mix", "normalize_peak", "onsets",
    "pink_noise", "reverberate", "room_impulse_response", "white_noise",
]  # fmt: skip

Audio = NDArray[np.float32]

NOISE_LEVEL_DB = -20.0  # RMS of the generated noises (dBFS)


# --- noise -------------------------------------------------------------------------


def white_noise(n: int, rng: np.random.Generator) -> Audio:
    """``n`` samples of Gaussian white noise at NOISE_LEVEL_DB."""
    return _at_noise_level(rng.standard_normal(n))


def pink_noise(n: int, rng: np.random.Generator) -> Audio:
    """``n`` samples of pink noise (power falling 3 dB an octave) at NOISE_LEVEL_DB."""
    return _coloured(n, rng, exponent=0.5)


def brown_noise(n: int, rng: np.random.Generator) -> Audio:
    """``n`` samples of brown noise (power falling 6 dB an octave) at NOISE_LEVEL_DB."""
    return _coloured(n, rng, exponent=1.0)


def _coloured(n: int, rng: np.random.Generator, exponent: float) -> Audio:
    """White noise shaped in the frequency domain by ``1 / f ** exponent`` (no DC)."""
    if n == 0:
        return np.zeros(0, np.float32)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(spectrum.size, dtype=np.float64)
    f[0] = 1.0
    shaped = spectrum / f**exponent
    shaped[0] = 0.0
    return _at_noise_level(np.fft.irfft(shaped, n))


def _at_noise_level(x: NDArray[np.floating]) -> Audio:
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0
    if rms == 0:
        return np.zeros(x.size, np.float32)
    return (x * (10 ** (NOISE_LEVEL_DB / 20) / rms)).astype(np.float32)


def babble(
    n: int,
    rng: np.random.Generator,
    talkers: Sequence[NDArray[np.floating]],
    *,
    gap_s: tuple[float, float] = (0.1, 0.8),
    rate: int = SAMPLE_RATE,
) -> Audio:
    """Several people talking at once, at NOISE_LEVEL_DB: a crowd, a cafe.

    Each of ``talkers`` (pre-rendered speech, e.g. :func:`venus.datagen.tts.synthesize`
    outputs; one voice each) is brought to the same active level and repeated with
    random gaps from ``gap_s`` to fill ``n`` samples, starting at a random point of its
    loop, with a random gain within +-3 dB. Four or more talkers blur into babble; two
    or three stay intelligible.

    Raises:
        ValueError: no talkers, or a talker is silent.
    """
    if not talkers:
        raise ValueError("babble needs at least one talker's speech")
    out = np.zeros(n, np.float64)
    for talker in talkers:
        speech = np.asarray(talker, np.float64)
        level = active_level_db(speech, rate)
        if level <= SILENCE_DB:
            raise ValueError("babble: a talker's speech is silent")
        speech = speech * 10 ** ((-level + rng.uniform(-3.0, 3.0)) / 20)
        pieces: list[NDArray[np.float64]] = []
        have = 0
        while have < n + speech.size:  # one loop more than needed, to start anywhere in it
            gap = np.zeros(round(rng.uniform(*gap_s) * rate))
            pieces += [speech, gap]
            have += speech.size + gap.size
        loop = np.concatenate(pieces)
        offset = int(rng.integers(0, loop.size - n + 1))
        out += loop[offset : offset + n]
    return _at_noise_level(out)


def add_noise(
    signal: NDArray[np.floating],
    noise: NDArray[np.floating],
    snr_db: float,
    rate: int = SAMPLE_RATE,
) -> Audio:
    """``signal`` plus ``noise`` scaled so that the SNR is ``snr_db``.

    SNR = the signal's :func:`active_level_db` (power over its speech regions) minus the
    noise's power over the first ``len(signal)`` samples, which is what is added.

    Raises:
        ValueError: the noise is shorter than the signal, or silent, or the signal is.
    """
    if noise.size < signal.size:
        raise ValueError(f"add_noise: {noise.size} noise samples for {signal.size} of signal")
    noise = noise[: signal.size]
    speech_db = active_level_db(signal, rate)
    noise_db = level_db(noise)
    if speech_db <= SILENCE_DB or noise_db <= SILENCE_DB:
        raise ValueError("add_noise: the signal or the noise is silent; no SNR to set")
    gain = 10 ** ((speech_db - snr_db - noise_db) / 20)
    return (np.asarray(signal, np.float64) + gain * noise).astype(np.float32)


# --- rooms ---------------------------------------------------------------------------

_EARLY_S = (0.002, 0.05)  # window of the early reflections after the direct path
_EARLY_COUNT = 12
_TAIL_ONSET_S = 0.01  # the diffuse tail fades in over this
_LENGTH_RT60 = 1.5  # the response runs this many RT60s (energy down 90 dB)


def room_impulse_response(
    rt60_s: float, rng: np.random.Generator, rate: int = SAMPLE_RATE, *, drr_db: float = 0.0
) -> Audio:
    """A synthetic room: direct path, early reflections and an exponential diffuse tail.

    The model: a unit direct path at sample 0 (so reverberation delays nothing), then
    ``_EARLY_COUNT`` reflections at uniform random times in 2-50 ms with random signs,
    then Gaussian noise fading in over 10 ms; reflections and tail share the envelope
    ``10 ** (-3 t / rt60_s)`` (amplitude), which makes the energy decay 60 dB in
    ``rt60_s``. The reflections and tail together carry ``-drr_db`` dB of the direct
    path's energy (drr = direct-to-reverberant ratio: +10 dB is a near talker, -5 dB a
    far one). Broadband: no frequency-dependent absorption. Length 1.5 RT60.

    Raises:
        ValueError: rt60_s not positive.
    """
    if not rt60_s > 0:
        raise ValueError(f"room_impulse_response needs rt60_s > 0, got {rt60_s}")
    n = max(2, round(_LENGTH_RT60 * rt60_s * rate))
    t = np.arange(n) / rate
    envelope = 10 ** (-3.0 * t / rt60_s)
    tail = rng.standard_normal(n) * np.minimum(1.0, t / _TAIL_ONSET_S)
    early_at = rng.integers(round(_EARLY_S[0] * rate), round(_EARLY_S[1] * rate), _EARLY_COUNT)
    early_at = early_at[early_at < n]
    tail[early_at] += rng.choice([-1.0, 1.0], early_at.size) * 3.0
    reverb = tail * envelope
    reverb[0] = 0.0
    energy = float(np.sum(reverb**2))
    reverb *= math.sqrt(10 ** (-drr_db / 10) / energy)
    reverb[0] = 1.0
    return reverb.astype(np.float32)


def reverberate(signal: NDArray[np.floating], rir: NDArray[np.floating]) -> Audio:
    """``signal`` convolved with ``rir`` (FFT), the full ``len(signal) + len(rir) - 1``."""
    if signal.size == 0 or rir.size == 0:
        return np.zeros(0, np.float32)
    return fft_convolve(np.asarray(signal, np.float64), np.asarray(rir, np.float64)).astype(
        np.float32
    )


def lowpass(signal: NDArray[np.floating], cutoff_hz: float, rate: int = SAMPLE_RATE) -> Audio:
    """Zero-phase low-pass: a 10 ms Hann-windowed sinc, centred so nothing moves in time."""
    if not 0 < cutoff_hz < rate / 2:
        raise ValueError(f"lowpass cutoff {cutoff_hz} Hz not within (0, {rate // 2}) Hz")
    if signal.size == 0:
        return np.zeros(0, np.float32)
    half = round(0.005 * rate)
    k = np.arange(-half, half + 1)
    taps = np.sinc(2 * cutoff_hz / rate * k) * np.hanning(k.size)
    taps /= taps.sum()
    full = fft_convolve(np.asarray(signal, np.float64), taps)
    return full[half : half + signal.size].astype(np.float32)


def distant(
    signal: NDArray[np.floating],
    rng: np.random.Generator,
    *,
    attenuation_db: float = 20.0,
    cutoff_hz: float = 2500.0,
    rt60_s: float = 0.6,
    drr_db: float = -6.0,
    rate: int = SAMPLE_RATE,
) -> Audio:
    """Speech from a distant source (a TV in another room): quieter, duller, reverberant.

    Low-passed at ``cutoff_hz`` (walls absorb the highs), reverberated in a room of
    ``rt60_s`` with the direct path ``drr_db`` against the reverberation, then set
    ``attenuation_db`` below the input's active level. Nothing is delayed, so speech
    still starts where it started; the output is longer by the room's tail
    (``len(signal) + 1.5 * rt60_s * rate - 1`` samples).
    """
    if signal.size == 0:
        return np.zeros(0, np.float32)
    before = active_level_db(signal, rate)
    rir = room_impulse_response(rt60_s, rng, rate, drr_db=drr_db)
    far = reverberate(lowpass(signal, cutoff_hz, rate), rir).astype(np.float64)
    after = active_level_db(far[: signal.size], rate)
    return (far * 10 ** ((before - attenuation_db - after) / 20)).astype(np.float32)


def level_changes(
    signal: NDArray[np.floating],
    rng: np.random.Generator,
    *,
    count: int = 2,
    max_change_db: float = 6.0,
    ramp_s: tuple[float, float] = (0.02, 2.0),
    rate: int = SAMPLE_RATE,
) -> Audio:
    """The talker moving or turning: ``count`` gain changes at random times.

    Each change goes to a new gain, uniform in +-``max_change_db`` of the original, along
    a linear ramp (in dB) lasting a random time in ``ramp_s``: a ramp of 20 ms is a step,
    of 2 s a slow drift. The gain starts at 0 dB; changes do not overlap.
    """
    n = signal.size
    if n == 0 or count == 0:
        return np.array(signal, np.float32)
    gain_db = np.zeros(n)
    times = np.sort(rng.integers(0, n, count))
    current = 0.0
    for i, at in enumerate(times.tolist()):
        target = rng.uniform(-max_change_db, max_change_db)
        limit = int(times[i + 1]) if i + 1 < count else n
        length = max(1, min(round(rng.uniform(*ramp_s) * rate), limit - at))
        gain_db[at : at + length] = np.linspace(current, target, length, endpoint=False)
        gain_db[at + length :] = target
        current = target
    return (np.asarray(signal, np.float64) * 10 ** (gain_db / 20)).astype(np.float32)


# --- mixing --------------------------------------------------------------------------


def mix(
    tracks: Sequence[NDArray[np.floating]], offsets: Sequence[int], length: int | None = None
) -> Audio:
    """Tracks summed into one buffer, each starting at its sample offset.

    The sum is not clipped (float32 can exceed 1.0): bring it into range with
    :func:`normalize_peak` before writing integer PCM. The buffer is ``length`` samples
    (tracks running past it are cut), or long enough for every track.

    Raises:
        ValueError: the counts differ, or an offset is negative.
    """
    if len(tracks) != len(offsets):
        raise ValueError(f"mix: {len(tracks)} tracks but {len(offsets)} offsets")
    if any(o < 0 for o in offsets):
        raise ValueError(f"mix: negative offset in {list(offsets)}")
    end = max((o + t.size for t, o in zip(tracks, offsets, strict=True)), default=0)
    out = np.zeros(end if length is None else length, np.float64)
    for track, offset in zip(tracks, offsets, strict=True):
        piece = track[: max(0, out.size - offset)]
        out[offset : offset + piece.size] += piece
    return out.astype(np.float32)


@dataclass(frozen=True, eq=False)
class Normalized:
    """A signal scaled by :func:`normalize_peak`, and the gain applied."""

    audio: Audio
    gain_db: float


def normalize_peak(
    signal: NDArray[np.floating], peak_db: float = -1.0, *, only_down: bool = False
) -> Normalized:
    """``signal`` scaled so its absolute peak is ``peak_db`` dBFS; reports the gain.

    With ``only_down``, a signal already below the peak is left as it is (gain 0 dB):
    the clip guard for a mix that should keep its level. Silence is returned unscaled.
    """
    peak = float(np.max(np.abs(signal))) if signal.size else 0.0
    if peak == 0.0:
        return Normalized(np.asarray(signal, np.float32).copy(), 0.0)
    gain_db = peak_db - 20 * math.log10(peak)
    if only_down:
        gain_db = min(gain_db, 0.0)
    scaled = np.asarray(signal, np.float64) * 10 ** (gain_db / 20)
    return Normalized(scaled.astype(np.float32), gain_db)
