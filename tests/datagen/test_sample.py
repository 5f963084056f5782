"""A written sample: files and their formats, the schema, alignment re-measured from the
written WAVs, byte-identical output, and atomic writes (real synthesis and video)."""

from __future__ import annotations

import copy
import hashlib
import json
import wave
from collections.abc import Callable
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any

import cv2
import jsonschema
import numpy as np
import pytest
from numpy.typing import NDArray

from venus.datagen import runner, tts
from venus.datagen import sample as sample_module
from venus.datagen.acoustics import onsets
from venus.datagen.config import PRESETS, GenerationConfig, load_config, parse_config, preset
from venus.datagen.mixdown import CUT_FADE_SAMPLES
from venus.datagen.plan import CUTTING, Plan, plain_text
from venus.datagen.planner import plan_sample
from venus.datagen.realize import SAMPLE_RATE, tts_text
from venus.datagen.sample import SampleError, SampleRecord, generate_sample, read_wav
from venus.datagen.trajectory import TrajectoryError, schema, validate

SEED = 1
SMOKE = preset("smoke")
# no noise, no room, no level changes: the clean input is the user's floor turns alone
DRY = parse_config(
    {**PRESETS["smoke"], "acoustics": {"noise": ["none"], "reverb_p": 0.0, "level_change_p": 0.0}}
)
SCHEMA_PATH = Path(__file__).parents[2] / "datagen" / "schemas" / "trajectory.schema.json"
TOLERANCE_S = 0.05
HEARD_DBFS = -60.0  # the window's definition: 10 ms frames of input - clean above this


@cache
def planned(config: GenerationConfig, index: int) -> Plan:
    return plan_sample(config, index, SEED)


def first(predicate: Callable[[Plan], bool], config: GenerationConfig = SMOKE) -> int:
    found = list(islice((i for i in range(400) if predicate(planned(config, i))), 3))
    if not found:
        pytest.fail("no smoke sample has the property; the planner changed")
    return min(found, key=lambda i: planned(config, i).duration_s)


