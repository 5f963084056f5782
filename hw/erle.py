"""Echo return loss enhancement (ERLE) of an echo canceller, through a real audio loop.

``ERLE = 10 log10(E[echo^2] / E[residual^2])`` in dB over the converged part: how much
quieter the assistant's own voice is after cancellation. 0 dB means nothing removed
(``suppress``, ``off``); libspeexdsp reaches 25-29 dB after 5 s of speech here.

The loop: :func:`loopback` plays a reference through the output device and records it
back (in tests, a PulseAudio null sink and its monitor, so it exercises resampling and
the device path); :func:`measure_erle` turns the recording into a microphone signal
through a synthetic :class:`EchoPath` (delay, attenuation, a light low-pass and a short
reverberant tail), optionally adds near-end speech (double talk), runs the canceller
with the played reference and reports :class:`ErleResult`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from venus.errors import DeviceError
from venus.hw.aec import EchoCanceller, Float32Array

log = logging.getLogger(__name__)

BLOCK_S = 0.1  # the measurement feeds the canceller 100 ms blocks
NEAR_LAG_S = 0.02  # near-end may come out up to 20 ms late (a canceller's own delay)


@dataclass(frozen=True)
class EchoPath:
    """A synthetic speaker-to-microphone path applied to the recorded loop signal."""

    delay_ms: float = 50.0  # acoustic + buffering delay
    attenuation_db: float = -6.0  # level of the echo relative to the recorded signal
    lowpass_hz: float = 4000.0  # one-pole low-pass (a small speaker's roll-off)
    reverb_ms: float = 60.0  # decay time constant of a weak diffuse tail, 0 for none
    reverb_db: float = -20.0  # tail energy relative to the direct path

    def impulse_response(self, sample_rate: int = 16000) -> Float32Array:
        """The path's impulse response, energy scaled to ``attenuation_db``."""
        delay = round(self.delay_ms * sample_rate / 1000)
        tail_len = round(5 * self.reverb_ms * sample_rate / 1000)
        h = np.zeros(delay + max(tail_len, 1), np.float64)
        h[delay] = 1.0
        if tail_len:
            rng = np.random.default_rng(0)
            decay = np.exp(-np.arange(tail_len) / (self.reverb_ms * sample_rate / 1000))
            tail = rng.standard_normal(tail_len) * decay
            tail *= 10 ** (self.reverb_db / 20) / np.sqrt(np.sum(tail**2))
            h[delay : delay + tail_len] += tail
        a = np.exp(-2 * np.pi * self.lowpass_hz / sample_rate)  # one-pole low-pass
        h = _one_pole(h, a)
        h *= 10 ** (self.attenuation_db / 20) / np.sqrt(np.sum(h**2))
        return h.astype(np.float32)

    def apply(self, signal: Float32Array, sample_rate: int = 16000) -> Float32Array:
        """``signal`` as the microphone would hear it through this path (same length)."""
        h = self.impulse_response(sample_rate)
        size = 1 << (len(signal) + len(h) - 2).bit_length()  # FFT convolution
        y = np.fft.irfft(np.fft.rfft(signal, size) * np.fft.rfft(h, size), size)
        return y[: len(signal)].astype(np.float32)


def _one_pole(x: NDArray[np.float64], a: float) -> NDArray[np.float64]:
    y = np.empty_like(x)
    acc = 0.0
    for i, v in enumerate(x):
        acc = (1 - a) * v + a * acc
        y[i] = acc
    return y


@dataclass(frozen=True)
class ErleResult:
    """One measurement; levels in dB, times in seconds."""

    strategy: str  # the canceller's strategy (speexdsp, suppress, ...)
    erle_db: float  # echo only, after ``converge_s``
    erle_per_s_db: tuple[float, ...]  # echo only, each second from the start (convergence)
    near_end_kept_db: float | None  # gain of near-end speech in double talk (0 = intact)
    path: EchoPath
    converge_s: float
    duration_s: float


