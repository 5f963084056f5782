"""Rendered turns placed on the sample's timeline at sample precision, and what is
measured on the tracks (``venus.datagen.realize`` runs it on a retimed plan).

    realization = place(plan, utterances, babble_talkers)

Turn ``i`` starts at sample ``round(start_s * 16000)``.

- *input* (what the model hears; never the assistant, whose echo the daemon cancels):
  near turns (user, other) in the room (``rt60_s``, None: dry; direct-to-reverberant
  ``NEAR_DRR_DB``), far turns (background) through ``acoustics.distant`` (``far_gain_db``
  below their own level, ``far_rt60_s``), noise at ``snr_db`` against the dry near speech
  (babble from the talkers given), then the level changes over the whole input
  (``level_curve``).
- *clean_input*: the same without the overlap events' speech (the Full-Duplex-Bench v1.5
  control), noise and room kept. It is summed first and the events added on top, so the
  two are bit-identical wherever no event is heard.
- *assistant*: the target voice alone, dry, cut at ``cut_at_s`` (5 ms fade).

Both input mixes are scaled by one gain to a ``PEAK_DBFS`` peak (so their difference is
the events' speech), the assistant by its own; the gains are kept.

**Measurement.** Each turn's start and end are measured with ``acoustics.onsets`` on its
own dry track (the assistant's as cut); a start more than ``ONSET_TOLERANCE_S`` from the
plan's is a ``RealizationError``. An overlap event's window is where what it adds to the
input (room, level changes and gain included, so a reverberant tail is inside it;
exactly ``input - clean_input``) has a 10 ms level above ``HEARD_DBFS`` (``heard_span``).
An assistant turn's words are timed within each synthesized segment in proportion to
the characters before them.

Randomness (noise, rooms) comes from generators seeded with ``(seed, index, attempt,
stream)`` (``sample_rng``): the same plan gives the same samples.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from venus.datagen import acoustics as ac
from venus.datagen import tts
from venus.datagen.plan import Acoustics, Plan, Turn
from venus.errors import DatagenError

log = logging.getLogger(__name__)
Track = NDArray[np.float64]  # a track being mixed, at full precision

SAMPLE_RATE = ac.SAMPLE_RATE  # 16 kHz: the input's rate (docs/timeline.md)
ONSET_TOLERANCE_S = 0.05  # a measured turn start may differ this much from the plan's
PEAK_DBFS = -1.0  # the written mixes' peak: PCM16 never clips
NEAR_DRR_DB = 10.0  # direct-to-reverberant ratio of a near talker in the room
LEVEL_RAMP_S = 0.05  # a level change ramps (in dB) over this
HEARD_DBFS = -60.0  # an event is heard where its 10 ms level in the written input is above
CUT_FADE_SAMPLES = 80  # 5 ms at 16 kHz: the assistant's speech fades out at a cut
NOISE_STREAM, ROOM_STREAM, FAR_STREAM, BABBLE_STREAM = range(4)  # sample_rng streams
_FRAME, _HOP = SAMPLE_RATE // 100, SAMPLE_RATE // 1000  # 10 ms frames on a 1 ms hop
_HEARD_POWER = 10 ** (HEARD_DBFS / 10)
_MARGIN = np.zeros(SAMPLE_RATE // 4, np.float32)  # 0.25 s of silence around a measured turn


class RealizationError(DatagenError):
    """A plan could not be realized: no attempt held, or the audio disagrees with it."""


@dataclass(frozen=True)
class Word:
    """An assistant word and when it starts being heard (seconds, the sample's clock)."""

    text: str
    start_s: float


@dataclass(frozen=True)
class MeasuredTurn:
    """Where a turn's speech starts and ends, measured on its own track (seconds)."""

    start_s: float
    end_s: float


@dataclass(frozen=True, eq=False)
class Realization:
    """A realized sample: the retimed ``plan``, the 16 kHz float32 tracks (peaks at
    ``PEAK_DBFS``; ``input_gain_db`` applied to both input mixes, ``assistant_gain_db`` to
    the assistant), per turn its measured extent and (assistant turns) the words heard
    before any cut, per overlap event its measured window ``(start_s, end_s)``."""

    plan: Plan
    input: ac.Audio
    clean_input: ac.Audio
    assistant: ac.Audio
    input_gain_db: float
    assistant_gain_db: float
    turns: tuple[MeasuredTurn, ...]
    words: tuple[tuple[Word, ...], ...]
    windows_s: tuple[tuple[float, float], ...]

    @property
    def max_onset_error_ms(self) -> float:
        """The largest distance between a planned and a measured turn start."""
        pairs = zip(self.turns, self.plan.turns, strict=True)
        return max(abs(m.start_s - t.start_s) * 1000 for m, t in pairs)


def sample_rng(plan: Plan, stream: int) -> np.random.Generator:
    """The generator of ``stream`` for ``plan``'s sample (and attempt)."""
    return np.random.default_rng(
        np.random.SeedSequence([plan.seed, plan.index, plan.attempt, stream])
    )


def place(
    plan: Plan, utterances: Sequence[tts.Utterance], talkers: Sequence[ac.Audio]
) -> Realization:
    """Retimed ``plan``'s turns (``utterances``, one per turn) on the timeline, with the
    noise (``talkers``: babble's voices) and the measurements (see the module doc)."""
    n = round(plan.duration_s * SAMPLE_RATE)
    a = plan.acoustics
    room, far = sample_rng(plan, ROOM_STREAM), sample_rng(plan, FAR_STREAM)
    rir = None if a.rt60_s is None else ac.room_impulse_response(a.rt60_s, room, drr_db=NEAR_DRR_DB)
    curve = level_curve(a, n)
    event_of = {e.turn: k for k, e in enumerate(plan.events)}
    near, kept, assistant = np.zeros(n), np.zeros(n), np.zeros(n)
    heard: dict[int, tuple[int, ac.Audio]] = {}  # event index -> (offset, wet speech)
    measured: list[MeasuredTurn] = []
    words: list[tuple[Word, ...]] = []
    for i, (turn, utterance) in enumerate(zip(plan.turns, utterances, strict=True)):
        at = round(turn.start_s * SAMPLE_RATE)
        dry = utterance.audio
        words.append(())
        if turn.speaker == "assistant":
            if turn.cut_at_s is not None:
                dry = _cut(dry, round(turn.cut_at_s * SAMPLE_RATE) - at)
            _add(assistant, dry, at)
            words[-1] = _words(turn, utterance)
        else:
            if turn.distance == "far":
                wet = ac.distant(dry, far, attenuation_db=-a.far_gain_db, rt60_s=a.far_rt60_s)
            else:
                _add(near, dry, at)
                wet = dry if rir is None else ac.reverberate(dry, rir)
            if i in event_of:
                heard[event_of[i]] = (at, wet)
            else:
                _add(kept, wet, at)
        measured.append(_measure(dry, at, i, turn))
    kept += _noise(a, near, talkers, sample_rng(plan, NOISE_STREAM))
    events = np.zeros(n)
    for at, wet in heard.values():
        _add(events, wet, at)
    clean = kept * curve
    full = (kept + events) * curve  # == clean bit for bit where no event is heard
    peak = max(float(np.max(np.abs(full))), float(np.max(np.abs(clean))), 1e-9)
    gain_db = PEAK_DBFS - 20 * math.log10(peak)
    gain = 10 ** (gain_db / 20)
    spoken = ac.normalize_peak(assistant, PEAK_DBFS)
    windows = tuple(_window(heard[k], curve * gain, plan, k) for k in range(len(plan.events)))
    realization = Realization(
        plan,
        (full * gain).astype(np.float32),
        (clean * gain).astype(np.float32),
        spoken.audio,
        gain_db,
        spoken.gain_db,
        tuple(measured),
        tuple(words),
        windows,
    )
    log.debug("%s: max onset error %.1f ms", plan.sample_id, realization.max_onset_error_ms)
    return realization


def _add(track: Track, audio: NDArray[np.floating], at: int) -> None:
    piece = audio[: max(0, track.size - at)]
    track[at : at + piece.size] += piece


def _cut(audio: ac.Audio, length: int) -> ac.Audio:
    """``audio`` up to ``length`` samples, faded out over the last ``CUT_FADE_SAMPLES``."""
    out = audio[: max(0, length)].astype(np.float64)
    fade = min(CUT_FADE_SAMPLES, out.size)
    if fade:
        out[-fade:] *= np.linspace(1.0, 0.0, fade, endpoint=False)
    return out.astype(np.float32)


def level_curve(acoustics: Acoustics, n: int) -> Track:
    """The input's gain per sample (linear): each change ramps over ``LEVEL_RAMP_S``
    from the level before it to its ``gain_db`` (relative to the start's level)."""
    gain_db = np.zeros(n)
    before = 0.0
    ramp = round(LEVEL_RAMP_S * SAMPLE_RATE)
    for change in acoustics.level_changes:
        at = min(n, round(change.at_s * SAMPLE_RATE))
        steps = np.linspace(before, change.gain_db, ramp, endpoint=False)[: n - at]
        gain_db[at : at + steps.size] = steps
        gain_db[at + steps.size :] = change.gain_db
        before = change.gain_db
    curve: Track = 10 ** (gain_db / 20)
    return curve


def _noise(
    a: Acoustics,
    near: Track,
    talkers: Sequence[ac.Audio],
    rng: np.random.Generator,
) -> Track:
    """The noise at ``snr_db`` against the dry near speech (zeros for ``none``)."""
    if a.noise == "none":
        return np.zeros(near.size)
    if a.noise == "babble":
        noise = ac.babble(near.size, rng, talkers)
    else:
        make = {"white": ac.white_noise, "pink": ac.pink_noise, "brown": ac.brown_noise}
        noise = make[a.noise](near.size, rng)
    speech_db = ac.active_level_db(near)
    if speech_db <= ac.SILENCE_DB:
        return np.zeros(near.size)
    return noise.astype(np.float64) * 10 ** ((speech_db - a.snr_db - ac.level_db(noise)) / 20)


# --- measurement ----------------------------------------------------------------------------
def _measure(dry: ac.Audio, at: int, i: int, turn: Turn) -> MeasuredTurn:
    """The turn's speech on its own track: silence around it, as on the timeline (so the
    detector's floor is silence, not the quietest part of a short word)."""
    regions = ac.onsets(np.concatenate([_MARGIN, dry, _MARGIN]))
    if not regions:
        raise RealizationError(f"turn {i} ({turn.text!r}): no speech detected in its audio")
    at -= _MARGIN.size
    start_s, end_s = (at + regions[0].start) / SAMPLE_RATE, (at + regions[-1].end) / SAMPLE_RATE
    if abs(start_s - turn.start_s) > ONSET_TOLERANCE_S:
        raise RealizationError(
            f"turn {i} ({turn.text!r}) is heard from {start_s:.3f} s, the plan says "
            f"{turn.start_s:.3f} s: more than {ONSET_TOLERANCE_S * 1000:.0f} ms apart"
        )
    return MeasuredTurn(start_s, end_s)


def _window(
    heard: tuple[int, ac.Audio],
    scale: Track,
    plan: Plan,
    k: int,
) -> tuple[float, float]:
    """Where event ``k`` is heard in the input: its speech as the input carries it
    (room, level changes and the mix's gain: ``scale``) has a 10 ms level above
    ``HEARD_DBFS`` from the first such frame's centre to the last one's."""
    at, wet = heard
    track = np.zeros(scale.size)
    _add(track, wet, at)
    span = heard_span(track * scale)
    if span is None:
        turn = plan.turns[plan.events[k].turn]
        raise RealizationError(f"event {k} ({turn.text!r}): not heard in the input")
    return span[0] / SAMPLE_RATE, span[1] / SAMPLE_RATE


def heard_span(signal: NDArray[np.floating]) -> tuple[int, int] | None:
    """The samples from the first to the last 10 ms frame (1 ms hop, at its centre) whose
    level is above ``HEARD_DBFS``; None when no frame is."""
    x = np.asarray(signal, np.float64)
    if x.size < _FRAME:
        return None
    energy = np.concatenate([[0.0], np.cumsum(x * x)])
    starts = np.arange(0, x.size - _FRAME + 1, _HOP)
    loud = np.flatnonzero((energy[starts + _FRAME] - energy[starts]) / _FRAME > _HEARD_POWER)
    if loud.size == 0:
        return None
    return int(starts[loud[0]]) + _FRAME // 2, int(starts[loud[-1]]) + _FRAME // 2


def _words(turn: Turn, utterance: tts.Utterance) -> tuple[Word, ...]:
    """The words of an assistant turn and when each starts: within a synthesized segment,
    in proportion to the characters before it; words from the cut on are not heard."""
    out: list[Word] = []
    for segment in utterance.segments:
        length = max(1, len(segment.text))
        span = segment.end - segment.start
        at = 0
        for word in segment.text.split(" "):
            offset = segment.start + span * at / length
            start_s = turn.start_s + offset / SAMPLE_RATE
            if turn.cut_at_s is None or start_s < turn.cut_at_s:
                out.append(Word(word, start_s))
            at += len(word) + 1
    return tuple(out)
