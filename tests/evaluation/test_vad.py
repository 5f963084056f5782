"""Speech segments of whole files: edges, gap merging, blips, sample rates."""

from __future__ import annotations

import numpy as np
import pytest
import soxr  # type: ignore[import-untyped, unused-ignore]

from venus.evaluation.vad import (
    MODEL_MERGE_GAP_S,
    USER_MERGE_GAP_S,
    Segment,
    merge_gaps,
    model_segments,
    speech_segments,
    user_segments,
)

TOL_S = 0.04  # what the metrics' tests allow the VAD


def _close(seg: Segment, start_s: float, end_s: float) -> bool:
    return abs(seg.start_s - start_s) <= TOL_S and abs(seg.end_s - end_s) <= TOL_S


def test_onsets_and_hard_cuts_land_within_tolerance(speech, fdb) -> None:
    # the model speaks from 0.7 s and is cut at 3.0 s; a reply from 4.5 s to its end
    said = fdb.place(9.0, (0.7, speech.answer, 2.3), (4.5, speech.reply, None))
    segs = model_segments(said, 16000)
    assert len(segs) == 2, segs
    assert _close(segs[0], 0.7, 3.0), segs
    assert _close(segs[1], 4.5, 4.5 + speech.seconds("reply")), segs


@pytest.mark.parametrize("cut_s", [1.13, 2.0, 2.71, 3.36, 4.05])
def test_cut_anywhere_in_a_sentence(speech, fdb, cut_s: float) -> None:
    said = fdb.place(7.0, (0.5, speech.answer, cut_s))
    (seg,) = model_segments(said, 16000)
    assert _close(seg, 0.5, 0.5 + cut_s), seg


def test_a_short_gap_merges_and_a_long_one_does_not(speech, fdb) -> None:
    q = speech.seconds("question")
    short = fdb.place(8.0, (0.5, speech.question, None), (0.5 + q + 0.4, speech.question, None))
    long = fdb.place(8.0, (0.5, speech.question, None), (0.5 + q + 0.8, speech.question, None))
    assert len(model_segments(short, 16000)) == 1
    assert len(user_segments(short, 16000)) == 1
    assert len(model_segments(long, 16000)) == 2
    assert len(user_segments(long, 16000)) == 2


def test_user_and_model_merge_gaps_differ(speech, fdb) -> None:
    q = speech.seconds("question")
    gap = (MODEL_MERGE_GAP_S + USER_MERGE_GAP_S) / 2  # 0.55 s
    x = fdb.place(8.0, (0.5, speech.question, None), (0.5 + q + gap, speech.question, None))
    assert len(user_segments(x, 16000)) == 1  # < 0.6 s: one user turn
    assert len(model_segments(x, 16000)) == 2  # >= 0.5 s: the model stopped


def test_silence_and_short_blips_give_no_speech(fdb) -> None:
    rng = np.random.default_rng(1)
    assert model_segments(np.zeros(32000, np.float32), 16000) == ()
    blip = np.zeros(48000, np.float32)
    blip[16000:17600] = 0.3 * rng.standard_normal(1600).astype(np.float32)  # 0.1 s
    assert model_segments(blip, 16000) == ()
    assert model_segments(np.zeros(0, np.float32), 16000) == ()


@pytest.mark.parametrize("rate", [8000, 24000, 44100, 48000])
def test_other_sample_rates_are_resampled(speech, fdb, rate: int) -> None:
    said = fdb.place(6.0, (1.0, speech.question, None))
    expected = model_segments(said, 16000)
    other = soxr.resample(said, 16000, rate).astype(np.float32)
    got = model_segments(other, rate)
    assert len(got) == len(expected) == 1
    assert _close(got[0], expected[0].start_s, expected[0].end_s)


def test_merge_gaps_is_strict_sorted_and_absorbs_overlaps() -> None:
    segs = [Segment(3.0, 4.0), Segment(0.0, 1.0), Segment(1.4, 2.0), Segment(3.5, 3.8)]
    assert merge_gaps(segs, 0.5) == (Segment(0.0, 2.0), Segment(3.0, 4.0))
    assert merge_gaps([Segment(0.0, 1.0), Segment(1.5, 2.0)], 0.5) == (
        Segment(0.0, 1.0),
        Segment(1.5, 2.0),
    )  # a gap of exactly the threshold stays
    assert merge_gaps([], 0.5) == ()


def test_bad_input_is_refused() -> None:
    x = np.zeros(16000, np.float32)
    with pytest.raises(ValueError, match="mono"):
        speech_segments(np.zeros((2, 100), np.float32), 16000, 0.5)
    with pytest.raises(ValueError, match="positive"):
        speech_segments(x, 0, 0.5)
    with pytest.raises(ValueError, match="before it starts"):
        Segment(2.0, 1.0)
