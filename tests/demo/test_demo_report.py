"""`venus demo`'s account of what the assistant did: each user turn judged on the
assistant's audio (the evaluation's VAD and overlap rules), delegations and results from
the timeline. The assistant's audio here is real speech (the scenario's own, moved to
where an assistant would answer), the records are a timeline as the daemon writes it."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from support.frontend import chunk_record

from venus.daemon.frontend.outputs import read_wav_mono
from venus.daemon.frontend.timeline import DelegationRecord, ResultRecord
from venus.demo.report import behaviour, render_behaviour
from venus.evaluation.vad import model_segments

SCENARIO = Path(str(importlib.resources.files("venus.demo") / "scenario"))
RATE = 16_000


def scenario() -> tuple[dict[str, Any], npt.NDArray[np.float32]]:
    data = json.loads((SCENARIO / "scenario.json").read_text())
    audio, rate = read_wav_mono(SCENARIO / "scenario.wav")
    assert rate == RATE
    return data, audio


def speaking(audio: npt.NDArray[np.float32], spans: list[tuple[float, float]]) -> Any:
    """An output track with the user's first request's speech, looped, in each span."""
    data, _ = scenario()
    first = data["events"][0]
    clip = audio[round(first["start_s"] * RATE) : round(first["end_s"] * RATE)]
    words = model_segments(clip, RATE)[0]  # without the silence around it: no gap when looped
    voice = clip[round(words.start_s * RATE) : round(words.end_s * RATE)]
    out = np.zeros(round(data["duration_s"] * RATE), np.float32)
    for start, end in spans:
        n = round((end - start) * RATE)
        out[round(start * RATE) : round(start * RATE) + n] = np.resize(voice, n)
    return out


def test_an_assistant_that_answers_and_talks_through_the_backchannel() -> None:
    data, audio = scenario()
    request, backchannel = data["events"][0], data["events"][1]
    assert backchannel["kind"] == "backchannel"
    answer_at = request["end_s"] + 0.9  # answering, and still speaking over the backchannel
    output = speaking(audio, [(answer_at, backchannel["end_s"] + 2.0)])
    first = int(answer_at)
    records = [
        chunk_record(index=k, start_s=float(k), decision="speak", reply_id=1, text=w)
        for k, w in ((first, "Sure, adding "), (first + 1, "olive oil."))
    ]
    call = DelegationRecord(
        raw="{}", valid=True, name="shopping_list", arguments={"item": "olive oil"}, error=None
    )
    records.insert(0, chunk_record(index=first - 1, start_s=first - 1.0, delegations=(call,)))
    records.append(chunk_record(index=10, start_s=10.0, results=(ResultRecord("i1", 12),)))
    records.append(chunk_record(index=11, start_s=11.0, decision="speak", reply_id=2, text="Done."))
    moments = behaviour(data, records, output, RATE, {"i1": "shopping_list"})

    by_kind = {m.what: m for m in moments}
    asked = next(m for m in moments if m.at_s == request["start_s"])
    assert asked.met is True and "answered 0.9 s after: 'Sure, adding olive oil.'" in asked.line
    assert by_kind["backchannel"].met is True and "kept talking" in by_kind["backchannel"].line
    assert "delegated shopping_list(item='olive oil')" in by_kind["delegation"].line
    assert "got the shopping_list result; then said 'Done.'" in by_kind["result"].line
    assert [m.at_s for m in moments] == sorted(m.at_s for m in moments)
    # the turns it was silent for are not answered
    later = [m for m in moments if m.what in ("request", "question") and m.at_s > 20]
    assert later and all(m.met is False and "no answer" in m.line for m in later)
    text = render_behaviour(moments, data)
    assert "delegations made (the data's assistant makes 5)" in text
    assert f"of {len(data['events'])} user turns handled" in text


def test_an_assistant_that_talks_over_the_user_and_stops_for_nothing() -> None:
    data, audio = scenario()
    interruption = next(e for e in data["events"] if e["kind"] == "interruption")
    request = data["events"][0]
    # speaking from the middle of the request to well after the interruption
    spans = [((request["start_s"] + request["end_s"]) / 2, interruption["end_s"] + 3.0)]
    moments = behaviour(data, [], speaking(audio, spans), RATE, {})
    asked = next(m for m in moments if m.at_s == request["start_s"])
    assert asked.met is False and "talked over it" in asked.line
    cut_in = next(m for m in moments if m.what == "interruption")
    assert (
        cut_in.met is False and "kept talking" in cut_in.line and "revise response" in cut_in.line
    )


def test_a_reply_that_runs_into_the_next_turn_talks_over_it() -> None:
    """Speech begun before the user's turn and still going in it is talking over it,
    however early it began."""
    data, audio = scenario()
    question = next(e for e in data["events"] if e["kind"] == "question")
    spans = [(question["start_s"] - 3.0, question["start_s"] + 1.0)]
    moments = behaviour(data, [], speaking(audio, spans), RATE, {})
    asked = next(m for m in moments if m.at_s == question["start_s"])
    assert asked.met is False and "talked over it" in asked.line
