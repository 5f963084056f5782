"""``venus eval regrid`` on a real `venus datagen` set: every cut moved back to its source
sample's chunk grid holds the sample's own audio from that boundary, with the overlap
window shifted onto the same sound; bad cuts and an existing --out are errors."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from venus.cli import main
from venus.datagen.fdb import RATE_HZ, read_wav, write_wav
from venus.errors import EvaluationError
from venus.evaluation.regrid import regrid
from venus.evaluation.score import SampleRef, find_samples
from venus.evaluation.source import source_sample


@pytest.fixture(scope="module")
def cut_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three audio-group samples with overlap events and their Full-Duplex-Bench cuts."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    config = parse_config({
        "samples": 3, "duration": {"min_s": 14.0, "max_s": 20.0},
        "mix": {"group": {"video": 0.0, "audio": 1.0},
                "category": {"offline_understanding": 0.0, "proactive_duplex": 1.0,
                             "delegation": 0.0}},
        "output": {"full_duplex_bench": True, "timeline_plots": 0},
    })  # fmt: skip
    out = tmp_path_factory.mktemp("regrid") / "set"
    run(config, out, seed=3)
    return out


def meta(ref: SampleRef) -> dict[str, Any]:
    data = json.loads(ref.annotation.read_text())
    assert isinstance(data, dict)
    return data


def test_each_cut_moves_to_the_chunk_boundary_before_it_with_its_window(
    cut_set: Path, tmp_path: Path
) -> None:
    out = tmp_path / "grid"
    done = regrid(cut_set, out)
    before, after = find_samples(cut_set), find_samples(out)
    assert [(r.task, r.sample_id) for r in after] == [(r.task, r.sample_id) for r in before]
    assert done.moved + done.copied == len(before) and done.moved > 0
    shifts = []
    for old, new in zip(before, after, strict=True):
        was, now = meta(old), meta(new)
        source = source_sample(new)
        was_source = source_sample(old)
        assert source is not None and was_source is not None
        assert source.folder.resolve() == was_source.folder.resolve()
        offset = float(was["source"]["offset_s"])
        start = math.floor(offset + 0.001)
        assert source.offset_s == pytest.approx(start)
        shift = offset - start
        shifts.append(shift)
        control = read_wav(source.folder / "clean_input.wav")
        cut, moved = read_wav(old.folder / "input.wav"), read_wav(new.folder / "input.wav")
        lead = round(offset * RATE_HZ) - round(start * RATE_HZ)
        # the sample's audio without other events' speech before the cut (the control)
        at = round(start * RATE_HZ)
        assert np.array_equal(moved[:lead], control[at : at + lead])
        assert np.array_equal(moved[lead:], cut)  # the cut itself, whole, after the lead
        # clean_input: the cut's own, after the same lead (the event is not in the lead)
        clean = read_wav(new.folder / "clean_input.wav")
        assert np.array_equal(clean[lead:], read_wav(old.folder / "clean_input.wav"))
        assert np.array_equal(clean[:lead], moved[:lead])
        for key in ("timestamps", "planned_timestamps"):
            assert now[key] == pytest.approx([t + shift for t in was[key]], abs=0.0015)
        assert now["duration_s"] == pytest.approx(was["duration_s"] + shift, abs=0.0015)
        # the window covers the same sound
        t0, t1 = was["timestamps"]
        n0 = now["timestamps"][0]
        a, b = round(t0 * RATE_HZ), round(t1 * RATE_HZ)
        c = round(n0 * RATE_HZ)
        assert np.array_equal(moved[c : c + (b - a) - 32], cut[a : a + (b - a) - 32])
    assert done.mean_shift_s == pytest.approx(np.mean([s for s in shifts if s > 0]))
    # the manifests say the same offsets
    for task in {r.task for r in after}:
        manifest = json.loads((out / "full_duplex_bench" / task / "manifest.json").read_text())
        for entry in manifest["samples"]:
            ref = next(r for r in after if (r.task, r.sample_id) == (task, entry["id"]))
            assert entry["source"]["offset_s"] == meta(ref)["source"]["offset_s"]


def test_a_cut_that_is_not_its_sources_audio_is_named(cut_set: Path, tmp_path: Path) -> None:
    copy = tmp_path / "set"
    shutil.copytree(cut_set, copy)
    ref = find_samples(copy)[0]
    audio = read_wav(ref.folder / "input.wav").copy()
    audio[: RATE_HZ // 10] += 1000
    write_wav(ref.folder / "input.wav", audio)
    with pytest.raises(
        EvaluationError, match=rf"{ref.sample_id}/input\.wav: not .*cannot be moved"
    ):
        regrid(copy, tmp_path / "grid")
    assert not (tmp_path / "grid").exists()  # nothing half-written left behind


def test_a_cut_without_a_source_is_copied_and_out_is_never_overwritten(
    cut_set: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "set"
    shutil.copytree(cut_set, copy)
    ref = find_samples(copy)[0]
    data = meta(ref)
    del data["source"]
    ref.annotation.write_text(json.dumps(data))
    out = tmp_path / "grid"
    done = regrid(copy, out)
    moved = next(r for r in find_samples(out) if r.sample_id == ref.sample_id)
    for name in ("input.wav", "clean_input.wav", "metadata.json"):
        assert (moved.folder / name).read_bytes() == (ref.folder / name).read_bytes()
    assert done.copied >= 1
    with pytest.raises(EvaluationError, match="exists"):
        regrid(copy, out)


def test_the_command_says_what_it_moved(
    cut_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "grid"
    assert main(["eval", "regrid", "--data", str(cut_set), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "cuts moved back to the chunk grid" in said and str(out) in said
    assert (out / "samples").resolve() == (cut_set / "samples").resolve()
