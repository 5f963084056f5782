"""Results over talk (evaluation/talk_on.py, scripts/results-over-talk): a real datagen
set (``delegation_set``, conftest) spliced with the user talking on at its first result,
runs read back, and the script end to end on the shipped engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from venus.datagen.fdb import read_wav
from venus.errors import EvaluationError
from venus.evaluation.talk_on import main, splice, talked_over

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000  # datagen.fdb.RATE_HZ


def frames(path: Path) -> int:
    capture = cv2.VideoCapture(str(path))
    count = 0
    while capture.read()[0]:
        count += 1
    capture.release()
    return count


def answered(folder: Path) -> list[int]:
    traj = json.loads((folder / "trajectory.json").read_text())
    return [d["result_chunk"] for d in traj["delegations"] if d["result_chunk"] is not None]


def test_the_user_talks_on_where_the_first_result_comes(
    delegation_set: Path, tmp_path: Path
) -> None:
    out = tmp_path / "spliced"
    wanted = [f for f in sorted(delegation_set.glob("samples/*")) if answered(f)]
    assert wanted, "the fixture set should answer a call somewhere"
    assert splice(delegation_set, out, talk_s=5) == len(wanted)
    videos = 0
    assert len((out / "index.jsonl").read_text().splitlines()) == len(wanted)
    for src in wanted:
        dst = out / "samples" / src.name
        traj = json.loads((src / "trajectory.json").read_text())
        spliced = json.loads((dst / "trajectory.json").read_text())
        at = min(answered(src)) * RATE
        assert spliced["talk_on"] == {"from_chunk": min(answered(src)), "seconds": 5}
        assert spliced["duration_s"] == traj["duration_s"] + 5
        before, after = read_wav(src / "input.wav"), read_wav(dst / "input.wav")
        assert len(after) == len(before) + 5 * RATE
        assert np.array_equal(after[:at], before[:at])  # as it was up to the result
        assert np.array_equal(after[at + 5 * RATE :], before[at:])  # and after the talk
        first = next(t for t in traj["turns"] if t["speaker"] == "user")
        start = round(first["start_s"] * RATE)
        talk = after[at : at + 5 * RATE]
        assert np.array_equal(talk[:RATE], before[start : start + RATE])  # the user's voice
        assert (dst / "clean_input.wav").is_symlink()
        if traj["files"]["video"]:  # the camera holds still through the talk
            assert frames(dst / "video.avi") == frames(src / "video.avi") + 5
            videos += 1
    assert videos, "the fixture set should have a video sample with a result"


def test_a_set_without_answered_calls_is_refused(tmp_path: Path) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "index.jsonl").write_text("")
    with pytest.raises(EvaluationError, match="no delegation sample with a completed result"):
        splice(tmp_path / "set", tmp_path / "out")
    assert main(["splice", str(tmp_path / "absent"), str(tmp_path / "out")]) == 1


def write_run(run: Path, sample: str, chunks: list[tuple[str, bool]]) -> None:
    """A run's timeline: per chunk (decision, a result offered at its boundary)."""
    folder = run / "samples" / sample
    folder.mkdir(parents=True)
    rows = [{"index": k, "decision": d, "results": [{"item_id": "a", "tokens": 9}] if r else []}
            for k, (d, r) in enumerate(chunks)]  # fmt: skip
    (folder / "timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_runs_read_back_say_which_results_were_read_over_the_user(tmp_path: Path) -> None:
    data = tmp_path / "set"
    for name in ("over", "waits", "late"):
        folder = data / "samples" / name
        folder.mkdir(parents=True)
        traj = {"talk_on": {"from_chunk": 2, "seconds": 4}}  # talk in chunks 2-5
        (folder / "trajectory.json").write_text(json.dumps(traj))
    run = tmp_path / "run"
    quiet, said = ("listen", False), ("speak", False)
    write_run(run, "over", [quiet, quiet, quiet, ("speak", True), said, quiet, quiet])
    write_run(run, "waits", [quiet, quiet, quiet, ("listen", True), quiet, quiet, said])
    write_run(run, "late", [quiet, ("listen", True), quiet, quiet, quiet, quiet, ("speak", True)])
    assert talked_over(data, run).__dict__ == {
        "samples": 3, "offered_in_talk": 2, "read_over": 1, "offered_after": 1,
    }  # fmt: skip
    with pytest.raises(EvaluationError, match="no run of a sample"):
        talked_over(data, tmp_path / "nothing")


@pytest.mark.slow
def test_the_script_runs_each_wait_on_the_shipped_engines(
    delegation_set: Path, tmp_path: Path
) -> None:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "VENUS": str(bin_dir / "venus"), "PYTHON": sys.executable,
           "WAITS": "0 600", "TALK_S": "6"}  # fmt: skip
    done = subprocess.run([str(ROOT / "scripts" / "results-over-talk"), str(delegation_set),
                           str(tmp_path / "w")], capture_output=True, text=True, env=env,
                          timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    n = len((tmp_path / "w" / "set" / "index.jsonl").read_text().splitlines())
    table = (tmp_path / "w" / "results-over-talk.md").read_text().splitlines()
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1:] for r in table[2:]}
    assert set(rows) == {"wait-0", "wait-600"} and all(int(r[0]) == n for r in rows.values())
    for wait in ("wait-0", "wait-600"):
        report = json.loads((tmp_path / "w" / wait / "delegation.json").read_text())
        assert f"idle wait {wait[5:]} s" in report["system"]


def test_a_result_offered_early_is_talked_on_where_it_is_said(tmp_path: Path) -> None:
    """A set whose results come while the user talks (datagen's ``talk_on_p`` and
    ``early_offer_p``): the talk goes in where the reference starts to say the result,
    the announcement, not at the chunk it was offered in."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    config = parse_config(
        {
            "samples": 2,
            "duration": {"min_s": 12.0, "max_s": 20.0},
            "mix": {"group": {"video": 0.0, "audio": 1.0},
                    "category": {"offline_understanding": 0.0, "proactive_duplex": 0.0,
                                 "delegation": 1.0}},
            "delegation": {"talk_on_p": 1.0, "early_offer_p": 1.0},
            "output": {"full_duplex_bench": False, "timeline_plots": 0},
        }
    )  # fmt: skip
    run(config, tmp_path / "set", seed=1)
    splice(tmp_path / "set", tmp_path / "spliced", talk_s=3)
    early = 0
    for src in sorted((tmp_path / "set").glob("samples/*")):
        traj = json.loads((src / "trajectory.json").read_text())
        offered = min(answered(src))
        said = next(
            k for k, c in enumerate(traj["chunks"]) if k >= offered and c["decision"] != "listen"
        )
        spliced = json.loads(
            (tmp_path / "spliced" / "samples" / src.name / "trajectory.json").read_text()
        )
        assert spliced["talk_on"]["from_chunk"] == said
        early += said > offered
    assert early, "a result of the set should have been offered early (seed 1)"