def erle_db(echo: Float32Array, residual: Float32Array) -> float:
    """``10 log10(E[echo^2] / E[residual^2])`` in dB.

    NaN when there is no echo to measure, inf when the residual is silent.
    """
    e = float(np.mean(np.square(echo, dtype=np.float64)))
    r = float(np.mean(np.square(residual, dtype=np.float64)))
    if e == 0.0:
        return float("nan")
    if r == 0.0:
        return float("inf")
    return 10 * float(np.log10(e / r))


def run_canceller(
    canceller: EchoCanceller, mic: Float32Array, reference: Float32Array, sample_rate: int
) -> Float32Array:
    """Stream ``mic`` and ``reference`` through ``canceller`` in 100 ms blocks.

    A last partial block is dropped: the output may be up to 100 ms shorter.
    """
    block = round(BLOCK_S * sample_rate)
    n = len(mic) // block * block
    out = [
        canceller.process(mic[i : i + block], reference[i : i + block]) for i in range(0, n, block)
    ]
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def gain_db(output: Float32Array, component: Float32Array, max_lag: int) -> float:
    """Least-squares gain of ``component`` inside ``output`` at its best lag, in dB."""
    n = len(component) - max_lag
    ref = component[:n].astype(np.float64)
    power = float(np.dot(ref, ref))
    if n <= 0 or power == 0.0:
        raise ValueError("component is silent or shorter than max_lag")
    best = max(abs(float(np.dot(output[lag : lag + n], ref))) for lag in range(max_lag + 1))
    return 20 * float(np.log10(max(best / power, 1e-12)))


def measure_erle(
    canceller: EchoCanceller,
    reference: Float32Array,
    recorded: Float32Array,
    *,
    path: EchoPath | None = None,
    near_end: Float32Array | None = None,
    sample_rate: int = 16000,
    converge_s: float = 2.0,
) -> ErleResult:
    """ERLE of ``canceller`` on ``recorded`` (aligned to ``reference``) through ``path``.

    With ``near_end`` (same length, zeros where the user is silent) a second, double-talk
    run after ``reset`` measures how much of the near-end speech survives.
    """
    path = path or EchoPath()
    n = min(len(reference), len(recorded))
    echo = path.apply(recorded[:n], sample_rate)
    canceller.reset()
    out = run_canceller(canceller, echo, reference[:n], sample_rate)
    start = round(converge_s * sample_rate)
    if len(out) <= start:
        raise ValueError(f"signal of {n / sample_rate:.1f} s is shorter than converge_s")
    erle = erle_db(echo[start : len(out)], out[start:])
    second = sample_rate
    per_s = tuple(
        erle_db(echo[i : i + second], out[i : i + second])
        for i in range(0, len(out) - second + 1, second)
    )
    kept: float | None = None
    if near_end is not None:
        canceller.reset()
        near = near_end[:n].astype(np.float32)
        out2 = run_canceller(canceller, echo + near, reference[:n], sample_rate)
        active = np.flatnonzero(np.abs(near[: len(out2)]) > 0)
        if not len(active):
            raise ValueError("near_end is silent")
        seg = slice(int(active[0]), int(active[-1]) + 1)
        kept = gain_db(out2[seg], near[seg], round(NEAR_LAG_S * sample_rate))
        canceller.reset()
    result = ErleResult(
        canceller.strategy, erle, per_s, kept, path, converge_s, len(out) / sample_rate
    )
    log.info(
        "ERLE %s: %.1f dB (near end kept %s dB) delay %.0f ms attenuation %.0f dB over %.1f s",
        result.strategy,
        result.erle_db,
        "n/a" if kept is None else f"{kept:+.1f}",
        path.delay_ms,
        path.attenuation_db,
        result.duration_s,
    )
    return result


@dataclass(frozen=True)
class Loopback:
    """A signal recorded back from the audio loop, aligned sample for sample."""

    recorded: Float32Array  # same length as what was played
    offset_s: float  # where the playback began in the raw recording (< 0: recording began late)
    gain_db: float  # level of the recording relative to what was played
    xruns: int = 0  # callbacks PortAudio flagged with an underflow or overflow (a glitch)


