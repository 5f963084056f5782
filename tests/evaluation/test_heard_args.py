"""`python -m venus.evaluation.heard_args`: a delegation run's free argument values split by
how the listening head heard the request, on a real `venus eval delegation` report of a
generated set, with transcripts written as `venus validate --transcripts` writes them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from venus.evaluation.asr import normalise_text
from venus.evaluation.heard_args import edits_to_nearest, how_heard, main


@pytest.mark.parametrize(
    ("value", "text", "edits"),
    [
        ("15", "set a timer for 15 seconds", 0),
        ("apples", "add aples to the list", 1),  # a deletion
        ("apples", "add apxles to the list", 1),  # a substitution: one edit, not two
        ("coffee", "hs0 u ou shpppinng wlus", 5),
        ("milk", "", 4),
        ("", "anything", 0),
    ],
)
def test_edits_to_the_nearest_stretch_of_the_text(value: str, text: str, edits: int) -> None:
    assert edits_to_nearest(value, text) == edits


def test_exact_near_and_far() -> None:
    assert how_heard("dish soap", "add dish soap to the list") == "exact"
    assert how_heard("15", "set a timer for 150 seconds") == "near"  # inside a word
    assert how_heard("15", "set timer for he15 secons") == "near"  # within a word
    assert how_heard("dish soap", "add dish sap to the list") == "near"  # one in nine
    assert how_heard("dish soap", "add dsh sp to the list") == "far"  # three in nine
    assert how_heard("15", "set a timer for 50 seconds") == "far"


def _turns(data: Path, heard: Callable[[str], str], out: Path) -> Path:
    """A `venus validate --transcripts` file for every user turn of ``data``."""
    lines = []
    for folder in sorted((data / "samples").iterdir()):
        t = json.loads((folder / "trajectory.json").read_text())
        for u in t["turns"]:
            if u["speaker"] == "user":
                said = normalise_text(u["text"])
                lines.append({"sample_id": t["sample_id"], "start_s": u["start_s"],
                              "end_s": u["end_s"], "said": said, "heard": heard(said),
                              "cer": 0.0})  # fmt: skip
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


def _rows(said: str) -> dict[str, list[int]]:
    """The printed table's rows: how -> [values, right]."""
    rows = {}
    for line in said.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0] in ("exact", "near", "far"):
            rows[cells[0]] = [int(cells[1]), int(cells[2].split()[0])]
    return rows


def test_values_of_a_real_report_split_by_how_they_were_heard(
    delegation_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main as venus

    run = tmp_path / "run"
    assert venus(["eval", "delegation", "--data", str(delegation_set), "--out", str(run),
                  "--reference"]) == 0  # fmt: skip
    capsys.readouterr()
    right = _turns(delegation_set, lambda said: said, tmp_path / "right.jsonl")
    values = tmp_path / "values.json"
    assert main([str(run), str(right), str(delegation_set), "--json", str(values)]) == 0
    rows = _rows(capsys.readouterr().out)
    n = rows["exact"][0]
    assert n > 0 and rows == {"exact": [n, n], "near": [0, 0], "far": [0, 0]}
    listed: list[dict[str, Any]] = json.loads(values.read_text())
    assert len(listed) == n
    assert all(f" {v['value']} " in f" {v['said']} " for v in listed)
    assert not any(v["argument"].endswith(".action") for v in listed)  # enumerated: left out

    # heard as nothing: every value far off; one call's value wrong in the report
    deaf = _turns(delegation_set, lambda _said: "", tmp_path / "deaf.jsonl")
    report = json.loads((run / "delegation.json").read_text())
    first = listed[0]
    sample = next(s for s in report["samples"] if s["sample_id"] == first["sample_id"])
    key = first["argument"].split(".", 1)[1]
    pair = next(p for p in sample["pairs"] if key in p["right_by_argument"])
    pair["right_by_argument"][key] = False
    (run / "delegation.json").write_text(json.dumps(report))
    assert main([str(run), str(deaf), str(delegation_set), "--examples", "1"]) == 0
    said = capsys.readouterr().out
    assert _rows(said) == {"exact": [0, 0], "near": [0, 0], "far": [n, n - 1]}
    assert f"far: {first['argument']} " in said and "heard ''" in said

    # turns the transcripts do not hold are counted apart, not guessed
    right.write_text("")
    assert main([str(run), str(right), str(delegation_set)]) == 0
    assert f"({n} values in turns the transcripts do not hold)" in capsys.readouterr().out


def test_bad_inputs_are_named(
    delegation_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = tmp_path / "t.jsonl"
    turns.write_text('{"sample_id": "x"}\n')
    assert main([str(tmp_path / "nowhere"), str(turns), str(delegation_set)]) == 1
    assert "nowhere/delegation.json: cannot be read as JSON" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "delegation.json").write_text('{"samples": []}')
    assert main([str(run), str(turns), str(delegation_set)]) == 1
    assert "t.jsonl:1: not a `venus validate --transcripts` line" in capsys.readouterr().err
