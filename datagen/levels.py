"""Levels of 16 kHz float32 audio and where speech is in it: ``level_db``,
``active_level_db`` and ``onsets`` (energy-based speech detection, to 1 ms).

Levels are in dB relative to full scale: ``10 * log10(mean(x ** 2))``, so a full-scale
sine reads -3 dB and unit-RMS noise 0 dB. The *active level* of speech is its power over
the regions :func:`onsets` finds (pauses excluded). Pure numpy; the bottom layer of the
audio modules (``venus.datagen.acoustics`` re-exports every name here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

SAMPLE_RATE = 16_000  # Hz
SILENCE_DB = -120.0  # the level of digital silence, instead of -inf
HOP_MS = 1.0  # grid of the speech detector; its boundaries are this precise

# Speech detection (onsets): levels from 50 ms windows, which average out noise. In a
# noisy signal, only the energy in the speech band counts: where voiced speech is and
# hum, rumble and much hiss are not (the band misses fricatives' high part, so a clean
# signal is measured full-band).
SPEECH_BAND_HZ = (200.0, 4000.0)
_LEVEL_WINDOW_MS = 50.0
_HIGH_BELOW_PEAK_DB = 35.0  # a region must rise this close to the loudest speech
_HIGH_ABOVE_FLOOR_DB = 10.0  # and, in noise, this far above the floor
_LOW_ABOVE_FLOOR_DB = 4.0  # it extends while it stays this far above the floor


@dataclass(frozen=True)
class Region:
    """A span of speech, in samples: ``signal[start:end]``."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def level_db(signal: NDArray[np.floating]) -> float:
    """Power over the whole signal in dBFS; SILENCE_DB for silence or no samples."""
    if signal.size == 0:
        return SILENCE_DB
    power = float(np.mean(np.square(signal, dtype=np.float64)))
    return max(SILENCE_DB, 10.0 * math.log10(power)) if power > 0 else SILENCE_DB


def active_level_db(signal: NDArray[np.floating], rate: int = SAMPLE_RATE) -> float:
    """Power over the speech regions :func:`onsets` finds, in dBFS.

    Pauses do not dilute it, so a sentence with long gaps reads as loud as without them.
    A signal in which no region stands out (a steady tone or noise) is active throughout
    and reads its :func:`level_db`; silence reads SILENCE_DB.
    """
    regions = onsets(signal, rate)
    if not regions:
        return level_db(signal)
    active = np.concatenate([signal[r.start : r.end] for r in regions])
    return level_db(active)