def loopback(
    signal: Float32Array,
    sample_rate: int = 16000,
    *,
    output_device: int | str | None = None,
    input_device: int | str | None = None,
    max_offset_s: float = 1.0,
) -> Loopback:
    """Play ``signal`` while recording the input, then align the recording to it.

    With PulseAudio and a null sink whose monitor is the default source, the recording
    is what was played, shifted by the loop's latency and the streams' start times.
    Lead ``signal`` with at least ``max_offset_s`` of silence: the input stream may
    start after the output. Takes ``len(signal) / sample_rate + 2 * max_offset_s``.
    The streams ask for PortAudio's high latency, so a loaded machine glitches less;
    ``Loopback.xruns`` counts the callbacks that still saw an underflow or overflow (a
    take with xruns may be shifted part-way through). Raises ``DeviceError`` when a
    stream cannot be opened or records nothing.
    """
    import sounddevice as sd

    pad = np.zeros(round(max_offset_s * sample_rate), np.float32)
    played = np.concatenate([signal.astype(np.float32), pad])
    rec = np.zeros(len(played) + len(pad), np.float32)
    pos = {"out": 0, "in": 0, "xruns": 0}
    done = threading.Event()

    def out_cb(outdata: NDArray[np.float32], frames: int, _t: object, s: object) -> None:
        if _glitched(s) and pos["out"] < len(played):
            pos["xruns"] += 1
        chunk = played[pos["out"] : pos["out"] + frames]
        outdata[: len(chunk), 0] = chunk
        outdata[len(chunk) :, 0] = 0.0
        pos["out"] += frames

    def in_cb(indata: NDArray[np.float32], frames: int, _t: object, s: object) -> None:
        if _glitched(s) and pos["in"] < len(rec):
            pos["xruns"] += 1
        take = min(frames, len(rec) - pos["in"])
        rec[pos["in"] : pos["in"] + take] = indata[:take, 0]
        pos["in"] += take
        if pos["in"] >= len(rec):
            done.set()

    kw = {"samplerate": sample_rate, "channels": 1, "dtype": "float32", "latency": "high"}
    try:
        with (
            sd.InputStream(device=input_device, callback=in_cb, **kw),
            sd.OutputStream(device=output_device, callback=out_cb, **kw),
        ):
            finished = done.wait(len(rec) / sample_rate + 10.0)
    except sd.PortAudioError as e:
        raise DeviceError(f"loopback: cannot open the audio streams ({e}); check devices") from e
    if not finished:
        raise DeviceError(
            f"loopback recorded {pos['in']} of {len(rec)} samples; is the input running?"
        )
    aligned = align(signal.astype(np.float32), rec, sample_rate)
    return dataclasses.replace(aligned, xruns=pos["xruns"])


def _glitched(flags: object) -> bool:
    """Whether a sounddevice ``CallbackFlags`` reports an underflow or overflow."""
    names = ("input_underflow", "input_overflow", "output_underflow", "output_overflow")
    return any(getattr(flags, name, False) for name in names)


def align(played: Float32Array, recorded: Float32Array, sample_rate: int = 16000) -> Loopback:
    """Shift ``recorded`` so it lines up with ``played`` (cross-correlation via FFT).

    Each stream starts on its own, so the recording may begin before or after the
    playback did: both directions are searched.
    """
    if not np.any(recorded):
        raise DeviceError("loopback recorded silence; is the input the monitor of the output?")
    n = len(played) + len(recorded)
    size = 1 << (n - 1).bit_length()
    spectrum = np.fft.rfft(recorded, size) * np.conj(np.fft.rfft(played, size))
    lag = int(np.argmax(np.abs(np.fft.irfft(spectrum, size))))
    if lag > size // 2:
        lag -= size
    shifted = np.zeros(len(played), np.float32)
    src = recorded[max(lag, 0) :]
    dst = shifted[max(-lag, 0) :]
    k = min(len(src), len(dst))
    dst[:k] = src[:k]
    gain = -erle_db(played, shifted)  # 10 log10(E[shifted^2] / E[played^2])
    return Loopback(shifted, lag / sample_rate, gain)
