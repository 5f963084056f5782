"""The Full-Duplex-Bench v1.5 layout, written from a set of stand-in samples (real plans,
tone audio whose edges are sharp): names, one event per input, windows that match the
audio and the plan, the source offsets. tests/datagen/test_cli.py checks the windows of
the real pipeline's samples too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import datagen_stub as stub
from support.datagen_fixtures import check_window, read_wav

from venus.datagen import runner
from venus.datagen.config import parse_config
from venus.datagen.fdb import TASKS, Cut, audible, cut

SEED = 8
METADATA_KEYS = {
    "task", "id", "context_text", "current_turn_text", "overlap_text", "timestamps",
    "planned_timestamps", "type", "intent", "action", "delegation_decision", "speaker",
    "duration_s", "sample_rate", "source",
}  # fmt: skip


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = parse_config({
        "samples": 16,
        "mix": {"category": {"offline_understanding": 0.0, "proactive_duplex": 0.5,
                             "delegation": 0.5}},
        "output": {"timeline_plots": 0},
    })  # fmt: skip
    target = tmp_path_factory.mktemp("fdb") / "set"
    runner.run(config, target, SEED, sample_fn=stub.generate)
    return target


def trajectories(out: Path) -> dict[str, dict[str, Any]]:
    paths = out.glob("samples/*/trajectory.json")
    return {p.parent.name: json.loads(p.read_text()) for p in paths}


def folders(out: Path) -> list[Path]:
    return sorted(p.parent for p in (out / "full_duplex_bench").glob("*/*/metadata.json"))


def test_the_four_v1_5_tasks_with_manifests(out: Path) -> None:
    root = out / "full_duplex_bench"
    assert sorted(p.name for p in root.iterdir()) == sorted(TASKS.values())
    for task in TASKS.values():
        manifest = json.loads((root / task / "manifest.json").read_text())
        assert manifest["task"] == task and manifest["version"] == "v1.5"
        ids = sorted(p.name for p in (root / task).iterdir() if p.is_dir())
        assert [s["id"] for s in manifest["samples"]] == ids
        assert manifest["count"] == len(ids) > 0, task
        for entry in manifest["samples"]:
            for key in ("input", "clean_input", "metadata"):
                assert (root / entry[key]).is_file()


def test_one_folder_per_overlap_event(out: Path) -> None:
    expected = sorted(
        (TASKS[e["kind"]], f"{t['sample_id']}-e{e['index']}")
        for t in trajectories(out).values()
        for e in t["events"]
    )
    assert sorted((f.parent.name, f.name) for f in folders(out)) == expected


def test_metadata_keys_and_values(out: Path) -> None:
    by_id = trajectories(out)
    for folder in folders(out):
        meta = json.loads((folder / "metadata.json").read_text())
        assert set(meta) == METADATA_KEYS
        assert meta["task"] == folder.parent.name and meta["id"] == folder.name
        t = by_id[meta["source"]["sample_id"]]
        event = t["events"][meta["source"]["event"]]
        turn = t["turns"][event["turn"]]
        assert meta["overlap_text"] == meta["current_turn_text"] == turn["text"]
        assert (meta["action"], meta["intent"]) == (event["action"], event["intent"])
        if event["kind"] == "interruption":
            assert meta["type"] == event["intent"]
        asked = [
            u["text"]
            for u in t["turns"]
            if u["speaker"] == "user"
            and u["role"] in ("question", "request")
            and u["start_s"] < turn["start_s"]
        ]
        assert meta["context_text"] == (asked[-1] if asked else "")


def test_each_window_matches_the_audio_and_the_plan(out: Path) -> None:
    for folder in folders(out):
        start_s, end_s = check_window(folder)
        planned = json.loads((folder / "metadata.json").read_text())["planned_timestamps"]
        assert abs(start_s - planned[0]) <= 0.05 and abs(end_s - planned[1]) <= 0.05, folder


def test_inputs_are_cut_from_the_sample_around_one_event(out: Path) -> None:
    by_id = trajectories(out)
    earlier_removed = 0
    for folder in folders(out):
        meta = json.loads((folder / "metadata.json").read_text())
        source = meta["source"]
        t = by_id[source["sample_id"]]
        whole = read_wav(out / "samples" / source["sample_id"] / "input.wav")
        control = read_wav(out / "samples" / source["sample_id"] / "clean_input.wav")
        cut = read_wav(folder / "input.wav")
        first = round(source["offset_s"] * 16000)
        assert meta["duration_s"] == round(len(cut) / 16000, 3)
        end_s = source["offset_s"] + meta["duration_s"]
        # the sample's input, with the control where another event spoke before this one
        expected = whole[first : first + len(cut)].copy()
        start_s = t["events"][source["event"]]["window_s"][0]
        for other in t["events"]:
            turn = t["turns"][other["turn"]]
            if other["window_s"][0] > start_s:  # the next events' speech is not in the file
                assert turn["start_s"] >= end_s, (folder, other["index"])
            elif other["index"] == source["event"] or turn["end_s"] <= source["offset_s"]:
                continue
            elif abs(turn["start_s"] - 0.5 - source["offset_s"]) > 1e-3:  # not the one asked
                a, b = (max(first, round(x * 16000)) - first for x in other["window_s"])
                expected[a:b] = control[first + a : first + b]
                earlier_removed += int(not np.array_equal(cut[a:b], whole[first + a : first + b]))
        assert np.array_equal(cut, expected), folder
    assert earlier_removed > 0  # the set has events whose reply began before another event


def test_a_reply_playing_at_the_event_began_in_its_file(out: Path) -> None:
    """The assistant can be speaking at the overlap, as in the data: the question and the
    reply playing at the event's start are in the file."""
    by_id = trajectories(out)
    playing = 0
    for folder in folders(out):
        meta = json.loads((folder / "metadata.json").read_text())
        t = by_id[meta["source"]["sample_id"]]
        start_s = t["events"][meta["source"]["event"]]["window_s"][0]
        for u in t["turns"]:
            if u["speaker"] == "assistant" and u["start_s"] < start_s < u["end_s"]:
                playing += 1
                assert u["start_s"] >= meta["source"]["offset_s"] + 0.5, folder
    assert playing > 0


