"""Delegation scoring with hand-built known answers, the benchmark's environment on the
real harness, the reference scored against itself on a generated set, and the command."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.scripted import CALL, WORDS, Scripted, swap_tokenizer

from venus.daemon.config.schema import DEFAULT_TEMPERATURE, VenusConfig
from venus.daemon.frontend.timeline import ChunkRecord, DelegationRecord, ResultRecord
from venus.evaluation.delegation import (
    Call,
    Decision,
    Track,
    result_words,
    score_sample,
    score_set,
)
from venus.evaluation.delegation_args import MISSING, argument_checks, normalise, same_value

SCHEMAS: dict[str, Any] = {
    "weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "day": {"enum": ["today", "tomorrow", "monday"], "default": "today"},
            "units": {"type": "string", "default": "metric"},
        },
    },
    "timer": {
        "type": "object",
        "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
    },
    "calendar": {
        "type": "object",
        "properties": {"time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}[ap]?$"}},
    },
}


def track(*calls: Call, decisions: Sequence[Decision] = (), category: str = "delegation") -> Track:
    return Track("s", category, 1.0, tuple(calls), tuple(decisions))


def call(capability: str, chunk: int = 1, **arguments: Any) -> Call:
    return Call(chunk, capability, arguments)


# --- tool selection -------------------------------------------------------------------------
def test_tool_selection_precision_recall_f1_over_multisets() -> None:
    ref = track(call("weather"), call("weather"), call("timer"))
    hyp = track(call("weather"), call("timer"), call("timer"), call("clock"))
    s = score_sample(ref, hyp, SCHEMAS)
    assert (s.reference_calls, s.hypothesis_calls, len(s.pairs)) == (3, 4, 2)
    assert s.missed == ("weather",) and s.unnecessary == ("clock", "timer")
    f = score_set([s])
    assert f.precision == pytest.approx(2 / 4)
    assert f.recall == pytest.approx(2 / 3)
    assert f.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert f.missed_rate == pytest.approx(1 / 3) and f.unnecessary_rate == pytest.approx(2 / 4)


def test_f1_is_zero_when_nothing_is_delegated_and_undefined_with_no_calls_at_all() -> None:
    silent = score_set([score_sample(track(call("weather")), track(), SCHEMAS)])
    assert (silent.precision, silent.recall, silent.f1, silent.missed_rate) == (None, 0.0, 0.0, 1.0)
    empty = score_set([score_sample(track(category="other"), track(), SCHEMAS)])
    assert (empty.precision, empty.recall, empty.f1, empty.pass_at_1) == (None, None, None, None)
    assert empty.other_with_calls_rate == 0.0


# --- arguments ------------------------------------------------------------------------------
def test_normalise_fills_defaults_folds_free_text_and_maps_enum_case() -> None:
    schema = SCHEMAS["weather"]
    assert normalise({"city": "  New   York "}, schema) == {
        "city": "new york",
        "day": "today",
        "units": "metric",
    }
    assert normalise({"day": "Monday"}, schema)["day"] == "monday"  # the enum's spelling
    assert normalise({"day": "Mondays"}, schema)["day"] == "Mondays"  # not a member: as is
    assert normalise({"time": "10:30A"}, SCHEMAS["calendar"]) == {"time": "10:30A"}  # pattern


def right_of(
    hypothesis: dict[str, Any], reference: dict[str, Any], capability: str
) -> tuple[int, int]:
    """(arguments right, arguments in all) of one pair of calls, as ``CallPair`` counts."""
    checks = argument_checks(hypothesis, reference, SCHEMAS[capability])
    return sum(right for _, right, _ in checks), len(checks)


def test_defaults_and_key_order_do_not_matter() -> None:
    ref = {"city": "Paris", "day": "today"}
    assert right_of({"city": "paris"}, ref, "weather") == (3, 3)
    assert right_of({"day": "today", "city": "Paris"}, ref, "weather") == (3, 3)


@pytest.mark.parametrize(
    ("said", "right"), [(105, True), (95, True), (104.9, True), (106, False), (94, False)]
)
def test_numbers_within_five_percent_pass_and_six_fail(said: float, right: bool) -> None:
    assert same_value(said, 100) is right
    assert (right_of({"seconds": said}, {"seconds": 100}, "timer")[0] == 1) is right


def test_zero_booleans_and_nesting_compare_exactly() -> None:
    assert same_value(0, 0) and not same_value(0.001, 0)
    assert not same_value(1, True) and same_value(True, True)
    assert same_value({"a": [1, 2.02]}, {"a": [1, 2]}) and not same_value([1], [1, 2])


def test_an_extra_or_a_missing_argument_fails_the_call() -> None:
    ref = track(call("timer", seconds=60))
    extra = score_sample(ref, track(call("timer", seconds=60, label="tea")), SCHEMAS)
    assert (extra.pairs[0].arguments_right, extra.pairs[0].arguments) == (1, 2)
    assert not extra.pass_at_1
    missing = score_sample(
        track(call("timer", seconds=60, label="tea")), track(call("timer", seconds=60)), SCHEMAS
    )
    assert not missing.pairs[0].exact
    f = score_set([extra, missing])
    assert f.argument_accuracy == pytest.approx(2 / 4) and f.call_accuracy == 0.0


def test_pairs_take_the_best_arguments_not_the_order() -> None:
    ref = track(call("weather", 2, city="Berlin"), call("weather", 9, city="Paris"))
    hyp = track(call("weather", 2, city="Paris"), call("weather", 9, city="Berlin"))
    s = score_sample(ref, hyp, SCHEMAS)
    assert all(p.exact for p in s.pairs) and s.pass_at_1


def test_each_argument_says_how_often_it_was_right_and_what_was_said_most() -> None:
    """A model that sets every timer for 20 seconds whatever was asked shows as such."""
    asked = [(10, "tea"), (30, "eggs"), (20, "oven"), (15, "tea"), (25, "pasta")]
    scores = [
        score_sample(
            track(call("timer", seconds=s, label=label)),
            track(call("timer", seconds=20, **({"label": "Tea"} if label == "tea" else {}))),
            SCHEMAS,
        )
        for s, label in asked
    ]
    scores.append(score_sample(track(call("weather", city="Paris")), track(), SCHEMAS))  # missed
    f = score_set(scores)
    got = {a.argument: (a.right, a.matched, a.said_most, a.said_most_n) for a in f.arguments}
    assert got == {
        "timer.seconds": (1, 5, "20", 5),
        "timer.label": (2, 5, MISSING, 3),  # "Tea" is "tea" (free text folds case)
    }
    assert [a.argument for a in f.arguments] == ["timer.label", "timer.seconds"]  # a tie: by name
    assert f.argument_accuracy == pytest.approx(3 / 10)


# --- Pass@1 and rates -----------------------------------------------------------------------
def test_pass_at_1_needs_the_right_set_nothing_extra_and_every_argument() -> None:
    ref = track(call("weather", city="Paris"), call("timer", seconds=60))
    cases = {
        "right": (track(call("timer", seconds=62), call("weather", city="paris")), True),
        "extra": (
            track(call("timer", seconds=60), call("weather", city="Paris"), call("clock")),
            False,
        ),
        "wrong": (track(call("timer", seconds=70), call("weather", city="Paris")), False),
        "short": (track(call("weather", city="Paris")), False),
    }
    for name, (hyp, passed) in cases.items():
        assert score_sample(ref, hyp, SCHEMAS).pass_at_1 is passed, name
    f = score_set([score_sample(ref, hyp, SCHEMAS) for hyp, _ in cases.values()])
    assert f.pass_at_1 == pytest.approx(1 / 4)


def test_calls_on_a_sample_without_reference_calls_are_unnecessary() -> None:
    delegation = score_sample(track(call("weather")), track(call("weather")), SCHEMAS)
    quiet = score_sample(track(category="proactive_duplex"), track(), SCHEMAS)
    chatty = score_sample(
        track(category="offline_understanding"), track(call("clock"), call("timer")), SCHEMAS
    )
    assert chatty.unnecessary == ("clock", "timer") and not chatty.pass_at_1
    f = score_set([delegation, quiet, chatty])
    assert (f.samples, f.with_calls) == (3, 1)
    assert f.pass_at_1 == 1.0  # over the samples with reference calls
    assert f.unnecessary_rate == pytest.approx(2 / 3) and f.missed_rate == 0.0
    assert f.other_with_calls_rate == pytest.approx(1 / 2)
    assert f.precision == pytest.approx(1 / 3) and f.recall == 1.0


def test_decisions_match_by_kind_and_capability() -> None:
    ref = track(decisions=[Decision(5, "cancel", "timer"), Decision(8, "revise", "weather")])
    hyp = track(decisions=[Decision(6, "cancel", "timer"), Decision(8, "replace", "weather")])
    s = score_sample(ref, hyp, SCHEMAS)
    assert s.decisions["cancel"] == (1, 1, 1)
    assert s.decisions["revise"] == (1, 0, 0) and s.decisions["replace"] == (0, 1, 0)
    f = score_set([s])
    assert (f.decision_precision, f.decision_recall, f.decision_f1) == (0.5, 0.5, 0.5)
    assert f.pass_at_1 is None  # no calls: decisions are counted apart


# --- times from a timeline ------------------------------------------------------------------
def record(
    index: int, decision: str = "listen", spans: Sequence[str] = (), results: Sequence[str] = ()
) -> ChunkRecord:
    from venus.daemon.frontend.delegation import parse_call

    parsed = [parse_call(s) for s in spans]
    speaking = decision != "listen"
    return ChunkRecord(
        index=index, start_s=float(index), decision=decision,  # type: ignore[arg-type]
        text="words" if speaking else "", text_tokens=0, speech_tokens=0,
        reply_id=index if speaking else None, reply_ended=False,
        delegations=tuple(DelegationRecord(raw=p.raw, valid=p.valid, name=p.name,
                                           arguments=p.arguments, error=p.error) for p in parsed),
        results=tuple(ResultRecord(item_id=r, tokens=3) for r in results),
        context_tokens=0, evicted_tokens=0, vision=False, speech_ratio=0.0,
        playback_stopped=False, latency_ms={"total": 1.0}, deadline_missed=False, degraded=(),
    )  # fmt: skip


def test_time_to_result_and_to_the_reply_that_delivers_it() -> None:
    from venus.evaluation.delegation_tracks import hypothesis_track

    span = '{"name": "weather", "arguments": {"city": "Paris"}}'
    decisions = ["listen", "speak", "turn_eos", "listen", "listen", "speak", "speak", "listen",
                 "speak", "listen"]  # fmt: skip
    records = [record(i, d) for i, d in enumerate(decisions)]
    records[2] = record(2, "turn_eos", spans=[span, "{not json"])  # the call, written in a reply
    records[6] = record(6, "speak", results=["abc123def456"])  # injected inside a reply...
    items = [{"item_id": "abc123def456", "capability": "weather", "chunk_index": 2, "span": span}]
    hyp = hypothesis_track("s", "delegation", 0.5, records, items)
    assert hyp.malformed == 1
    (c,) = hyp.calls
    assert (c.chunk, c.result_chunk, c.spoken_chunk) == (2, 6, 8)  # ...so the next reply says it
    ref = Track("s", "delegation", 0.5, (Call(2, "weather", {"city": "Paris"}, 4, 5),))
    s = score_sample(ref, hyp, SCHEMAS)
    assert s.seconds("result", "hypothesis") == [2.0] and s.seconds("spoken", "hypothesis") == [3.0]
    assert s.seconds("result", "reference") == [1.0] and s.seconds("spoken", "reference") == [1.5]
    f = score_set([s])
    assert (f.results_returned, f.results_spoken) == (1.0, 1.0)
    assert f.time_to_result.mean_s == 2.0 and f.reference_time_to_spoken.median_s == 1.5


def test_result_words_said_are_the_result_words_the_reference_reply_says() -> None:
    from venus.evaluation.delegation_tracks import reply_text

    said = ["", "Time's", "up!", "Later", ""]
    assert reply_text(said, ["listen", "speak", "turn_eos", "speak", "listen"], 1) == "Time's up!"
    assert reply_text(said, ["listen", "speak", "speak", "speak", "listen"], 3) == "Later"
    got = "Tuesday in Paris: sunny, 21 °C."
    ref = Call(2, "weather", {}, 4, 5, "On Tuesday in Paris it will be sunny, 21 degrees.", got)
    hyp = Call(2, "weather", {}, 6, 8, "In Paris it is sunny and 12 degrees", got)
    assert result_words(ref, hyp) == (3, 5)  # in, paris, sunny of tuesday in paris sunny 21
    assert result_words(ref, replace(hyp, said="")) == (0, 5)  # never said
    # a built-in answers the system otherwise: only the words its own result has count
    clock = replace(hyp, result_text="Paris, Monday: sunny", said="Paris is sunny")
    assert result_words(ref, clock) == (2, 2)
    s = score_sample(Track("s", "delegation", 1.0, (ref,)), Track("s", "d", 1.0, (hyp,)), SCHEMAS)
    assert score_set([s]).result_words_said == 0.6


def test_without_items_a_call_has_no_result_time_and_ids_stay_ids() -> None:
    from venus.evaluation.delegation_tracks import hypothesis_track

    records = [record(0, "speak", spans=['{"name": "timer", "arguments": {"seconds": 5}}']),
               record(1, "speak", spans=['{"cancel": "0123456789ab"}'], results=["x"])]  # fmt: skip
    hyp = hypothesis_track("s", "delegation", 1.0, records)
    assert hyp.calls[0].result_chunk is None
    assert hyp.decisions == (Decision(1, "cancel", "0123456789ab"),)
    items = [{"item_id": "0123456789abcdef", "capability": "timer", "chunk_index": 0}]
    assert hypothesis_track("s", "d", 1.0, records, items).decisions[0].capability == "timer"


# --- the benchmark's environment on the real harness ----------------------------------------
def test_stand_ins_answer_on_the_sample_clock_through_the_harness(tmp_path: Path) -> None:
    from venus.daemon.frontend.channel import Delegation
    from venus.daemon.harness.service import Harness
    from venus.daemon.harness.states import State
    from venus.datagen.domains_contracts import CALENDAR, WEATHER
    from venus.evaluation.delegation_env import Answer, BenchTransport, settle

    answers = [Answer("weather", True, "sunny", 3), Answer("calendar", False, "down", 2)]
    bench = BenchTransport([WEATHER, CALENDAR], answers)
    harness = Harness.open(tmp_path / "journal.sqlite3", [bench])
    harness.start(resume=False)

    def made_at(item_id: str) -> int | None:
        item = harness.core.journal.find(item_id)
        return None if item is None else item.chunk_index

    weather = {"city": "Paris", "day": "today"}
    calendar = {"action": "list", "day": "today"}
    offered: dict[str, int] = {}
    try:
        for name, args in (("weather", weather), ("calendar", calendar), ("weather", {"city": ""})):
            harness.delegate(Delegation("s", 1, name, args, json.dumps({"name": name})))
        harness.delegate(Delegation("s", 2, "cancel", {}, "{}", action="cancel", target="calendar"))
        for _ in range(3):  # captures and dispatch, then the answers they gave at once
            settle(harness)
        for chunk in range(2, 8):
            for r in harness.results("s", chunk, idle=True):
                offered.setdefault(json.loads(r.text)["result"], chunk)
            if bench.advance(chunk, made_at):
                settle(harness)
        states = {i.capability + str(i.arguments.get("city", "")): i.state
                  for i in harness.core.journal.items()}  # fmt: skip
    finally:
        harness.stop()
    assert offered["sunny"] == 4  # called in chunk 1, answered 3 chunks later
    assert "down" not in offered and states["calendar"] == State.CANCELLED  # cancelled first
    assert min(offered.values()) == 2  # bad arguments fail at once (invalid_arguments)


# --- on generated data ----------------------------------------------------------------------
def test_the_reference_scored_against_itself_is_perfect(
    delegation_set: Path, tmp_path: Path
) -> None:
    from venus.evaluation.delegation_run import evaluate

    done = evaluate(delegation_set, tmp_path / "ref", reference=True, others=1.0)
    f = done.figures
    assert f.samples == 8 and f.with_calls >= 5 and f.reference_calls >= f.with_calls
    assert f.hypothesis_calls == f.matched == f.reference_calls
    perfect = (f.precision, f.recall, f.f1, f.argument_accuracy, f.call_accuracy, f.pass_at_1)
    assert perfect == (1.0,) * 6
    assert (f.missed_rate, f.unnecessary_rate, f.other_with_calls_rate) == (0.0, 0.0, 0.0)
    assert all(ref == hyp == matched for ref, hyp, matched in f.decisions.values())
    assert f.time_to_result == f.reference_time_to_result and f.time_to_result.n > 0
    assert f.time_to_spoken == f.reference_time_to_spoken
    assert (f.results_returned, f.results_spoken, f.result_words_said) == (1.0, 1.0, 1.0)
    report = json.loads(done.json_path.read_text())
    assert report["set"]["f1"] == 1.0 and len(report["samples"]) == 8
    assert "| tool selection F1 | 100.0% |" in done.md_path.read_text()
    assert f.arguments and all(a.right == a.matched for a in f.arguments)
    assert report["set"]["arguments"][0]["argument"] == f.arguments[0].argument
    assert "## Arguments by key (matched calls)" in done.md_path.read_text()


def test_a_hypothesis_dir_is_scored_and_missing_samples_named(
    delegation_set: Path, tmp_path: Path
) -> None:
    from venus.evaluation.delegation_run import evaluate, find_set, write_reference

    hyp = write_reference(find_set(delegation_set), tmp_path / "other-system")
    first = sorted(hyp.iterdir())[0]
    for f in first.iterdir():
        f.unlink()
    first.rmdir()
    done = evaluate(delegation_set, tmp_path / "out", hypothesis=hyp, others=1.0)
    assert done.missing == (first.name,) and len(done.scores) == 7
    assert json.loads(done.json_path.read_text())["system"] == "other-system"


def test_choose_takes_every_delegation_sample_and_a_share_of_the_others(
    delegation_set: Path,
) -> None:
    from venus.evaluation.delegation_run import choose, find_set

    samples = find_set(delegation_set)
    delegation = sum(s.category == "delegation" for s in samples)
    assert 0 < delegation < len(samples)
    categories = [s.category for s in choose(samples, 0.01)]
    assert categories.count("delegation") == delegation and len(categories) == delegation + 1
    assert len(choose(samples, 0.0)) == delegation and len(choose(samples, 1.0)) == len(samples)


def test_the_samples_run_with_the_temperature_given() -> None:
    from venus.evaluation.delegation_run import default_engines, run_config

    tiny = default_engines()
    daemon = VenusConfig().model
    assert run_config(tiny).model.temperature is None  # the daemon's choice: the engines'
    greedy = run_config(tiny, seed=2, temperature=0.0).model
    assert (greedy.engines, greedy.seed, greedy.temperature) == (tiny, 2, 0.0)
    assert (greedy.top_p, greedy.listen_bias) == (daemon.top_p, daemon.listen_bias)
    assert run_config(tiny, temperature=1.5).model.temperature == 1.5
    assert daemon.call_grammar and run_config(tiny).model.call_grammar
    assert not run_config(tiny, call_grammar=False).model.call_grammar


def test_cli_runs_the_tiny_engines_with_the_harness(
    delegation_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main

    out = tmp_path / "eval"
    assert main(["eval", "delegation", "--data", str(delegation_set), "--out", str(out),
                 "--others", "1", "--temperature", "0"]) == 0  # fmt: skip
    report = json.loads((out / "delegation.json").read_text())
    assert report["system"] == "venus tiny (model, temperature 0)"
    f = report["set"]
    assert f["samples"] == 8 and f["reference_calls"] >= f["with_calls"] > 0
    for sample in report["samples"]:
        folder = out / "samples" / sample["sample_id"]
        assert (folder / "timeline.jsonl").is_file() and (folder / "items.jsonl").is_file()
        assert json.loads((folder / "summary.json").read_text())["temperature"] == 0.0  # greedy
    # the untrained model is not judged, only the report's consistency
    assert f["matched"] <= min(f["reference_calls"], f["hypothesis_calls"])
    assert f["missed_rate"] == pytest.approx(1 - f["recall"])
    if f["hypothesis_calls"]:
        assert f["unnecessary_rate"] == pytest.approx(1 - f["precision"])
    assert (out / "delegation.md").read_text().startswith("# Delegation scores")
    assert "delegation.json" in capsys.readouterr().out
    # under the capabilities' grammar (the default) every span it wrote parsed
    assert f["malformed"] == 0
    free = tmp_path / "free"
    assert main(["eval", "delegation", "--data", str(delegation_set), "--out", str(free),
                 "--others", "1", "--temperature", "0", "--free-calls"]) == 0  # fmt: skip
    report = json.loads((free / "delegation.json").read_text())
    assert report["system"] == "venus tiny (model, temperature 0, free calls)"


def test_an_engine_that_delegates_is_answered_heard_and_scored(
    scripted_export: Scripted, delegation_set: Path, tmp_path: Path
) -> None:
    """End to end: the scripted engines (speaking when the VAD policy gives them the turn)
    make one set's reference call, a mock domain's, in every sample; the stand-in answers
    where the trajectory has that call, the harness offers the result, the engine speaks
    it, and the report pairs the call with the reference, arguments right."""
    from venus.cli import main
    from venus.evaluation.delegation_env import STAND_INS

    wanted = [
        (folder.name, d)
        for folder in sorted((delegation_set / "samples").iterdir())
        for d in json.loads((folder / "trajectory.json").read_text())["delegations"]
        if d["capability"] in STAND_INS and d["status"] == "completed"
    ]
    assert wanted, "the fixture set should call a mock domain somewhere"
    target, ref = wanted[0]
    call = json.dumps({"name": ref["capability"], "arguments": ref["arguments"]})
    words = {w: i for w, i in WORDS.items() if w != CALL} | {call: WORDS[CALL]}
    engines = swap_tokenizer(scripted_export.engines, tmp_path / "engines", words)
    out = tmp_path / "eval"
    assert main(["eval", "delegation", "--data", str(delegation_set), "--out", str(out),
                 "--engines", str(engines), "--policy", "vad", "--others", "0"]) == 0  # fmt: skip
    report = json.loads((out / "delegation.json").read_text())
    assert report["system"] == "venus engines (vad)"  # the daemon's choice: not named
    summary = json.loads((out / "samples" / target / "summary.json").read_text())
    assert summary["temperature"] == DEFAULT_TEMPERATURE  # these engines advise none
    f = report["set"]
    assert f["hypothesis_calls"] > 0 and f["malformed"] == 0

    sample = next(s for s in report["samples"] if s["sample_id"] == target)
    (pair,) = [p for p in sample["pairs"] if p["capability"] == ref["capability"]]
    assert pair["arguments_right"] == pair["arguments"] > 0
    # Answered on the sample clock (the trajectory's latency after the call) and spoken.
    latency = ref["result_chunk"] - ref["call_chunk"]
    assert pair["result_chunk"] == pair["hypothesis_chunk"] + latency
    assert pair["spoken_chunk"] is not None and pair["spoken_chunk"] >= pair["result_chunk"]
    assert f["time_to_result"]["n"] >= 1 and f["results_returned"] > 0
    # Every call the engine made is in its sample's journal. The target's answers were
    # offered to the model (a reply is delivering them); elsewhere the sample has no
    # answer for that capability, and every call failed saying so.
    for s in report["samples"]:
        folder = out / "samples" / s["sample_id"]
        items = (folder / "items.jsonl").read_text().splitlines()
        assert len(items) == s["hypothesis_calls"]
        with sqlite3.connect(folder / "journal.sqlite3") as db:
            answers = [json.loads(r) for (r,) in db.execute("SELECT result FROM results")]
        if s["sample_id"] == target:
            assert {json.loads(i)["state"] for i in items} & {"delivering", "delivered"}
            assert any(not a["isError"] for a in answers)
        else:  # (a sample where the VAD never gave the engine the turn has no calls; a
            # call in the sample's last chunk may still be pending when it ends)
            assert len(items) - 1 <= len(answers) <= len(items)
            assert all(a["error"]["code"] == "not_in_sample" for a in answers)
    assert sum(s["hypothesis_calls"] for s in report["samples"] if s["sample_id"] != target)


def test_cli_refuses_bad_inputs_with_the_message(
    delegation_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main

    args = ["eval", "delegation", "--out", str(tmp_path / "out")]
    assert main([*args, "--data", str(tmp_path)]) == 1
    assert "no index.jsonl" in capsys.readouterr().err
    assert main([*args, "--data", str(delegation_set), "--reference", "--policy", "vad"]) == 1
    assert "go with a run" in capsys.readouterr().err
    assert main([*args, "--data", str(delegation_set), "--reference", "--temperature", "0"]) == 1
    assert "--temperature, --free-calls and --idle-wait go with a run" in capsys.readouterr().err
    assert main([*args, "--data", str(delegation_set), "--reference", "--idle-wait", "0"]) == 1
    assert "go with a run" in capsys.readouterr().err
    assert main([*args, "--data", str(delegation_set), "--reference", "--free-calls"]) == 1
    assert "go with a run" in capsys.readouterr().err
    assert main([*args, "--data", str(delegation_set), "--hypothesis", str(tmp_path)]) == 1
    assert "no <sample id>/timeline.jsonl" in capsys.readouterr().err
