"""Voice activity on espeak-ng speech, silence and noise, streamed in chunks."""

from __future__ import annotations

import numpy as np
import pytest
from support.babble import at_dbfs, babble, espeak

from venus.daemon.frontend.step import IdleGate
from venus.hw.vad import Vad, VadStats

RATE = 16000
TEXT = "Hello there. Could you turn on the kitchen lights, please?"
LEAD_S = 1.37  # silence before the speech: the onset falls inside the second chunk
NOISE_DBFS = -50.0  # a quiet room


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """espeak-ng speech as float32 at 16 kHz, trimmed to start at its first sound."""
    return espeak(TEXT)


def noise(seconds: float, dbfs: float = NOISE_DBFS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(seconds * RATE)) * 10 ** (dbfs / 20)).astype(np.float32)


def stream(vad: Vad, signal: np.ndarray, sizes: list[int]) -> list[tuple[float, VadStats]]:
    """Feed ``signal`` in chunks of ``sizes`` (cycled); (chunk start in s, stats) each."""
    out, pos, k = [], 0, 0
    while pos < len(signal):
        n = sizes[k % len(sizes)]
        out.append((pos / RATE, vad.process(signal[pos : pos + n])))
        pos, k = pos + n, k + 1
    return out


def onsets(results: list[tuple[float, VadStats]]) -> list[float]:
    return [t0 + t for t0, st in results for t in st.onsets]


def offsets(results: list[tuple[float, VadStats]]) -> list[float]:
    return [t0 + t for t0, st in results for t in st.offsets]


@pytest.mark.parametrize("frame_ms", [10, 20, 30])
@pytest.mark.parametrize("aggressiveness", [0, 1, 2, 3])
def test_speech_is_found_where_it_starts(
    speech: np.ndarray, frame_ms: int, aggressiveness: int
) -> None:
    signal = np.concatenate(
        [np.zeros(round(LEAD_S * RATE), np.float32), speech, np.zeros(RATE, np.float32)]
    )
    signal += noise(len(signal) / RATE)
    results = stream(Vad(aggressiveness, frame_ms), signal, [RATE])
    found = [t for t in onsets(results) if t > 0.2]  # not the noise, before it is learnt
    assert found, "no speech onset"
    # within 30 ms of the first sound; mode 3 (strict) waits for a louder frame
    assert abs(found[0] - LEAD_S) <= (0.030 if aggressiveness < 3 else 0.060)
    talk_s = len(speech) / RATE
    speech_s = sum(st.speech_s for _, st in results)
    assert 0.8 * talk_s <= speech_s <= talk_s + 0.3
    assert results[0][1].speech_ratio < 0.15  # webrtcvad learns the noise in ~0.1 s
    assert max(st.speech_ratio for _, st in results) > 0.9  # the middle chunk is all speech
    assert not results[-1][1].ends_in_speech
    assert offsets(results)[-1] == pytest.approx(LEAD_S + talk_s, abs=0.2)


def test_silence_and_noise_are_not_speech() -> None:
    silence = stream(Vad(2, 30), np.zeros(3 * RATE, np.float32), [RATE])
    assert [st.frames for _, st in silence] == [33, 33, 34]  # 100 frames of 30 ms in 3 s
    for _, st in silence:
        assert st.speech_ratio == 0.0 and st.onsets == () and st.speech_s == 0.0
    room = stream(Vad(2, 30), noise(4.0, seed=1), [RATE])
    assert room[0][1].speech_ratio < 0.15  # the first frames, before the noise is learnt
    assert all(st.speech_ratio == 0.0 for _, st in room[1:])


def test_a_voice_rises_above_babble_the_vad_takes_for_speech(speech: np.ndarray) -> None:
    """webrtcvad hears a room full of talk as speech; ``rise_db`` tells it from a voice
    near the microphone (15 dB over it), the harness's gate for the user speaking."""
    signal = babble(speech, 12.0, -35.0)
    voice = at_dbfs(speech, -20.0)
    signal[9 * RATE : 9 * RATE + len(voice)] += voice[: 3 * RATE]
    results = [st for _, st in stream(Vad(2, 30), signal, [RATE])]
    room, near = results[3:9], results[9:12]
    gate = IdleGate()
    assert all(st.speech_ratio >= gate.speech_ratio for st in room + near)  # all "speech"
    assert all(st.rise_db < gate.rise_db for st in room), [st.rise_db for st in room]
    assert all(st.rise_db >= gate.rise_db + 6 for st in near), [st.rise_db for st in near]
    quiet = stream(Vad(2, 30), np.zeros(RATE, np.float32), [RATE])
    assert quiet[0][1].rise_db == 0.0  # digital silence: no rise, no error


@pytest.mark.parametrize("sizes", [[RATE], [RATE // 4], [4801, 333, 12000, 7]])
def test_segments_continue_across_chunk_boundaries(speech: np.ndarray, sizes: list[int]) -> None:
    """The same stream cut differently gives the same segments (up to clamping at 0)."""
    signal = np.concatenate([np.zeros(RATE // 2, np.float32), speech, np.zeros(RATE, np.float32)])
    whole = Vad(2, 30).process(signal)
    results = stream(Vad(2, 30), signal, sizes)
    assert sum(st.frames for _, st in results) == whole.frames
    assert len(onsets(results)) == len(whole.onsets)  # no spurious onset at a boundary
    assert len(offsets(results)) == len(whole.offsets)
    np.testing.assert_allclose(onsets(results), whole.onsets, atol=0.031)
    total = sum(st.speech_s for _, st in results)
    assert total == pytest.approx(whole.speech_s, abs=0.2 * len(whole.onsets))


def test_speech_over_a_boundary_stays_one_segment(speech: np.ndarray) -> None:
    signal = np.concatenate([np.zeros(RATE // 2, np.float32), speech])
    vad = Vad(2, 30)
    first = vad.process(signal[: RATE // 2 + RATE // 4])  # cut 250 ms into the speech
    second = vad.process(signal[RATE // 2 + RATE // 4 : RATE + RATE // 4])
    assert first.ends_in_speech
    assert first.onsets == pytest.approx((0.5,), abs=0.03)
    assert all(t > 0.03 for t in second.onsets)  # no new onset where the chunk begins
    assert second.speech_s > 0.1


def test_longest_run_and_state(speech: np.ndarray) -> None:
    vad = Vad(2, 20)
    first = vad.process(np.concatenate([np.zeros(RATE // 2, np.float32), speech[: RATE // 2]]))
    assert first.ends_in_speech and vad.in_speech
    assert first.longest_speech_s == pytest.approx(0.5, abs=0.04)
    assert first.onsets[0] == pytest.approx(0.5, abs=0.03)
    vad.reset()
    assert not vad.in_speech
    after = vad.process(np.zeros(RATE, np.float32))
    assert after.offsets == () and after.speech_ratio == 0.0


def test_partial_frames_wait_for_the_next_chunk() -> None:
    vad = Vad(0, 30)
    assert vad.process(np.zeros(479, np.float32)).frames == 0
    assert vad.process(np.zeros(1, np.float32)).frames == 1  # 479 + 1 = one 30 ms frame
    assert vad.process(np.zeros(960, np.float32)).frames == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"aggressiveness": 4}, "aggressiveness"),
        ({"frame_ms": 25}, "frame_ms"),
        ({"sample_rate": 22050}, "sample_rate"),
        ({"hangover_ms": -1}, "hangover_ms"),
    ],
)
def test_bad_arguments(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Vad(**kwargs)


def test_stereo_chunk_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="mono"):
        Vad().process(np.zeros((160, 2), np.float32))