def onsets(
    signal: NDArray[np.floating],
    rate: int = SAMPLE_RATE,
    *,
    band_hz: tuple[float, float] | None = None,
    below_peak_db: float = 50.0,
    window_ms: float = 10.0,
    min_silence_ms: float = 150.0,
    min_speech_ms: float = 50.0,
) -> tuple[Region, ...]:
    """Where speech starts and ends: energy detection with hysteresis, to 1 ms.

    The method: the energy of ``window_ms`` windows on a 1 ms grid, in dB, of the signal
    or, given ``band_hz``, of its band (a zero-phase band-pass). The peak is
    the loudest 50 ms window and the noise floor the quietest (in stationary noise, the
    noise's power within a dB; in clean speech with any pause, digital silence). A region
    starts where the energy rises above a high threshold (35 dB below the peak, or 10 dB
    above the floor in noise, whichever is higher) and extends both ways while it stays
    above a low one (``below_peak_db`` below the peak, or 4 dB above the floor). Regions
    closer than ``min_silence_ms`` merge (stop closures and short word gaps), and
    regions shorter than ``min_speech_ms`` are dropped (clicks). A boundary is the first
    sample whose window *after* it (for a start) or *before* it (for an end) is above the
    low threshold, so a clean onset is found to within the 1 ms grid, not smeared by
    half a window.

    On a clean signal the thresholds follow the peak; in stationary noise, the floor.
    For a clean track leave ``band_hz`` None: the whole band counts, fricatives
    included, and boundaries land within a few ms. For a noisy one pass SPEECH_BAND_HZ:
    brown and pink noise hardly count, and at 10 dB SNR in white or pink noise onsets
    land within 30 ms except where a word starts with a fricative (/s/, /f/), whose
    weak start the noise hides (up to ~130 ms late). Non-stationary noise (babble, a
    TV) is detected as speech, and one talker much quieter than another (by over 35 dB)
    is missed: pass the clean track of one talker when there is one.

    Returns:
        the regions, in order, not overlapping; empty for silence or steady noise.
    """
    x = np.asarray(signal, dtype=np.float64)
    if band_hz is not None:
        x = _band_pass(x, band_hz, rate)
    hop = max(1, round(rate * HOP_MS / 1000))
    window = max(hop, round(rate * window_ms / 1000))
    level_window = max(window, round(rate * _LEVEL_WINDOW_MS / 1000))
    if x.size < level_window:
        return ()
    cumulative = np.concatenate([[0.0], np.cumsum(np.square(x))])
    # energy (dB) of the window starting at each grid point t: x[t : t + window]
    starts = np.arange(0, x.size - window + 1, hop)
    energy_db = _db((cumulative[starts + window] - cumulative[starts]) / window)
    level_starts = np.arange(0, x.size - level_window + 1, hop)
    level_db_ = _db(
        (cumulative[level_starts + level_window] - cumulative[level_starts]) / level_window
    )
    floor_db, peak_db = float(level_db_.min()), float(level_db_.max())
    if peak_db - floor_db < _HIGH_ABOVE_FLOOR_DB:
        return ()  # nothing rises above the floor: silence or steady noise only
    high = max(peak_db - _HIGH_BELOW_PEAK_DB, floor_db + _HIGH_ABOVE_FLOOR_DB)
    low = min(high, max(peak_db - below_peak_db, floor_db + _LOW_ABOVE_FLOOR_DB))

    last_grid = starts.size - 1
    regions: list[Region] = []
    for first, last in _runs(energy_db > low):
        if not np.any(energy_db[first : last + 1] > high):
            continue
        # The window starting at grid point `first` is the first above the low threshold,
        # so speech begins at its far end, within a hop; at `last`, the window is the last
        # one still holding speech, which ends within a hop of its start.
        start = 0 if first == 0 else int(starts[first]) + window - hop
        end = x.size if last == last_grid else int(starts[last]) + hop
        regions.append(Region(start, max(start, end)))
    return _tidy(regions, rate, min_silence_ms, min_speech_ms)


def _band_pass(
    x: NDArray[np.float64], band_hz: tuple[float, float], rate: int
) -> NDArray[np.float64]:
    """``x`` band-passed, zero-phase (a Hann-windowed sinc, 8 ms long)."""
    if x.size == 0:
        return x
    half = round(0.004 * rate)
    k = np.arange(-half, half + 1)
    window = np.hanning(k.size)
    lo = band_hz[0] / rate
    hi = min(band_hz[1], 0.45 * rate) / rate
    taps = (2 * hi * np.sinc(2 * hi * k) - 2 * lo * np.sinc(2 * lo * k)) * window
    return fft_convolve(x, taps)[half : half + x.size]


def _db(power: NDArray[np.float64]) -> NDArray[np.float64]:
    db: NDArray[np.float64] = 10.0 * np.log10(np.maximum(power, 10.0 ** (SILENCE_DB / 10)))
    return db


def _runs(mask: NDArray[np.bool_]) -> list[tuple[int, int]]:
    """(first, last) indices of each run of True."""
    if not mask.any():
        return []
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.diff(padded)
    firsts = np.flatnonzero(edges == 1)
    lasts = np.flatnonzero(edges == -1) - 1
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def _tidy(
    regions: list[Region], rate: int, min_silence_ms: float, min_speech_ms: float
) -> tuple[Region, ...]:
    """Merge regions separated by less than min_silence_ms; drop those under min_speech_ms."""
    gap = rate * min_silence_ms / 1000
    merged: list[Region] = []
    for region in regions:
        if merged and region.start - merged[-1].end < gap:
            merged[-1] = Region(merged[-1].start, region.end)
        else:
            merged.append(region)
    shortest = rate * min_speech_ms / 1000
    return tuple(r for r in merged if r.length >= shortest)


def fft_convolve(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """The full linear convolution of ``a`` and ``b`` (``len(a) + len(b) - 1``), by FFT."""
    size = a.size + b.size - 1
    fft_size = 1 << (size - 1).bit_length()
    product = np.fft.rfft(a, fft_size) * np.fft.rfft(b, fft_size)
    return np.fft.irfft(product, fft_size)[:size]
