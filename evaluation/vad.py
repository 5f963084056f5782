"""Speech segments of a whole recording: who spoke when, for the overlap metrics.

Full-Duplex-Bench's timing script (v1.5 ``get_timing.py``) runs Silero VAD over the
user's ``input.wav`` and the model's ``output.wav`` and merges segments across short
gaps: 0.6 s for the user, 0.5 s for the model. We keep its merge gaps and replace the
detector with the one the daemon runs (webrtcvad through :class:`venus.hw.vad.Vad`, no
torch), in four steps:

1. **Detect.** The file, resampled to 16 kHz, goes through one :class:`Vad` as a single
   chunk: 10 ms frames, aggressiveness 2 (the daemon's), a segment starts at 30 ms of
   voiced frames and ends after 150 ms of unvoiced ones (the daemon's defaults). A
   segment still open at the end of the file ends there.
2. **Refine the edges.** webrtcvad keeps voicing for ~50-150 ms after speech stops (its
   own smoothing), so raw offsets are late. Each segment is narrowed to its first and last
   10 ms frame whose RMS is within ``EDGE_DB`` (40 dB) of the segment's loudest frame and
   at least ``NOISE_MARGIN_DB`` (6 dB) above the file's noise floor (the 10th percentile
   of its frame RMS; never below ``FLOOR_DBFS``, -70 dBFS). On a model's output, where
   the silence is digital silence or near it, a hard cut lands within a frame; on noisy
   audio the edge moves to where the speech sinks into the noise. 40 dB is the threshold
   the data pipeline measures overlap windows with (docs/data.md).
3. **Drop blips** shorter than ``MIN_SPEECH_S`` (0.25 s, Silero's default minimum speech
   duration, which the benchmark inherits): webrtcvad's first ~0.1 s after a reset, while
   it learns the noise floor, and clicks.
4. **Merge** segments whose gap is shorter than the merge gap (``USER_MERGE_GAP_S`` 0.6 s,
   ``MODEL_MERGE_GAP_S`` 0.5 s). The benchmark merges gaps ``<=`` the threshold; a gap of
   exactly the threshold is measured on a 10 ms grid here, so the two differ only there.

Times are seconds from the first sample of the file. On synthetic speech with hard cuts
onsets land within 10 ms and offsets within 20 ms (``tests/evaluation/test_vad.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import soxr  # type: ignore[import-untyped, unused-ignore]
from numpy.typing import NDArray

from venus.hw.vad import Vad

__all__ = [
    "EDGE_DB",
    "MIN_SPEECH_S",
    "MODEL_MERGE_GAP_S",
    "USER_MERGE_GAP_S",
    "VAD_RATE_HZ",
    "Segment",
    "at_16k",
    "merge_gaps",
    "model_segments",
    "speech_segments",
    "user_segments",
]

Samples = NDArray[np.float32]

VAD_RATE_HZ = 16000  # the detector's rate; other rates are resampled (soxr)
FRAME_MS = 10  # detector frame and edge-refinement frame
AGGRESSIVENESS = 2  # webrtcvad mode, the daemon's
START_MS = 30  # voiced time that starts a segment (hw.vad default)
HANGOVER_MS = 150  # unvoiced time that ends one (hw.vad default)
EDGE_DB = 40.0  # an edge frame is within this of the segment's loudest frame
FLOOR_DBFS = -70.0  # and above this absolute level
NOISE_MARGIN_DB = 6.0  # and this far above the file's noise floor
NOISE_PERCENTILE = 10  # the noise floor: this percentile of the file's frame RMS
MIN_SPEECH_S = 0.25  # shorter segments are dropped (Silero's min_speech_duration_ms)
USER_MERGE_GAP_S = 0.6  # Full-Duplex-Bench get_timing.py USER_MERGE_GAP
MODEL_MERGE_GAP_S = 0.5  # Full-Duplex-Bench get_timing.py MODEL_MERGE_GAP


@dataclass(frozen=True)
class Segment:
    """A stretch of speech (or a window), ``[start_s, end_s)`` in seconds."""

    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not self.end_s >= self.start_s:
            raise ValueError(f"segment ends ({self.end_s}) before it starts ({self.start_s})")

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def as_list(self) -> list[float]:
        """``[start_s, end_s]`` rounded to the millisecond (for reports)."""
        return [round(self.start_s, 3), round(self.end_s, 3)]


def speech_segments(
    samples: Samples,
    rate_hz: int,
    merge_gap_s: float,
    *,
    min_speech_s: float = MIN_SPEECH_S,
) -> tuple[Segment, ...]:
    """The speech in ``samples`` (mono float in [-1, 1] at ``rate_hz``), as segments in time
    order, gaps shorter than ``merge_gap_s`` bridged (steps 1-4 of the module doc)."""
    if samples.ndim != 1:
        raise ValueError(f"samples must be mono (1-D), not shape {samples.shape}")
    audio = at_16k(samples, rate_hz)
    raw = _detect(audio)
    rms = _frame_rms(audio)
    floor = max(_noise_floor(rms) * 10 ** (NOISE_MARGIN_DB / 20), 10 ** (FLOOR_DBFS / 20))
    refined = [s for s in (_refine(seg, rms, floor) for seg in raw) if s is not None]
    kept = [s for s in refined if s.duration_s >= min_speech_s]
    return merge_gaps(kept, merge_gap_s)


def user_segments(samples: Samples, rate_hz: int) -> tuple[Segment, ...]:
    """The user's speech in ``input.wav``: gaps under 0.6 s merged."""
    return speech_segments(samples, rate_hz, USER_MERGE_GAP_S)


