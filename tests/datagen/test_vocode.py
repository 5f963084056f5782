"""speech.vocoded_p: a person's speech made again by the LPC vocoder (datagen/vocode.py),
with the real engines and Praat."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from venus.datagen.acoustics import SAMPLE_RATE
from venus.datagen.config import preset
from venus.datagen.planner import plan_sample
from venus.datagen.realize import PEOPLE, realize, vocoded_people
from venus.datagen.tts import Voice, synthesize
from venus.datagen.vocode import vocode

SENTENCE = "Set a timer for fifteen seconds for the eggs, and add apples to the list."
SMOKE = preset("smoke")
BANDS_HZ = ((0, 1000), (1000, 2000), (2000, 4000), (4000, 8000))


def band_levels_db(audio: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Level in each of ``BANDS_HZ`` per 20 ms frame: [frames, bands]."""
    n = 320
    frames = audio[: audio.size // n * n].reshape(-1, n) * np.hanning(n)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    hz = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    bands = [power[:, (hz >= lo) & (hz < hi)].sum(axis=1) for lo, hi in BANDS_HZ]
    return 10 * np.log10(np.stack(bands, axis=1) + 1e-10)


def median_f0_hz(audio: np.ndarray[Any, Any]) -> float:
    import parselmouth

    pitch = parselmouth.Sound(audio.astype(np.float64), SAMPLE_RATE).to_pitch_ac()
    hz = pitch.selected_array["frequency"]
    return float(np.median(hz[hz > 0]))


@pytest.mark.parametrize("engine, name", [("espeak-ng", "en-us"), ("flite", "awb")])
def test_vocoded_speech_is_made_again_with_the_voices_timing_pitch_and_envelope(
    engine: str, name: str
) -> None:
    own = synthesize(SENTENCE, Voice(engine, name, 160, 40))  # type: ignore[arg-type]
    made = synthesize(SENTENCE, Voice(engine, name, 160, 40, vocoded=True))  # type: ignore[arg-type]
    assert made.size == pytest.approx(own.size, rel=0.02)  # the words stay in time
    n = min(own.size, made.size)
    # not the engine's samples: a new source through the voice's filter
    corr = np.dot(own[:n], made[:n]) / (np.linalg.norm(own[:n]) * np.linalg.norm(made[:n]))
    assert abs(corr) < 0.5
    # the same pitch, level, and spectral envelope frame by frame (where the words are)
    assert median_f0_hz(made) / median_f0_hz(own) == pytest.approx(1.0, abs=0.08)
    level = 20 * np.log10(np.sqrt(np.mean(made**2)) / np.sqrt(np.mean(own**2)))
    assert abs(level) < 1.5
    a, b = band_levels_db(own[:n]), band_levels_db(made[:n])
    speech = a.max(axis=1) > a.max() - 40
    late = np.roll(a, 10, axis=0)  # the same speech 200 ms late: what unrelated frames give
    for band in range(len(BANDS_HZ)):
        r = np.corrcoef(a[speech, band], b[speech, band])[0, 1]
        off = np.corrcoef(a[speech, band], late[speech, band])[0, 1]
        assert r > 0.5 and off < 0.3, (BANDS_HZ[band], r, off)  # measured: 0.57-0.95, < 0.15
    # the same words in the same voice come out the same
    again = synthesize(SENTENCE, Voice(engine, name, 160, 40, vocoded=True))  # type: ignore[arg-type]
    assert again.tobytes() == made.tobytes()


def test_the_noise_is_seeded_by_its_key() -> None:
    own = synthesize(SENTENCE, Voice("espeak-ng", "en-us", 160, 40))
    assert vocode(own, "a").tobytes() == vocode(own, "a").tobytes()
    assert vocode(own, "a").tobytes() != vocode(own, "b").tobytes()
    assert vocode(own[:100], "a").tobytes() == own[:100].tobytes()  # too short to analyse


def test_no_draw_leaves_the_plan_as_it_is() -> None:
    plan = plan_sample(SMOKE, 0, 1)
    assert vocoded_people(plan, 0.0) is plan
    assert not any(t.voice.vocoded for t in plan.turns)


def test_people_are_vocoded_never_the_assistant_and_nothing_else_changes() -> None:
    drawn = [plan_sample(SMOKE, i, 1) for i in range(12)]
    for plan in drawn:
        every = vocoded_people(plan, 1.0)
        for t, v in zip(plan.turns, every.turns, strict=True):
            assert v.voice.vocoded == (t.speaker in PEOPLE)
            assert replace(v, voice=t.voice) == t  # only the flag
        assert vocoded_people(plan, 0.5) == vocoded_people(plan, 0.5)  # its own stream
    users = [
        any(t.voice.vocoded for t in vocoded_people(p, 0.5).turns if t.speaker == "user")
        for p in drawn
    ]
    assert any(users) and not all(users)  # drawn per sample


def test_a_set_with_vocoded_people_has_the_same_dialogue() -> None:
    vocoded = replace(SMOKE, speech=replace(SMOKE.speech, vocoded_p=1.0))
    plain, made = realize(SMOKE, 0, 1), realize(vocoded, 0, 1)
    assert [t.text for t in made.plan.turns] == [t.text for t in plain.plan.turns]
    assert any(t.voice.vocoded for t in made.plan.turns)
    assert made.assistant.size == made.input.size
    assert made.input.tobytes() != plain.input.tobytes()