def test_audible_finds_the_span_or_nothing() -> None:
    silence = np.zeros(16000, np.int16)
    burst = silence.copy()
    burst[4000:8000] = (3000 * np.sin(np.arange(4000) * 0.3)).astype(np.int16)
    assert audible(burst, silence) == (0.25, 0.5)
    assert audible(silence, silence) is None
    assert audible(silence[:100], silence[:100]) is None


def test_a_reverberant_tail_running_into_the_next_window() -> None:
    """Event 0's window (its tail) ends after event 1's starts: event 0's file stops
    short of event 1, and event 1's control starts at its own window."""
    t = {
        "turns": [
            {"speaker": "user", "role": "question", "start_s": 1.0},
            {"speaker": "user", "role": "backchannel", "start_s": 10.2},
            {"speaker": "background", "role": "tv_line", "start_s": 11.06},
        ],
        "events": [
            {"index": 0, "turn": 1, "window_s": [10.2, 11.1]},
            {"index": 1, "turn": 2, "window_s": [11.06, 14.3]},
        ],
    }
    n = 20 * 16000
    first = cut(t, t["events"][0], n)
    assert first == Cut(
        first=round(0.5 * 16000), splice=round(10.2 * 16000), last=round(10.96 * 16000)
    )
    second = cut(t, t["events"][1], n)  # no reply plays: from the end of event 0
    assert second == Cut(first=round(10.96 * 16000), splice=round(11.06 * 16000), last=n)
    t["events"][1]["window_s"] = [10.25, 14.3]  # no room left for event 0
    assert cut(t, t["events"][0], n) is None


def test_a_reply_to_an_interruption_is_cut_from_the_interruption() -> None:
    """A backchannel in the answer to an interruption: the file starts at the interruption
    (the question that answer answers) and keeps its speech; an aside in the first reply
    is taken out."""
    t = {
        "turns": [
            {"speaker": "user", "role": "question", "start_s": 1.0},
            {"speaker": "assistant", "role": "answer", "start_s": 3.0, "end_s": 8.0},
            {"speaker": "other", "role": "aside", "start_s": 4.0},
            {"speaker": "user", "role": "interruption", "start_s": 7.0},
            {"speaker": "assistant", "role": "answer", "start_s": 10.0, "end_s": 16.0},
            {"speaker": "user", "role": "backchannel", "start_s": 12.0},
        ],
        "events": [
            {"index": 0, "turn": 2, "window_s": [4.0, 5.5]},
            {"index": 1, "turn": 3, "window_s": [7.0, 9.0]},
            {"index": 2, "turn": 5, "window_s": [12.0, 12.6]},
        ],
    }
    n = 20 * 16000
    assert cut(t, t["events"][2], n) == Cut(
        first=round(6.5 * 16000), splice=round(12.0 * 16000), last=n
    )
    assert cut(t, t["events"][1], n) == Cut(  # the interruption: from the first question
        first=round(0.5 * 16000),
        splice=round(7.0 * 16000),
        last=round(11.9 * 16000),
        removed=((round(4.0 * 16000), round(5.5 * 16000)),),
    )


def test_an_aside_while_waiting_is_cut_from_after_the_previous_event() -> None:
    """No reply plays at the aside: the cut starts after the stop request before it, which
    stays out (taking it out of a cut from the question would let the reply play on)."""
    t = {
        "turns": [
            {"speaker": "user", "role": "question", "start_s": 1.0},
            {"speaker": "assistant", "role": "answer", "start_s": 3.0, "end_s": 6.0},
            {"speaker": "user", "role": "interruption", "start_s": 5.0},
            {"speaker": "other", "role": "aside", "start_s": 9.0},
        ],
        "events": [
            {"index": 0, "turn": 2, "window_s": [5.0, 6.0]},
            {"index": 1, "turn": 3, "window_s": [9.0, 10.5]},
        ],
    }
    assert cut(t, t["events"][1], 20 * 16000) == Cut(
        first=round(6.1 * 16000), splice=round(9.0 * 16000), last=20 * 16000
    )