def model_segments(samples: Samples, rate_hz: int) -> tuple[Segment, ...]:
    """The model's speech in ``output.wav``: gaps under 0.5 s merged."""
    return speech_segments(samples, rate_hz, MODEL_MERGE_GAP_S)


def merge_gaps(segments: Sequence[Segment], gap_s: float) -> tuple[Segment, ...]:
    """``segments`` sorted, with every gap shorter than ``gap_s`` bridged (overlaps too)."""
    out: list[Segment] = []
    for seg in sorted(segments, key=lambda s: (s.start_s, s.end_s)):
        if out and seg.start_s - out[-1].end_s < gap_s:
            last = out[-1]
            out[-1] = Segment(last.start_s, max(last.end_s, seg.end_s))
        else:
            out.append(seg)
    return tuple(out)


def at_16k(samples: Samples, rate_hz: int) -> Samples:
    """``samples`` at the detector's 16 kHz (resampled with soxr when another rate)."""
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, not {rate_hz}")
    x = np.asarray(samples, np.float32)
    if rate_hz == VAD_RATE_HZ:
        return x
    out: Samples = soxr.resample(x, rate_hz, VAD_RATE_HZ).astype(np.float32, copy=False)
    return out


def _detect(audio: Samples) -> list[Segment]:
    """webrtcvad's segments over the whole file (one chunk through a fresh Vad)."""
    vad = Vad(AGGRESSIVENESS, FRAME_MS, VAD_RATE_HZ, start_ms=START_MS, hangover_ms=HANGOVER_MS)
    stats = vad.process(audio)
    onsets, offsets = list(stats.onsets), list(stats.offsets)
    if stats.ends_in_speech:
        offsets.append(stats.frames * FRAME_MS / 1000)
    return [Segment(a, b) for a, b in zip(onsets, offsets, strict=True)]


def _frame_rms(audio: Samples) -> NDArray[np.float64]:
    n = VAD_RATE_HZ * FRAME_MS // 1000
    frames = len(audio) // n
    x = audio[: frames * n].astype(np.float64).reshape(frames, n)
    out: NDArray[np.float64] = np.sqrt(np.mean(x * x, axis=1))
    return out


def _noise_floor(rms: NDArray[np.float64]) -> float:
    return float(np.percentile(rms, NOISE_PERCENTILE)) if len(rms) else 0.0


def _refine(seg: Segment, rms: NDArray[np.float64], floor: float) -> Segment | None:
    """``seg`` narrowed to its first and last frame within EDGE_DB of its loudest one and
    above ``floor`` (RMS); None when no frame of it is above ``floor``."""
    frame_s = FRAME_MS / 1000
    a = round(seg.start_s / frame_s)
    b = min(round(seg.end_s / frame_s), len(rms))
    if b <= a:
        return None
    level = rms[a:b]
    threshold = max(float(level.max()) * 10 ** (-EDGE_DB / 20), floor)
    loud = np.flatnonzero(level >= threshold)
    if not len(loud):
        return None
    return Segment((a + int(loud[0])) * frame_s, (a + int(loud[-1]) + 1) * frame_s)
