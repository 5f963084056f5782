"""Speech synthesis with the real espeak-ng, flite and SVOX Pico: duration, rate, pitch, pauses,
determinism, the cache and the errors."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from venus.datagen import tts
from venus.datagen.acoustics import SAMPLE_RATE, level_db, onsets
from venus.datagen.tts import SynthesisCache, SynthesisError, Voice, render, synthesize

ESPEAK = Voice("espeak-ng", "en-us")
SLT = Voice("flite", "slt")
FLITE_VOICES = ("awb", "kal", "kal16", "rms", "slt")  # Debian's flite 2.2
PICO = Voice("pico", "en-US")
ONE_OF_EACH = [ESPEAK, Voice("espeak-ng", "en-gb+f3"), SLT, Voice("flite", "kal"), PICO]
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank"  # 13 words


def median_f0_hz(audio: np.ndarray[Any, Any]) -> float:
    """Median pitch of the voiced 40 ms frames, by autocorrelation (60-400 Hz)."""
    n = int(0.04 * SAMPLE_RATE)
    found = []
    for i in range(0, audio.size - n, n // 2):
        frame = audio[i : i + n].astype(np.float64)
        frame -= frame.mean()
        if np.sqrt(np.mean(frame**2)) < 0.02:
            continue
        ac = np.correlate(frame, frame, "full")[n - 1 :]
        lo, hi = SAMPLE_RATE // 400, SAMPLE_RATE // 60
        lag = lo + int(np.argmax(ac[lo:hi]))
        if ac[lag] > 0.5 * ac[0]:
            found.append(SAMPLE_RATE / lag)
    return float(np.median(found))


def name_of(voice: Voice) -> str:
    return f"{voice.engine}-{voice.name}"


@pytest.mark.parametrize(
    "voice",
    [ESPEAK, *(Voice("flite", v) for v in FLITE_VOICES), PICO, Voice("pico", "en-GB")],
    ids=name_of,
)
def test_speech_is_heard_and_lasts_as_long_as_its_words(voice: Voice) -> None:
    rate = 150
    utterance = render(SENTENCE, Voice(voice.engine, voice.name, rate_wpm=rate))
    assert utterance.audio.dtype == np.float32
    assert level_db(utterance.audio) > -35.0
    assert np.max(np.abs(utterance.audio)) <= 1.0
    expected_s = 13 / rate * 60  # 5.2 s
    assert 0.6 * expected_s < utterance.duration_s < 1.4 * expected_s
    assert [(s.text, s.start, s.end) for s in utterance.segments] == [
        (SENTENCE, 0, utterance.audio.size)
    ]


@pytest.mark.parametrize(
    "engine, name", [("espeak-ng", "en-gb"), ("flite", "awb"), ("pico", "en-GB")]
)
def test_faster_rates_speak_shorter(engine: tts.Engine, name: str) -> None:
    durations = [
        synthesize(SENTENCE, Voice(engine, name, rate_wpm=r)).size for r in (100, 160, 250)
    ]
    assert durations[0] > durations[1] > durations[2]
    assert durations[0] / durations[2] > 1.8  # 2.5x the rate: well under half as long


@pytest.mark.parametrize(
    "engine, name", [("espeak-ng", "en-us"), ("flite", "slt"), ("pico", "en-US")]
)
def test_higher_pitch_raises_f0(engine: tts.Engine, name: str) -> None:
    low = median_f0_hz(synthesize(SENTENCE, Voice(engine, name, pitch=20)))
    mid = median_f0_hz(synthesize(SENTENCE, Voice(engine, name, pitch=50)))
    high = median_f0_hz(synthesize(SENTENCE, Voice(engine, name, pitch=80)))
    assert low < mid < high
    assert high / low > 1.3


def spectral_centroid_hz(audio: np.ndarray[Any, Any]) -> float:
    """Where the power spectrum's mass lies: it moves with the formants."""
    power = np.abs(np.fft.rfft(audio * np.hanning(audio.size))) ** 2
    return float((power * np.fft.rfftfreq(audio.size, 1 / SAMPLE_RATE)).sum() / power.sum())


@pytest.mark.parametrize(
    "engine, name, rel",
    # Pico's own pitch setting colours its spectrum too (the centroid 21% lower at 60%, 15%
    # lower at 150%), so its scaled voices move by up to 10% more than the scale: measured
    # 0.77 at 0.85, 1.13 at 1.2
    [("espeak-ng", "en-us", 0.06), ("flite", "awb", 0.06), ("pico", "en-US", 0.12)],
)
def test_a_formant_scale_moves_the_spectrum_and_keeps_rate_and_pitch(
    engine: tts.Engine, name: str, rel: float
) -> None:
    said = {
        scale: synthesize(SENTENCE, Voice(engine, name, rate_wpm=160, pitch=40, formant=scale))
        for scale in (0.85, 1.0, 1.2)
    }
    own = said[1.0]
    assert said[1.0].tobytes() == synthesize(SENTENCE, Voice(engine, name, 160, 40)).tobytes()
    for scale, audio in said.items():
        centroid = spectral_centroid_hz(audio) / spectral_centroid_hz(own)
        assert centroid == pytest.approx(scale, rel=rel), scale  # the formants moved
        assert audio.size / own.size == pytest.approx(1.0, abs=0.05), scale  # as long
        assert median_f0_hz(audio) / median_f0_hz(own) == pytest.approx(1.0, abs=0.1), scale


