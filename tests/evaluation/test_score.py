"""``venus eval score`` end to end on hand-built data dirs with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from venus.cli import main
from venus.errors import EvaluationError
from venus.evaluation.metrics import DEFAULT_RULES, Behaviour, Why
from venus.evaluation.score import find_samples, score_samples
from venus.evaluation.summary import render_markdown, summarize

TOL_S = 0.04
D = 12.0  # every input's duration
S = 5.0  # every overlap's start


def _heard(fdb, speech, overlap: np.ndarray) -> np.ndarray:
    """The user asks at 0.3 s; the overlap speech starts at S."""
    return fdb.place(D, (0.3, speech.question, None), (S, overlap, None))


def _talks_on(fdb, speech) -> np.ndarray:
    """The model answers from 2.6 s and goes on (a 0.2 s pause) until ~10.8 s."""
    second = 2.6 + speech.seconds("answer") + 0.2
    return fdb.place(D, (2.6, speech.answer, None), (second, speech.reply, None))


def _respond_case(fdb, speech, task: str, sid: str, *, rate: int = 16000) -> float:
    """Interrupted at S, the model stops 0.6 s later and answers 0.5 s after e; returns e."""
    e = S + speech.seconds("question")
    said = fdb.place(D, (3.0, speech.answer, S + 0.6 - 3.0), (e + 0.5, speech.reply, None))
    fdb.sample(task, sid, _heard(fdb, speech, speech.question), said, [S, e], output_rate=rate,
               extra={"type": "change_topic", "action": "yield_floor"})  # fmt: skip
    return e


def _score(fdb):
    return score_samples(find_samples(fdb.data), fdb.outputs, rules=DEFAULT_RULES)


def _set(fdb, speech) -> None:
    """One sample per case: the rates are known."""
    q, y = speech.seconds("question"), speech.seconds("yeah")
    _respond_case(fdb, speech, "user_interruption", "i-respond")
    fdb.sample("user_interruption", "i-resume", _heard(fdb, speech, speech.question),
               _talks_on(fdb, speech), [S, S + q])  # fmt: skip
    fdb.sample("user_backchannel", "b-1", _heard(fdb, speech, speech.yeah),
               _talks_on(fdb, speech), [S, S + y])  # fmt: skip
    fdb.sample("talking_to_other", "o-1", _heard(fdb, speech, speech.question),
               _talks_on(fdb, speech), [S, S + q])  # fmt: skip
    stops = fdb.place(D, (2.6, speech.answer, S + 0.5 - 2.6))  # stops 0.5 s in, silent
    fdb.sample("background_speech", "g-1", _heard(fdb, speech, speech.question), stops,
               [S, S + q])  # fmt: skip


def test_each_scenario_scored_with_known_answers(fdb, speech) -> None:
    _set(fdb, speech)
    by_id = {s.sample_id: s for s in _score(fdb)}
    respond = by_id["i-respond"].overlap
    assert respond is not None and respond.label is Behaviour.RESPOND
    assert respond.stop_latency_s == pytest.approx(0.6, abs=TOL_S)
    assert respond.response_latency_s == pytest.approx(0.5, abs=TOL_S)
    assert by_id["i-respond"].window_source == "vad"
    assert by_id["i-respond"].action == "yield_floor"
    for sid in ("i-resume", "b-1", "o-1"):
        outcome = by_id[sid].overlap
        assert outcome is not None and outcome.label is Behaviour.RESUME, sid
    background = by_id["g-1"].overlap
    assert background is not None and background.why is Why.STOPPED_SILENT
    assert background.stop_latency_s == pytest.approx(0.5, abs=TOL_S)


def test_per_scenario_rates(fdb, speech) -> None:
    _set(fdb, speech)
    report = summarize("sys", fdb.data, fdb.outputs, _score(fdb), DEFAULT_RULES)
    rates = {s.task: (s.headline, s.headline_rate, s.samples) for s in report.scenarios}
    assert rates == {
        "background_speech": ("continuation rate", 0.0, 1),
        "talking_to_other": ("continuation rate", 1.0, 1),
        "user_backchannel": ("continuation rate", 1.0, 1),
        "user_interruption": ("response rate", 0.5, 2),
    }
    interruption = next(s for s in report.scenarios if s.task == "user_interruption")
    assert interruption.labels == {"RESPOND": 1, "RESUME": 1, "UNCERTAIN": 0}
    assert interruption.stop_rate == 0.5
    assert interruption.stop_latency.n == 1
    assert interruption.stop_latency.mean_s == pytest.approx(0.6, abs=TOL_S)
    background = next(s for s in report.scenarios if s.task == "background_speech")
    assert background.stop_rate == 1.0 and background.uncertain_rate == 1.0
    # every reply was playing when its overlap began: the rate when playing is the rate
    playing = {s.task: (s.playing_at_start, s.headline_rate_playing) for s in report.scenarios}
    assert playing == {"background_speech": (1, 0.0), "talking_to_other": (1, 1.0),
                       "user_backchannel": (1, 1.0), "user_interruption": (2, 0.5)}  # fmt: skip
    assert "| playing at start | rate when playing |" in render_markdown([report])
    (tor,) = report.v1
    assert (tor.task, tor.measure, tor.take_over_rate) == ("user_interruption",
                                                           "TOR (interruption)", 0.5)  # fmt: skip


def test_the_rate_as_posed_and_by_type(fdb, speech) -> None:
    """Our data's stop requests and asides to a waiting assistant are not v1.5's overlaps:
    the rate as posed leaves them out, and the by-type table shows each with its action."""
    q = speech.seconds("question")
    _respond_case(fdb, speech, "user_interruption", "i-respond")
    stops = fdb.place(D, (2.6, speech.answer, S + 0.5 - 2.6))  # stops 0.5 s in, silent
    fdb.sample("user_interruption", "i-stop", _heard(fdb, speech, speech.question), stops,
               [S, S + q], extra={"type": "stop", "action": "stop_output"})  # fmt: skip
    fdb.sample("talking_to_other", "o-speaking", _heard(fdb, speech, speech.question),
               _talks_on(fdb, speech), [S, S + q],
               extra={"type": "while_speaking", "action": "continue_speaking"})  # fmt: skip
    fdb.sample("talking_to_other", "o-waiting", _heard(fdb, speech, speech.question),
               np.zeros(int(D * 16000), np.float32), [S, S + q],
               extra={"type": "while_waiting", "action": "await_input"})  # fmt: skip
    report = summarize("sys", fdb.data, fdb.outputs, _score(fdb), DEFAULT_RULES)
    rates = {
        s.task: (s.headline_rate, s.samples, s.headline_rate_posed, s.posed_samples)
        for s in report.scenarios
    }
    assert rates == {"user_interruption": (0.5, 2, 1.0, 1),
                     "talking_to_other": (0.5, 2, 1.0, 1)}  # fmt: skip
    markdown = render_markdown([report])
    assert "| 100.0% of 1 |" in markdown
    rows = {tuple(c.strip() for c in line.split("|")[1:-1]) for line in markdown.splitlines()}
    assert ("talking_to_other", "while_waiting", "sys", "await_input 1", "1", "0.0%", "100.0%",
            "0") in rows  # silent, as it should be; no continuation  # fmt: skip
    assert ("user_interruption", "stop", "sys", "stop_output 1", "1", "0.0%", "100.0%",
            "1") in rows  # fmt: skip


def test_no_output_speech_is_counted_not_an_error(fdb, speech) -> None:
    q = speech.seconds("question")
    fdb.sample("user_interruption", "mute", _heard(fdb, speech, speech.question),
               np.zeros(int(D * 16000), np.float32), [S, S + q])  # fmt: skip
    (score,) = _score(fdb)
    assert score.model == ()
    assert score.overlap is not None and score.overlap.why is Why.NO_OUTPUT_SPEECH
    assert score.overlap.stop_latency_s is None and score.overlap.response_latency_s is None
    report = summarize("sys", fdb.data, fdb.outputs, [score], DEFAULT_RULES)
    assert report.scenarios[0].labels["UNCERTAIN"] == 1
    # nothing was playing: no rate when playing, rather than a rate of 0
    assert (report.scenarios[0].playing_at_start, report.scenarios[0].headline_rate_playing) == (
        0, None)  # fmt: skip


def test_overlap_at_the_very_end_of_the_file(fdb, speech) -> None:
    s = D - 1.0  # the backchannel ends 0.6 s before the file does
    heard = fdb.place(D, (0.3, speech.question, None), (s, speech.yeah, None))
    said = fdb.place(D, (6.0, speech.answer, None), (6.0 + speech.seconds("answer") + 0.2,
                                                     speech.reply, None))  # fmt: skip
    fdb.sample("user_backchannel", "end", heard, said, [s, s + speech.seconds("yeah")])
    (score,) = _score(fdb)
    assert score.overlap is not None
    assert (score.overlap.label, score.overlap.horizon_clipped) == (Behaviour.RESUME, True)
    assert score.overlap.stop_latency_s is None


def test_an_output_longer_than_its_input_is_rejected(fdb, speech) -> None:
    q = speech.seconds("question")
    longer = np.zeros(int((D + 0.5) * 16000), np.float32)
    fdb.sample("user_interruption", "long", _heard(fdb, speech, speech.question), longer,
               [S, S + q])  # fmt: skip
    with pytest.raises(EvaluationError) as e:
        _score(fdb)
    message = str(e.value)
    assert "user_interruption/long/output.wav" in message
    assert "12.500 s" in message and "12.000 s" in message and "longer than its input" in message


def test_a_missing_output_names_the_sample(fdb, speech) -> None:
    _respond_case(fdb, speech, "user_interruption", "there")
    q = speech.seconds("question")
    fdb.sample("user_interruption", "absent", _heard(fdb, speech, speech.question), None,
               [S, S + q])  # fmt: skip
    with pytest.raises(EvaluationError, match=r"1 of 2 samples .* user_interruption/absent"):
        _score(fdb)


def test_an_output_at_another_rate_is_resampled(fdb, speech) -> None:
    _respond_case(fdb, speech, "user_interruption", "at24k", rate=24000)
    (score,) = _score(fdb)
    assert score.output_rate_hz == 24000
    assert score.overlap is not None and score.overlap.label is Behaviour.RESPOND
    assert score.overlap.stop_latency_s == pytest.approx(0.6, abs=TOL_S)
    assert score.overlap.response_latency_s == pytest.approx(0.5, abs=TOL_S)


def test_flat_outputs_and_a_datagen_set_root(fdb, speech) -> None:
    _respond_case(fdb, speech, "user_interruption", "flat")
    nested = fdb.outputs / "user_interruption" / "flat"
    (fdb.outputs / "flat").mkdir(parents=True)
    (nested / "output.wav").rename(fdb.outputs / "flat" / "output.wav")
    set_root = fdb.root / "set"
    set_root.mkdir()
    fdb.data.rename(set_root / "full_duplex_bench")
    (score,) = score_samples(find_samples(set_root), fdb.outputs)
    assert score.overlap is not None and score.overlap.label is Behaviour.RESPOND


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ("{not json", "not readable JSON"),
        ('{"timestamps": [3.0]}', r"'timestamps' must be \[start, end\]"),
        ('{"timestamps": [4.0, 3.0]}', r"0 <= start <= end"),
        ('{"timestamps": [30.0, 31.0]}', "starts after the end of input.wav"),
        ("[1, 2]", "expected an object"),
    ],
)
def test_bad_metadata_names_the_file(fdb, speech, metadata: str, match: str) -> None:
    _respond_case(fdb, speech, "user_interruption", "bad")
    (fdb.data / "user_interruption" / "bad" / "metadata.json").write_text(metadata)
    with pytest.raises(EvaluationError, match=match) as e:
        _score(fdb)
    assert "metadata.json" in str(e.value)


def test_v1_task_folders_give_take_over_and_turn_taking(fdb, speech) -> None:
    q = speech.seconds("question")
    heard = fdb.place(D, (0.3, speech.question, None), (4.5, speech.question, None))
    took_over = fdb.place(D, (3.0, speech.reply, None))  # talks in the user's pause
    fdb.sample("candor_pause_handling", "p-1", heard, took_over, [0.3 + q, 4.5],
               annotation="pause.json")  # fmt: skip
    waited = fdb.place(D, (0.3 + q + 0.7, speech.reply, None))  # answers 0.7 s after
    fdb.sample("candor_turn_taking", "t-1", fdb.place(D, (0.3, speech.question, None)), waited,
               [0.3 + q, 0.3 + q + 3.0], annotation="turn_taking.json")  # fmt: skip
    scores = {s.task: s for s in _score(fdb)}
    assert scores["candor_pause_handling"].turn is not None
    assert scores["candor_pause_handling"].turn.take_over
    turn = scores["candor_turn_taking"].turn
    assert turn is not None and turn.take_over
    assert turn.latency_s == pytest.approx(0.7, abs=TOL_S)
    report = summarize("sys", fdb.data, fdb.outputs, list(scores.values()), DEFAULT_RULES)
    assert {(v.measure, v.take_over_rate) for v in report.v1} == {
        ("TOR (pause handling)", 1.0),
        ("turn-taking", 1.0),
    }


def test_markdown_puts_systems_side_by_side(fdb, speech) -> None:
    _set(fdb, speech)
    scores = _score(fdb)
    a = summarize("model", fdb.data, fdb.outputs, scores, DEFAULT_RULES)
    b = summarize("vad", fdb.data, fdb.outputs, scores, DEFAULT_RULES)
    md = render_markdown([a, b])
    assert "| user_interruption | model | 2 | response rate | 50.0% |" in md
    assert "| user_interruption | vad | 2 | response rate | 50.0% |" in md
    assert "## v1 measures" in md


def test_cli_end_to_end(fdb, speech, tmp_path: Path, capsys) -> None:
    _set(fdb, speech)
    out = tmp_path / "scores"
    code = main(["eval", "score", "--data", str(fdb.data), "--outputs", str(fdb.outputs),
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["system"] == "outputs"
    assert len(report["samples"]) == 5
    assert {s["task"] for s in report["scenarios"]} == {
        "user_interruption", "user_backchannel", "talking_to_other", "background_speech"
    }  # fmt: skip
    respond = next(s for s in report["samples"] if s["id"] == "i-respond")
    assert respond["label"] == "RESPOND" and respond["why"] == "yielded_and_answered"
    assert "| user_backchannel |" in (out / "report.md").read_text()
    assert "user_interruption: response rate 50.0% of 2" in capsys.readouterr().out


def test_cli_bad_inputs_exit_1_with_the_message(fdb, speech, tmp_path: Path, capsys) -> None:
    q = speech.seconds("question")
    fdb.sample("user_interruption", "absent", _heard(fdb, speech, speech.question), None,
               [S, S + q])  # fmt: skip
    fdb.outputs.mkdir()
    args = ["eval", "score", "--outputs", str(fdb.outputs), "--out", str(tmp_path / "o")]
    assert main([*args, "--data", str(fdb.data)]) == 1
    err = capsys.readouterr().err
    assert "no output.wav" in err and "user_interruption/absent" in err
    fdb.write_wav(fdb.outputs / "absent" / "output.wav", np.zeros(13 * 16000, np.float32))
    assert main([*args, "--data", str(fdb.data)]) == 1
    err = capsys.readouterr().err
    assert "absent/output.wav: the output is 13.000 s long, longer than its input" in err
    assert main([*args, "--data", str(tmp_path / "nowhere")]) == 1
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([*args, "--data", str(tmp_path / "empty")]) == 1
    assert "no Full-Duplex-Bench task folders" in capsys.readouterr().err


@pytest.mark.slow
def test_the_data_pipelines_own_targets_carry_out_every_action(fdb, tmp_path: Path) -> None:
    """An eval-preset slice scored with each sample's target speech (assistant.wav, cut
    like its input) as the output: every action the data calls for is met; silence
    meets none but waiting."""
    import wave

    root = tmp_path / "set"
    assert main(["datagen", "--preset", "eval", "--seed", "1", "--samples", "40",
                 "--out", str(root)]) == 0  # fmt: skip
    oracle, silent = tmp_path / "oracle", tmp_path / "silent"
    refs = find_samples(root)
    for ref in refs:
        meta = json.loads(ref.annotation.read_text())
        with wave.open(str(ref.folder / "input.wav")) as w:
            frames = w.getnframes()
        with wave.open(str(root / "samples" / meta["source"]["sample_id"] / "assistant.wav")) as w:
            target = np.frombuffer(w.readframes(w.getnframes()), "<i2") / 32767
        at = round(meta["source"]["offset_s"] * 16000)
        cut = np.zeros(frames, np.float32)
        cut[: len(target[at : at + frames])] = target[at : at + frames]
        fdb.write_wav(oracle / ref.task / ref.sample_id / "output.wav", cut)
        fdb.write_wav(silent / ref.task / ref.sample_id / "output.wav", 0 * cut)
    tasks = {ref.task for ref in refs}
    assert {"user_interruption", "user_backchannel", "talking_to_other"} <= tasks
    report = summarize("oracle", root, oracle, score_samples(refs, oracle), DEFAULT_RULES)
    assert {s.task: s.action_rate for s in report.scenarios} == dict.fromkeys(tasks, 1.0)
    mute = summarize("silent", root, silent, score_samples(refs, silent), DEFAULT_RULES)
    for s in mute.scenarios:
        assert s.labels["UNCERTAIN"] == s.samples and s.why == {"no_output_speech": s.samples}