class Written:
    """Samples generated once per module, by (config name, index)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[tuple[str, int], tuple[SampleRecord, Path]] = {}

    def __call__(self, index: int, config: str = "smoke") -> tuple[SampleRecord, Path]:
        if (config, index) not in self.done:
            out = self.root / config
            record = generate_sample(SMOKE if config == "smoke" else DRY, index, SEED, out)
            self.done[config, index] = (record, (out / record.path).parent)
        return self.done[config, index]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return Written(tmp_path_factory.mktemp("samples"))


def load(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "trajectory.json").read_text("utf-8"))
    return data


# --- files --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("group", "category"),
    [("video", "offline_understanding"), ("audio", "proactive_duplex"), ("video", "delegation")],
)
def test_a_sample_of_each_category_is_written(written: Written, group: str, category: str) -> None:
    index = first(lambda p: (p.group, p.category) == (group, category))
    record, directory = written(index)
    data = load(directory)
    jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text("utf-8"))).validate(data)
    assert (data["group"], data["category"]) == (group, category)
    assert record.sample_id == data["sample_id"] == directory.name
    assert record.path == f"samples/{record.sample_id}/trajectory.json"
    assert record.sha256 == hashlib.sha256((directory / "trajectory.json").read_bytes()).hexdigest()
    assert record.duration_s == data["duration_s"] and record.delegations == len(
        data["delegations"]
    )
    assert sum(record.events.values()) == len(data["events"])
    assert record.overlap_s == pytest.approx(
        sum(b - a for a, b in (e["window_s"] for e in data["events"])), abs=1e-5
    )
    for name in ("input", "clean_input", "assistant"):
        with wave.open(str(directory / data["files"][name]), "rb") as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
            assert w.getnframes() == round(data["duration_s"] * 16000)
    chunks = len(data["chunks"])
    assert chunks == data["duration_s"] and all(
        c["frame"] == (group == "video") for c in data["chunks"]
    )
    if group == "video":
        capture = cv2.VideoCapture(str(directory / "video.avi"))
        assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == chunks
        capture.release()
    else:
        assert data["files"]["video"] is None and not (directory / "video.avi").exists()
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["trajectory.json", "input.wav", "clean_input.wav", "assistant.wav"]
        + (["video.avi"] if group == "video" else [])
    )
    assert json.loads(record.to_json()) == {
        "sample_id": record.sample_id, "index": index, "group": group, "category": category,
        "duration_s": data["duration_s"], "events": record.events,
        "delegations": record.delegations, "overlap_s": record.overlap_s,
        "path": record.path, "sha256": record.sha256,
    }  # fmt: skip
    assert list(record.events) == ["backchannel", "other_directed", "background", "interruption"]


# --- alignment, re-measured from the files -------------------------------------------------------
def near(t_s: float, times: list[float]) -> bool:
    return any(abs(t_s - t) <= TOLERANCE_S for t in times)


def test_assistant_turns_start_where_assistant_wav_does(written: Written) -> None:
    scenarios = (lambda p: p.category == "delegation", _cut_alone, _cut_and_response)
    for index in sorted({first(s) for s in scenarios}):
        _, directory = written(index)
        data = load(directory)
        regions = onsets(read_wav(directory / "assistant.wav"))
        starts, ends = [r.start / 16000 for r in regions], [r.end / 16000 for r in regions]
        turns = [t for t in data["turns"] if t["speaker"] == "assistant"]
        cuts = {t["cut_at_s"] for t in turns} - {None}
        for t in turns:  # every turn starts where the file's speech does, on the grid
            assert t["planned_start_s"] == round(t["planned_start_s"])
            if t["planned_start_s"] in cuts:  # a response right at a cut: no gap before it
                assert any(a < t["start_s"] < b for a, b in zip(starts, ends, strict=True))
                continue
            assert near(t["start_s"], starts) and near(t["planned_start_s"], starts)
        for s in starts:  # and the file has no speech that no turn explains
            assert any(t["start_s"] - TOLERANCE_S <= s <= t["end_s"] for t in turns)
        for cut_s in cuts - {t["planned_start_s"] for t in turns}:  # silent after a cut
            assert near(cut_s, ends) and not any(cut_s < s < cut_s + 0.5 for s in starts)
        assert data["alignment"]["max_onset_error_ms"] <= 1000 * TOLERANCE_S


def _cut_alone(p: Plan) -> bool:
    return any(e.action in CUTTING and e.response_turn is None for e in p.events)


def _cut_and_response(p: Plan) -> bool:
    return any(e.action in CUTTING and e.response_turn is not None for e in p.events)


def test_user_turns_start_where_clean_input_wav_does(written: Written) -> None:
    index = first(lambda p: bool(p.events), DRY)
    _, directory = written(index, "dry")
    data = load(directory)
    assert data["acoustics"]["noise"] == "none" and data["acoustics"]["rt60_s"] is None
    regions = onsets(read_wav(directory / "clean_input.wav"))
    starts = [r.start / 16000 for r in regions]
    in_events = {e["turn"] for e in data["events"]}
    floor = [
        t for t in data["turns"] if t["speaker"] != "assistant" and t["index"] not in in_events
    ]
    for t in floor:
        assert near(t["start_s"], starts) and near(t["planned_start_s"], starts)
        assert near(t["end_s"], [r.end / 16000 for r in regions])
    for s in starts:  # nothing else is in the clean input: no event turn, no noise
        assert any(abs(s - t["start_s"]) <= TOLERANCE_S for t in floor)


def _has_event(kind: str) -> Callable[[Plan], bool]:
    return lambda p: any(e.kind == kind for e in p.events)


def heard_frames(difference: NDArray[np.float32]) -> NDArray[np.float64]:
    """Centres (s) of the 10 ms frames (1 ms hop) of ``difference`` above HEARD_DBFS."""
    x = difference.astype(np.float64)
    energy = np.concatenate([[0.0], np.cumsum(x * x)])
    starts = np.arange(0, x.size - 160 + 1, 16)
    level = 10 * np.log10((energy[starts + 160] - energy[starts]) / 160 + 1e-20)
    return (starts[level > HEARD_DBFS] + 80) / 16000


@pytest.mark.parametrize("config", ["smoke", "dry"])
def test_event_windows_are_where_input_and_clean_input_differ(
    written: Written, config: str
) -> None:
    kinds = {"background", "backchannel", "interruption", "other_directed"}
    chosen = DRY if config == "dry" else SMOKE
    indices = {first(_has_event(kind), chosen) for kind in kinds}
    checked = 0
    for index in sorted(indices):
        _, directory = written(index, config)
        data = load(directory)
        difference = read_wav(directory / "input.wav") - read_wav(directory / "clean_input.wav")
        heard = heard_frames(difference)
        windows = sorted(tuple(e["window_s"]) for e in data["events"])
        merged: list[list[float]] = []  # windows that touch are one stretch of sound
        for a, b in windows:
            if merged and a <= merged[-1][1] + 0.011:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        inside = np.zeros(heard.size, bool)
        for a, b in merged:
            mine = heard[(heard >= a - TOLERANCE_S) & (heard <= b + TOLERANCE_S)]
            assert (
                mine.size and abs(mine[0] - a) <= TOLERANCE_S and abs(mine[-1] - b) <= TOLERANCE_S
            )
            inside |= (heard >= a - TOLERANCE_S) & (heard <= b + TOLERANCE_S)
            checked += 1
        assert inside.all(), f"heard outside every window at {heard[~inside][:5]}"
        for e in data["events"]:  # a window starts where its turn does
            turn = data["turns"][e["turn"]]
            assert abs(e["window_s"][0] - turn["start_s"]) <= TOLERANCE_S
    assert checked >= 3


# --- bytes ---------------------------------------------------------------------------------------
def test_the_same_sample_is_the_same_bytes(tmp_path: Path) -> None:
    index = first(lambda p: p.group == "video" and bool(p.events))
    a = generate_sample(SMOKE, index, SEED, tmp_path / "a")
    b = generate_sample(SMOKE, index, SEED, tmp_path / "b")
    other = generate_sample(SMOKE, index + 1, SEED, tmp_path / "a")
    assert a == b and a.to_json() == b.to_json()
    files = sorted(p.name for p in (tmp_path / "a" / a.path).parent.iterdir())
    assert "video.avi" in files and len(files) == 5
    for name in files:
        first_bytes = (tmp_path / "a" / a.path).parent.joinpath(name).read_bytes()
        assert first_bytes == (tmp_path / "b" / b.path).parent.joinpath(name).read_bytes(), name
    assert other.sha256 != a.sha256
    assert (tmp_path / "a" / other.path).parent.joinpath("input.wav").read_bytes() != (
        tmp_path / "a" / a.path
    ).parent.joinpath("input.wav").read_bytes()
    again = generate_sample(SMOKE, index, SEED, tmp_path / "a")  # written over, whole
    assert again == a and sorted(p.name for p in (tmp_path / "a" / "samples").iterdir()) == sorted(
        [a.sample_id, other.sample_id]
    )


def test_an_interrupted_write_leaves_no_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = first(lambda p: p.group == "video")

    def killed(*args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(sample_module, "write_frames", killed)
    with pytest.raises(KeyboardInterrupt):
        generate_sample(SMOKE, index, SEED, tmp_path)
    assert list((tmp_path / "samples").iterdir()) == []


def test_an_unwritable_output_is_an_error_saying_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "samples").write_text("not a directory")
    with pytest.raises(SampleError, match="writable"):
        generate_sample(SMOKE, first(lambda p: p.duration_s <= 10), SEED, tmp_path)


# --- the schema ----------------------------------------------------------------------------------
def test_the_schema_refuses_broken_trajectories(written: Written) -> None:
    _, directory = written(first(lambda p: p.category == "delegation"))
    good = load(directory)
    validate(good)
    assert schema() == json.loads(SCHEMA_PATH.read_text("utf-8"))
    breaks: list[Callable[[dict[str, Any]], None]] = [
        lambda d: d.pop("chunks"),
        lambda d: d.update(extra=1),
        lambda d: d["chunks"][0].update(decision="shout"),
        lambda d: d["turns"][0].update(start_s=-1.0),
        lambda d: d["events"][0].update(window_s=[1.0]) if d["events"] else d.update(v=2),
        lambda d: d["delegations"][0].update(item_id="XYZ"),
        lambda d: d["files"].update(video="movie.mp4"),
        lambda d: d["alignment"].update(max_onset_error_ms=80.0),
        lambda d: d["chunks"][1].pop("frame"),
    ]
    for spoil in breaks:
        broken = copy.deepcopy(good)
        spoil(broken)
        with pytest.raises(TrajectoryError):
            validate(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, json.loads(SCHEMA_PATH.read_text("utf-8")),
                                cls=jsonschema.Draft202012Validator)  # fmt: skip


# --- a fixed assistant voice, read back from a written set ---------------------------------------
def test_every_assistant_turn_of_a_set_speaks_the_fixed_voice(tmp_path: Path) -> None:
    """speech.assistant_voice: the set records it, every assistant turn was planned with it
    and assistant.wav holds its speech; no one else speaks with it, although it is in the
    people's list too."""
    config = parse_config(
        {
            **PRESETS["smoke"],
            "samples": 3,
            "speech": {"assistant_voice": "flite:kal16", "flite_voices": ["kal", "kal16"]},
            "output": {"full_duplex_bench": False, "timeline_plots": 0},
        }
    )
    out = tmp_path / "set"
    runner.run(config, out, SEED)
    made = load_config(out / "config.toml")
    assert made.speech.assistant_voice == "flite:kal16"
    kal16 = tts.Voice("flite", "kal16", rate_wpm=170, pitch=50)  # the middle of the ranges
    records = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert len(records) == 3
    for record in records:
        directory = (out / record["path"]).parent
        data = load(directory)
        # the plan the sample was realized from holds each turn's voice
        plan = plan_sample(made, data["index"], data["seed"], data["attempt"])
        spoken = [(t.speaker, plain_text(t.text)) for t in plan.turns]
        assert spoken == [(t["speaker"], t["text"]) for t in data["turns"]]
        assistant = read_wav(directory / "assistant.wav")
        gain = 10 ** (data["levels"]["assistant_gain_db"] / 20)
        for turn, written_turn in zip(plan.turns, data["turns"], strict=True):
            if turn.speaker != "assistant":
                assert (turn.voice.engine, turn.voice.name) != ("flite", "kal16")
                continue
            assert (turn.voice.engine, turn.voice.name) == ("flite", "kal16")
            at = round(written_turn["planned_start_s"] * SAMPLE_RATE)
            expected = tts.render(tts_text(turn.text), kal16).audio * gain
            if written_turn["cut_at_s"] is not None:  # up to the cut's fade
                cut = round(written_turn["cut_at_s"] * SAMPLE_RATE) - at - CUT_FADE_SAMPLES
                expected = expected[:cut]
            heard = assistant[at : at + expected.size]
            np.testing.assert_allclose(heard, expected, atol=2 / 32767)
