"""The optional offline ASR (PocketSphinx, its shipped model) and `venus eval asr`: known
sentences from a real synthesiser, known timelines, hand-built overlap samples."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from venus.daemon.frontend.timeline import ChunkRecord, TimelineWriter
from venus.datagen.tts import Voice, synthesize
from venus.errors import EvaluationError
from venus.evaluation.asr import (
    PocketSphinx,
    WordErrors,
    normalise_text,
    spell_numbers,
    word_errors,
)
from venus.evaluation.asr_run import reference_text, transcribe_outputs

RATE = 16000
VOICE = Voice("flite", "rms")  # PocketSphinx hears flite's voices best (module doc)
SENTENCE = "what time is it in tokyo"


@pytest.fixture(scope="module")
def recognizer() -> PocketSphinx:
    return PocketSphinx()


@pytest.fixture(scope="module")
def sentence() -> np.ndarray:
    return 0.5 * synthesize(SENTENCE, VOICE)


def test_word_errors_count_edits_on_normalised_text() -> None:
    assert word_errors("the cat sat", "the bat sat down") == WordErrors(3, 1, 0, 1)
    assert word_errors("Sure, it's SUNNY!", "sure its sunny") == WordErrors(3, 1, 0, 0)
    assert word_errors("", "hello there").wer is None
    assert word_errors("two words", "") == WordErrors(2, 0, 2, 0)
    assert (WordErrors(3, 1, 0, 1) + WordErrors(2, 0, 2, 0)).wer == pytest.approx(4 / 5)
    assert normalise_text("It's 20°C -- in Tokyo?") == "it's 20 c in tokyo"


def test_numbers_are_spelled_as_the_synthesizer_says_them() -> None:
    assert spell_numbers("A day has 1440 minutes.") == (
        "A day has one thousand four hundred forty minutes."
    )
    assert spell_numbers("20 minus 36 is -16, about 0.50 or 20,000") == (
        "twenty minus thirty six is minus sixteen, about zero point five zero or twenty thousand"
    )
    assert spell_numbers("mp3, the 3rd, v1.5 and 92-3") == "mp3, the 3rd, v1.5 and ninety two-three"
    # a heard number in words matches the written one; before, "1440" was five errors
    heard = "a day has one thousand four hundred forty minutes"
    assert word_errors("A day has 1440 minutes.", heard) == WordErrors(9, 0, 0, 0)
    assert word_errors("It is -3 degrees.", "it is three degrees") == WordErrors(5, 0, 1, 0)


@pytest.mark.parametrize("text", ["set a timer for 1440 seconds", "it will be around -3 degrees"])
def test_spoken_numbers_are_heard_right(recognizer: PocketSphinx, text: str) -> None:
    """flite reads the digits; PocketSphinx, whose dictionary has no digits, writes words;
    the numbers' words count as heard (kal16: the assistant's voice in the data)."""
    heard = recognizer.transcribe(0.5 * synthesize(text, Voice("flite", "kal16")), RATE).text
    spoken = normalise_text(spell_numbers(text)).split()
    number_words = [w for w in spoken if w not in text.split()]
    assert number_words and all(w in heard.split() for w in number_words), heard
    assert word_errors(text, heard).wer <= 2 / len(spoken), heard


def test_a_clear_sentence_is_heard_at_its_place(recognizer: PocketSphinx, sentence) -> None:
    audio = np.zeros(5 * RATE, np.float32)
    audio[2 * RATE : 2 * RATE + len(sentence)] = sentence
    heard = recognizer.transcribe(audio, RATE)
    assert word_errors(SENTENCE, heard.text).wer <= 1 / 6, heard.text
    assert abs(heard.words[0].start_s - 2.0) < 0.3
    assert heard.words[-1].end_s <= 2.0 + len(sentence) / RATE + 0.3
    pairs = zip(heard.words, heard.words[1:], strict=False)
    assert all(a.end_s <= b.start_s + 1e-9 for a, b in pairs)
    # at 24 kHz (resampled), the same words
    import soxr  # type: ignore[import-untyped, unused-ignore]

    at_24k = soxr.resample(audio, RATE, 24000).astype(np.float32)
    assert recognizer.transcribe(at_24k, 24000).text == heard.text


def test_silence_hears_nothing_and_segments_bound_the_words(
    recognizer: PocketSphinx, sentence
) -> None:
    """PocketSphinx hears "i'm" in digital silence: by default only the VAD's speech is
    decoded; given segments, only those (padded by PAD_S)."""
    from venus.evaluation.asr import PAD_S
    from venus.evaluation.vad import Segment

    assert recognizer.transcribe(np.zeros(3 * RATE, np.float32), RATE).words == ()
    audio = np.zeros(6 * RATE, np.float32)
    audio[RATE : RATE + len(sentence)] = sentence
    half = Segment(1.0, 1.0 + len(sentence) / RATE / 2)
    words = recognizer.transcribe(audio, RATE, [half]).words
    whole = recognizer.transcribe(audio, RATE).words
    assert 0 < len(words) < len(whole)
    assert all(half.start_s - PAD_S <= w.start_s and w.end_s <= half.end_s + PAD_S for w in words)


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)
    with pytest.raises(EvaluationError, match=r"venus\[asr\]"):
        PocketSphinx()


def record(index: int, text: str, reply: int | None, cut: bool = False) -> ChunkRecord:
    return ChunkRecord(
        index=index, start_s=float(index), decision="speak" if reply is not None else "listen",
        text=text, text_tokens=0, speech_tokens=0, reply_id=reply, reply_ended=False,
        delegations=(), results=(), context_tokens=0, evicted_tokens=0, vision=False,
        speech_ratio=0.0, playback_stopped=cut, latency_ms={"total": 1.0},
        deadline_missed=False, degraded=(),
    )  # fmt: skip


def write_timeline(path: Path, records: list[ChunkRecord]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with TimelineWriter(path) as writer:
        for r in records:
            writer.write(r)
    return path


def test_the_reference_is_the_replies_spoken_to_their_end(tmp_path: Path) -> None:
    records = [
        record(0, "", None),
        record(1, "what time", 1),
        record(2, "is it", 1),
        record(3, "never mind", 2),
        record(4, "this was cut", 2, cut=True),
        record(5, "in tokyo", 3),
    ]
    assert reference_text(write_timeline(tmp_path / "t.jsonl", records)) == (
        "what time is it in tokyo"
    )
    assert reference_text(write_timeline(tmp_path / "q.jsonl", records[:1])) is None
    (tmp_path / "bad.jsonl").write_text('{"index": 0}\n')
    with pytest.raises(EvaluationError, match=r"bad.jsonl, line 1"):
        reference_text(tmp_path / "bad.jsonl")


def test_outputs_are_scored_against_their_timelines_and_overlaps(
    fdb, speech, recognizer: PocketSphinx, sentence, tmp_path: Path, capsys
) -> None:
    """Two interruption samples: the system says SENTENCE from 0.5 s; the user cuts in at
    1.2 s. One system stops at 1.6 s (the words after are not said); the other carries on.
    Their timelines say what the daemon meant: the same sentence, or something else."""
    from venus.cli import main

    said_len = len(sentence) / RATE
    assert said_len > 1.6
    heard = fdb.place(6.0, (1.2, speech.question, None))
    window = [1.2, 1.2 + speech.seconds("question")]
    stops = fdb.place(6.0, (0.5, sentence, 1.1))
    talks = fdb.place(6.0, (0.5, sentence, None))
    fdb.sample("user_interruption", "stops", heard, stops, window)
    fdb.sample("user_interruption", "talks", heard, talks, window)
    write_timeline(fdb.outputs / "user_interruption" / "talks" / "timeline.jsonl",
                   [record(0, SENTENCE, 1)])  # fmt: skip
    write_timeline(fdb.outputs / "user_interruption" / "stops" / "timeline.jsonl",
                   [record(0, "the weather will be sunny", 1)])  # fmt: skip

    report = transcribe_outputs(fdb.outputs, recognizer, fdb.data)
    by = {s.name: s for s in report.samples}
    talks_, stops_ = by["user_interruption/talks"], by["user_interruption/stops"]
    assert talks_.errors is not None and talks_.errors.wer is not None
    assert talks_.errors.wer <= 1 / 6 < 0.6 <= stops_.errors.wer  # type: ignore[union-attr]
    assert talks_.words_in_overlap is not None and stops_.words_in_overlap is not None
    assert talks_.words_in_overlap > stops_.words_in_overlap
    assert talks_.window is not None and talks_.scenario == "interruption"

    out = tmp_path / "asr"
    assert main(["eval", "asr", "--outputs", str(fdb.outputs), "--data", str(fdb.data),
                 "--out", str(out)]) == 0  # fmt: skip
    doc = json.loads((out / "asr.json").read_text())
    assert doc["recognizer"].startswith("pocketsphinx") and len(doc["samples"]) == 2
    assert doc["pooled"]["reference_words"] == 6 + 5
    (scenario,) = doc["scenarios"]
    assert scenario["scenario"] == "interruption" and scenario["spoke_in_overlap_rate"] > 0
    md = (out / "asr.md").read_text()
    assert "## Intelligibility" in md and "## Words in the overlap window" in md
    assert "2 outputs, 2 with words heard" in capsys.readouterr().out


def test_bad_inputs_are_named(fdb, tmp_path: Path, capsys) -> None:
    from venus.cli import main

    base = ["eval", "asr", "--out", str(tmp_path / "out")]
    assert main([*base, "--outputs", str(tmp_path / "nowhere")]) == 1
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([*base, "--outputs", str(tmp_path / "empty")]) == 1
    assert "no output.wav" in capsys.readouterr().err
    fdb.write_wav(tmp_path / "other" / "x" / "output.wav", np.zeros(RATE, np.float32))
    fdb.sample("user_backchannel", "b", np.zeros(2 * RATE, np.float32), None, [0.5, 1.0])
    assert main([*base, "--outputs", str(tmp_path / "other"), "--data", str(fdb.data)]) == 1
    assert "none of the 1 outputs" in capsys.readouterr().err


def test_free_text_cells_stay_in_their_table() -> None:
    """Untrained models say anything (pipes, new lines, pages of bytes): each table row
    stays one line with its columns."""
    from venus.evaluation.markdown import cell, table

    said = "a | b\nc " + "x" * 200
    rows = table(["sample", "heard"], [["s", cell(said)]], left=2)
    assert len(rows) == 3 and rows[2].count(" | ") == 1 and "\n" not in rows[2]
    assert len(cell(said)) <= 81 and cell(said).endswith("…")
