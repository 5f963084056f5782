"""`venus validate`: a checkpoint's teacher-forced figures on another set are the figures
`venus train` reports when that set is its own validation split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from venus.train.config import TrainConfig, TrainConfigError


def _subset(data: Path, ids: set[str], out: Path) -> Path:
    """A set holding only the samples ``ids`` of ``data`` (the files linked, not copied)."""
    (out / "samples").mkdir(parents=True)
    lines = [line for line in (data / "index.jsonl").read_text().splitlines() if line]
    kept = [line for line in lines if json.loads(line)["sample_id"] in ids]
    (out / "index.jsonl").write_text("\n".join(kept) + "\n")
    for sample in ids:
        (out / "samples" / sample).symlink_to(data / "samples" / sample)
    return out


def test_validate_on_the_runs_own_split_gives_the_runs_figures(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main
    from venus.train.data import read_index
    from venus.train.loop import train
    from venus.train.sets import split

    cfg = TrainConfig(steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2,
                      validation=0.34, threads=1, max_text_tokens=6, ctc_weight=1.0)  # fmt: skip
    ck = tmp_path / "ck"
    train(cfg, small_set, ck, lambda _l: None)
    _train, held = split(read_index(small_set), cfg.validation, cfg.seed)
    subset = _subset(small_set, {r["sample_id"] for r in held}, tmp_path / "held")
    out = tmp_path / "figures.json"
    assert main(["validate", str(ck), "--data", str(subset), "--json", str(out)]) == 0
    assert f"{ck} on {subset}: control accuracy" in capsys.readouterr().out
    mine = json.loads(out.read_text())
    theirs = json.loads((ck / "train" / "metrics.json").read_text())["validation"]
    assert "heard_cer" in theirs and mine.keys() == theirs.keys()  # the run's listening head
    assert mine == pytest.approx(theirs, rel=1e-5)
    _check_transcripts(ck, subset, tmp_path / "heard.jsonl", mine)
    assert main(["validate", str(ck), "--data", str(small_set), "--by-category",
                 "--json", str(out)]) == 0  # fmt: skip
    every = json.loads(out.read_text())
    parts = every["by_category"]
    assert sum(p["samples"] for p in parts.values()) == len(read_index(small_set))
    for key in ("decisions", "text_tokens", "replies", "heard_turns"):
        assert sum(p[key] for p in parts.values()) == every[key]  # the parts add up
    said = capsys.readouterr().out
    assert all(f"  {name} ({parts[name]['samples']} samples): control accuracy" in said
               for name in parts)  # fmt: skip
    state = ck / "train" / "state.pt"
    state.rename(tmp_path / "state.pt")  # a checkpoint copied out: no listening figures
    assert main(["validate", str(ck), "--data", str(subset), "--json", str(out)]) == 0
    assert "heard_cer" not in json.loads(out.read_text())
    assert "no train/state.pt beside the checkpoint" in capsys.readouterr().err
    assert main(["validate", str(ck), "--data", str(subset), "--transcripts", str(out)]) != 0
    assert "has no listening head" in capsys.readouterr().err
    (tmp_path / "state.pt").rename(state)
    # the text budget is the run's (6 tokens): the default 16 lays out other text targets
    (ck / "train" / "recipe.toml").unlink()
    assert main(["validate", str(ck), "--data", str(subset), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["text_tokens"] != theirs["text_tokens"]
    from venus.train.check import validate

    (ck / "train" / "metrics.json").write_text('{"step": 2, ')  # a run's record, cut short
    with pytest.raises(TrainConfigError, match=r"train/metrics\.json: cannot be read"):
        validate(ck, subset, lambda _l: None)


def _check_transcripts(ck: Path, data: Path, path: Path, figures: dict[str, float]) -> None:
    """`--transcripts`: a line per turn the head read, each a user turn of its sample's
    trajectory (its span and words), with the CER of what was heard; the turns add up to
    the figures' count and CER."""
    from venus.cli import main
    from venus.train.data import trajectory
    from venus.train.heard import character_errors, normalise

    assert main(["validate", str(ck), "--data", str(data), "--transcripts", str(path)]) == 0
    turns = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(turns) == figures["heard_turns"] > 0
    edits = chars = 0
    for t in turns:
        user = [u for u in trajectory(data, t["sample_id"])["turns"] if u["speaker"] == "user"]
        assert any(normalise(u["text"]) == t["said"] and u["start_s"] == pytest.approx(t["start_s"])
                   and u["end_s"] == pytest.approx(t["end_s"]) for u in user)  # fmt: skip
        e, c = character_errors(t["said"], t["heard"])
        assert t["cer"] == pytest.approx(e / c, abs=1e-4)
        edits, chars = edits + e, chars + c
    assert edits / chars == pytest.approx(figures["heard_cer"], rel=1e-6)


def test_val_data_trains_on_all_of_the_data_and_validates_on_the_other_set(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`venus train --val-data`: every sample of --data trains, every one of the other set
    validates (the figures `venus validate` gives on it), and a resume must name it again."""
    import tomli_w

    from venus.cli import main
    from venus.train.check import validate
    from venus.train.data import TrainDataError, read_index
    from venus.train.loop import train

    ids = sorted(r["sample_id"] for r in read_index(small_set))
    ours = _subset(small_set, set(ids[:4]), tmp_path / "ours")
    other = _subset(small_set, set(ids[4:]), tmp_path / "other")
    cfg = TrainConfig(steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2,
                      validation=0.34, threads=1, max_text_tokens=6, ctc_weight=1.0)  # fmt: skip
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(tomli_w.dumps(cfg.to_toml_dict()))
    ck = tmp_path / "ck"
    args = ["train", "--config", str(recipe), "--data", str(ours), "--out", str(ck)]
    assert main([*args, "--val-data", str(other), "--device", "cpu"]) == 0
    said = capsys.readouterr().err
    assert f"train: 4 samples to train on, the 2 of {other} to validate on" in said
    assert "loading samples 4/4" in said and "loading samples 2/2" in said
    theirs = json.loads((ck / "train" / "metrics.json").read_text())["validation"]
    mine = validate(ck, other, lambda _l: None)
    assert mine == pytest.approx(theirs, rel=1e-5)
    held = validate(ck, ours, lambda _l: None)  # not what the run validated on
    assert held["decisions"] != theirs["decisions"]
    # the state is the other set's: resuming without it, or with another, is refused
    for val in (None, ours):
        with pytest.raises(TrainConfigError, match=r"--val-data"):
            train(cfg, ours, ck, lambda _l: None, val_data=val)
    assert train(cfg, ours, ck, lambda _l: None, val_data=other).resumed_from == 2
    with pytest.raises(TrainDataError, match=r"--val-data \S+nowhere: no index\.jsonl"):
        train(cfg, ours, tmp_path / "ck2", lambda _l: None, val_data=tmp_path / "nowhere")


def test_validate_names_what_is_not_a_checkpoint(small_set: Path, tmp_path: Path) -> None:
    from venus.train.check import validate

    with pytest.raises(TrainConfigError, match=r"not a `venus train` checkpoint"):
        validate(tmp_path, small_set, lambda _l: None)
