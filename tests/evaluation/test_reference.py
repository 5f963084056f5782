"""The data's own assistant as a system: its outputs are the source samples' assistant
tracks cut like the inputs, scored by the same rules, and the posed overlaps it passes
are the ones a rate can reach 100% on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from venus.daemon.frontend.outputs import read_wav_mono, write_outputs
from venus.evaluation.metrics import DEFAULT_RULES, Behaviour
from venus.evaluation.reference import (
    REFERENCE,
    passes,
    reference_scores,
    write_reference_outputs,
)
from venus.evaluation.score import find_samples, score_sample
from venus.evaluation.source import source_sample
from venus.evaluation.summary import POSED, render_markdown, summarize


def test_each_cut_gets_the_datas_assistant_from_the_cuts_offset(
    video_set: Path, tmp_path: Path
) -> None:
    refs = find_samples(video_set)
    assert write_reference_outputs(refs, tmp_path / "ref") == tmp_path / "ref"
    for ref in refs:
        output, rate = read_wav_mono(tmp_path / "ref" / ref.task / ref.sample_id / "output.wav")
        cut, cut_rate = read_wav_mono(ref.folder / "input.wav")
        assert (output.size, rate) == (cut.size, cut_rate)  # aligned with the input
        sample = source_sample(ref)
        assert sample is not None
        track, track_rate = read_wav_mono(sample.folder / "assistant.wav")
        assert track_rate == rate
        start = round(sample.offset_s * rate)
        piece = track[start : start + cut.size]
        assert np.abs(output[: piece.size] - piece).max() < 1e-4  # 16-bit PCM rounding
        assert not output[piece.size :].any()


def test_the_posed_overlaps_it_passes_are_the_ones_rated_where_the_data_passes(
    video_set: Path, tmp_path: Path
) -> None:
    refs = find_samples(video_set)
    scores = reference_scores(refs, tmp_path / "ref", DEFAULT_RULES)
    assert scores is not None and len(scores) == len(refs)
    passable = passes(scores)
    for s in scores:
        assert s.overlap is not None
        want = Behaviour.RESPOND if s.scenario == "interruption" else Behaviour.RESUME
        assert passable[(s.task, s.sample_id)] == (s.overlap.label == want)
    # the data's assistant, rated where it passes: 100% by construction, as posed: less
    # or equal; another system (always silent here) is rated by its own labels
    report = summarize(REFERENCE, video_set, tmp_path / "ref", scores, DEFAULT_RULES, passable)
    for sc in report.scenarios:
        assert sc.passable_samples is not None and sc.passable_samples <= sc.posed_samples
        if sc.passable_samples:
            assert sc.headline_rate_passable == 1.0
        want = Behaviour.RESPOND if sc.scenario == "interruption" else Behaviour.RESUME
        posed = [s for s in scores if s.task == sc.task and s.action in POSED[want]]
        assert sc.posed_samples == len(posed)
        assert sc.passable_samples == sum(passable[(s.task, s.sample_id)] for s in posed)
    silent = tmp_path / "silent"
    for ref in refs:
        write_outputs(silent / ref.task / ref.sample_id, ref.folder / "input.wav",
                      np.zeros(16000, np.float32), 16000)  # fmt: skip
    quiet = [score_sample(r, silent / r.task / r.sample_id / "output.wav") for r in refs]
    other = summarize("silent", video_set, silent, quiet, DEFAULT_RULES, passable)
    for sc in other.scenarios:
        if sc.passable_samples:
            assert sc.headline_rate_passable == 0.0  # silence carries nothing on
    md = render_markdown([other, report])
    assert any(line.endswith("| where the data passes | where it passes and was heard |")
               for line in md.splitlines())  # fmt: skip
    assert all(sc.heard_samples is None for sc in report.scenarios)  # no first replies given
    # where it heard the question too (its first reply the data's): every other cut here
    heard = {f"{s.task}/{s.sample_id}": i % 2 == 0 for i, s in enumerate(scores)}
    both = summarize(REFERENCE, video_set, tmp_path / "ref", scores, DEFAULT_RULES, passable,
                     heard)  # fmt: skip
    for sc in both.scenarios:
        want = Behaviour.RESPOND if sc.scenario == "interruption" else Behaviour.RESUME
        fair = [s for s in scores if s.task == sc.task and s.action in POSED[want]
                and passable[(s.task, s.sample_id)]]  # fmt: skip
        assert sc.heard_samples == sum(heard[f"{s.task}/{s.sample_id}"] for s in fair)
        assert sc.headline_rate_heard == (1.0 if sc.heard_samples else None)
    assert any(sc.heard_samples for sc in both.scenarios)


def test_without_the_datas_assistant_there_is_nothing_to_pass(
    video_set: Path, tmp_path: Path
) -> None:
    alone = tmp_path / "alone"
    shutil.copytree(video_set / "full_duplex_bench", alone / "full_duplex_bench")
    refs = find_samples(alone)
    assert reference_scores(refs, tmp_path / "ref") is None
    assert not (tmp_path / "ref").exists()
    quiet = [score_sample(r, r.folder / "input.wav") for r in refs]
    report = summarize("x", alone, alone, quiet, DEFAULT_RULES)
    assert all(s.passable_samples is None for s in report.scenarios)
    overlaps = render_markdown([report]).split("## Overlap behaviour")[1].split("\n## ")[0]
    rows = [r for r in overlaps.splitlines() if r.startswith("| user_")]
    assert rows and all(r.rstrip(" |").endswith("| -") for r in rows)


def test_a_missing_assistant_track_is_an_error_naming_it(video_set: Path, tmp_path: Path) -> None:
    from venus.errors import EvaluationError

    broken = tmp_path / "set"
    shutil.copytree(video_set, broken)
    refs = find_samples(broken)
    sample = source_sample(refs[0])
    assert sample is not None
    (sample.folder / "assistant.wav").unlink()
    with pytest.raises(EvaluationError, match=r"assistant\.wav is missing"):
        write_reference_outputs(refs, tmp_path / "ref")


def test_eval_duplex_reports_the_datas_assistant_beside_the_policies(
    video_set: Path, tmp_path: Path
) -> None:
    venus = Path(sys.executable).with_name("venus")
    out = tmp_path / "run"
    done = subprocess.run(
        [str(venus), "eval", "duplex", "--data", str(video_set), "--out", str(out),
         "--policy", "always-continue", "--temperature", "0"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    reference = report["reference"]
    assert reference["system"] == REFERENCE and reference["scenarios"]
    for policy in report["policies"]:
        for sc in policy["scenarios"]:
            assert sc["passable_samples"] is not None and sc["heard_samples"] is not None
            assert sc["heard_samples"] <= sc["passable_samples"]
    md = (out / "report.md").read_text()
    assert f"| {REFERENCE} |" in md and "where the data passes" in md
    refs = find_samples(video_set)
    assert all((out / "reference" / r.task / r.sample_id / "output.wav").is_file() for r in refs)