@pytest.mark.parametrize("voice", ONE_OF_EACH, ids=name_of)
def test_pauses_have_the_asked_length(voice: Voice) -> None:
    text = "I would like um {pause:250} a coffee please {pause:500} with milk"
    utterance = render(text, voice)
    segments = utterance.segments
    assert [s.text for s in segments] == ["I would like um", "a coffee please", "with milk"]
    # exact in the offsets ...
    assert segments[1].start - segments[0].end == 250 * SAMPLE_RATE // 1000
    assert segments[2].start - segments[1].end == 500 * SAMPLE_RATE // 1000
    assert segments[0].start == 0 and segments[2].end == utterance.audio.size
    # ... and as the speech detector hears them
    regions = onsets(utterance.audio)
    assert len(regions) == 3
    gaps_ms = [(b.start - a.end) / SAMPLE_RATE * 1000 for a, b in itertools.pairwise(regions)]
    assert gaps_ms == pytest.approx([250, 500], abs=10)
    for region, segment in zip(regions, segments, strict=True):
        assert abs(region.start - segment.start) <= 10 * SAMPLE_RATE // 1000
        assert abs(region.end - segment.end) <= 10 * SAMPLE_RATE // 1000


def test_a_leading_pause_is_silence_before_the_speech() -> None:
    utterance = render("{pause:200} hello there", ESPEAK)
    assert not utterance.audio[:3200].any()
    assert utterance.segments[0].start == 3200
    assert onsets(utterance.audio)[0].start == pytest.approx(3200, abs=16)


@pytest.mark.parametrize("voice", ONE_OF_EACH, ids=name_of)
def test_same_text_and_voice_give_identical_audio(voice: Voice) -> None:
    text = "Uh, could you {pause:300} set an alarm for seven"
    first, second = render(text, voice), render(text, voice)
    assert first.audio.tobytes() == second.audio.tobytes()
    assert first.segments == second.segments


def test_gain_scales_the_samples() -> None:
    loud = synthesize("Turn it up", ESPEAK)
    quiet = synthesize("Turn it up", Voice("espeak-ng", "en-us", gain_db=-6.0))
    assert quiet.size == loud.size
    assert level_db(quiet) - level_db(loud) == pytest.approx(-6.0, abs=0.01)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_text_is_empty_audio(text: str) -> None:
    utterance = render(text, Voice("flite", "no-such-voice-either"))  # no voice needed
    assert utterance.audio.size == 0 and utterance.segments == ()


def test_only_a_pause_is_silence() -> None:
    assert render("{pause:100}", ESPEAK).audio.tolist() == [0.0] * 1600


def test_an_unknown_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"\{laugh\}"):
        render("ha {laugh} ha", ESPEAK)


@pytest.mark.parametrize(
    "voice, listed",
    [
        (Voice("flite", "nosuch"), "slt"),  # flite itself would fall back to kal silently
        (Voice("espeak-ng", "en-zz"), "en-us"),
        (Voice("espeak-ng", "en-us+nosuch"), "f3"),  # espeak-ng would ignore the variant
    ],
)
def test_an_unknown_voice_lists_the_installed_ones(voice: Voice, listed: str) -> None:
    with pytest.raises(SynthesisError, match="installed: .*" + listed):
        synthesize("hello", voice)


def test_a_missing_engine_names_its_debian_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run there
    tts.voices.cache_clear()
    try:
        with pytest.raises(SynthesisError, match="apt-get install espeak-ng"):
            synthesize("hello", ESPEAK)
    finally:
        tts.voices.cache_clear()


@pytest.mark.parametrize(
    "fields",
    [
        {"engine": "festival", "name": "x"},
        {"engine": "flite", "name": "slt", "pitch": 100},
        {"engine": "flite", "name": "slt", "rate_wpm": 40},
        {"engine": "flite", "name": "slt", "gain_db": float("nan")},
        {"engine": "flite", "name": "slt", "formant": 1.5},
        {"engine": "flite", "name": "slt", "formant": float("nan")},
    ],
)
def test_voice_fields_are_checked(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Voice(**fields)


def test_pico_without_its_package_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tts.importlib.util.find_spec
    monkeypatch.setattr(
        tts.importlib.util, "find_spec", lambda name: None if name == "ttspico" else real(name)
    )
    with pytest.raises(SynthesisError, match=r"realtime-venus\[voices\]"):
        synthesize("Hello there", Voice("pico", "en-GB", rate_wpm=151))  # not in any cache


def test_voices_lists_what_is_installed() -> None:
    assert {"en-us", "en-gb"} <= set(tts.voices("espeak-ng"))
    assert not any(v.startswith("mb-") for v in tts.voices("espeak-ng"))  # need mbrola
    assert tts.voices("flite") == FLITE_VOICES
    assert tts.voices("pico") == ("en-GB", "en-US")
    assert {"f3", "m3"} <= set(tts.espeak_variants())


@pytest.mark.parametrize("voice", [ESPEAK, SLT, PICO], ids=name_of)
def test_the_cache_replays_engine_output(
    voice: Voice, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = SynthesisCache(tmp_path)
    first = render("Cancel that {pause:200} please", voice, cache=cache)
    other = render("Something else", voice, cache=cache)
    assert len(list(tmp_path.rglob("*.wav"))) == 3  # one entry per segment

    def no_engine(*args: object, **kwargs: object) -> None:
        raise AssertionError("the engine ran although the cache had its output")

    tts.engine_version(voice.engine)  # cached per process
    monkeypatch.setattr(subprocess, "run", no_engine)
    again = render("Cancel that {pause:200} please", voice, cache=cache)
    assert again.audio.tobytes() == first.audio.tobytes()
    assert render("Something else", voice, cache=cache).audio.tobytes() == other.audio.tobytes()
