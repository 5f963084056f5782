"""A person's speech made again by a source-filter vocoder (``speech.vocoded_p``).

The held-out set's flite voices (``rms``, ``slt``) are clustergen voices: speech made by
a statistical parametric vocoder, with its smoothed spectral envelope and its buzzy
pulse-and-noise source. Training has one such voice (``awb``); the listening stage hears
the held-out espeak-ng voices at 28-29% CER and the flite ones at 57-63%
(docs/training-log.md, twenty-fifth round), and formant scaling did not close that gap.
This turns any voice into one with that kind of sound: Praat's LPC analysis (Burg,
order 18 at 16 kHz, Praat's own rule of 2 + 1 per kHz) keeps the envelope, Praat's
pitch tracker the f0; the source is a unit-power pulse train at that f0 where the
tracker hears voicing (with a little noise mixed in, as mixed-excitation vocoders do)
and white noise elsewhere; the LPC filter shapes it, and each 20 ms keeps the level it
had. Length and timing are the input's, so the words stay where the plan put them.

Praat through ``praat-parselmouth`` (the ``export`` extra, which training needs anyway;
``train/pitch.py`` tracks f0 with it too): LPC analysis and the all-pole filter are
Praat's, no hand-written DSP beyond the pulse train.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.typing import NDArray

from venus.datagen.acoustics import SAMPLE_RATE
from venus.errors import DatagenError

__all__ = ["LPC_ORDER", "NOISE_MIX", "vocode"]

LPC_ORDER = 18  # Praat's rule: 2 + one per kHz of the sampling rate (16 kHz)
NOISE_MIX = 0.15  # noise in the voiced source, against the pulses' unit power
PITCH_FLOOR_HZ, PITCH_CEILING_HZ = 60.0, 500.0
LEVEL_FRAME = 320  # 20 ms: the output keeps the input's level per frame
_FLOOR = 1e-12


def vocode(audio: NDArray[np.float32], key: str) -> NDArray[np.float32]:
    """``audio`` (16 kHz mono) made again by the LPC vocoder (module doc); ``key`` seeds
    its noise, so the same words in the same voice come out the same."""
    try:
        import parselmouth
        from parselmouth.praat import call
    except ImportError:
        raise DatagenError(
            "speech.vocoded_p needs Praat (praat-parselmouth): pip install "
            "'realtime-venus[export]' (or praat-parselmouth), or set speech.vocoded_p = 0"
        ) from None
    x = np.asarray(audio, np.float64)
    if x.size < LEVEL_FRAME:
        return np.asarray(audio, np.float32)
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    sound = parselmouth.Sound(x, SAMPLE_RATE)
    pitch = sound.to_pitch_ac(
        time_step=0.005, pitch_floor=PITCH_FLOOR_HZ, pitch_ceiling=PITCH_CEILING_HZ
    )
    t = np.arange(x.size) / SAMPLE_RATE
    hz = np.nan_to_num(pitch.selected_array["frequency"])
    f0 = np.interp(t, pitch.xs(), hz, left=0.0, right=0.0)
    voiced = f0 > 0
    cycles = np.cumsum(np.where(voiced, f0, 0.0) / SAMPLE_RATE)
    pulses = (np.diff(np.floor(cycles), prepend=0.0) > 0) & voiced
    source = np.zeros(x.size)
    source[pulses] = np.sqrt(SAMPLE_RATE / f0[pulses])  # one pulse a period: unit power
    noise = rng.standard_normal(x.size)
    source = np.where(voiced, source + NOISE_MIX * noise, noise)
    lpc = call(sound, "To LPC (burg)", LPC_ORDER, 0.025, 0.005, 50.0)
    shaped = call([parselmouth.Sound(source, SAMPLE_RATE), lpc], "Filter", "no").values[0]
    out = shaped[: x.size] * _level(x) / _level(shaped[: x.size])
    return np.asarray(out, np.float32)


def _level(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """RMS per ``LEVEL_FRAME`` samples, interpolated to every sample."""
    n = max(1, a.size // LEVEL_FRAME)
    frames = a[: n * LEVEL_FRAME].reshape(n, -1)
    rms = np.sqrt(np.mean(frames**2, axis=1) + _FLOOR)
    centres = np.arange(n) * LEVEL_FRAME + LEVEL_FRAME / 2
    return np.asarray(np.interp(np.arange(a.size), centres, rms), np.float64)
