"""scripts/make-venus-tiny's set knobs (TRAIN_SET_WITH, HELDOUT_WITH): each reaches the
sets it names through `venus datagen --set`. The sets are made for real (a few samples);
the stages after them (the voice, training) are passed over by a stand-in for `venus`
that runs only `datagen`, since training takes hours. A resumed run keeps a closed-loop
choice made after both checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from venus.datagen.config import load_config

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case $1 in
  datagen) exec "$REAL_VENUS" "$@" ;;
  train-voice) exit 0 ;;
  train) [ -n "${TRAIN_PASSES:-}" ] || exit 3 ;;
  *) exit 3 ;;
esac
"""


def _make(work: Path, tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    venus = tmp_path / "venus"
    venus.write_text(STAND_IN)
    venus.chmod(0o755)
    env = {**os.environ, "VENUS": str(venus), "PYTHON": sys.executable,
           "CALLS": str(tmp_path / "calls"),
           "REAL_VENUS": str(Path(sys.executable).with_name("venus")),
           "SAMPLES": "2", "VAL_SAMPLES": "2", "HELDOUT_WITH": "samples=2",
           **env_extra}  # fmt: skip
    return subprocess.run(
        [str(ROOT / "scripts" / "make-venus-tiny"), str(work)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_the_set_knobs_reach_the_sets_they_name(tmp_path: Path) -> None:
    work = tmp_path / "work"
    out = _make(work, tmp_path,
                TRAIN_SET_WITH="events.reply_outlasts_s=2.0 delegation.talk_on_p=0.15",
                HELDOUT_WITH="samples=2 events.reply_outlasts_s=2.0")  # fmt: skip
    assert out.returncode == 3, out.stderr  # the stand-in stops at the first training stage
    made = {name: load_config(work / name / "config.toml")
            for name in ("train-set", "val-set", "heldout")}  # fmt: skip
    for name, config in made.items():
        assert config.events.reply_outlasts_s == 2.0, name
        assert config.samples == 2, name
    assert made["train-set"].delegation.talk_on_p == 0.15
    assert made["val-set"].delegation.talk_on_p == 0.15  # the training set's config, cut
    assert made["val-set"].output.full_duplex_bench
    assert made["heldout"].delegation.talk_on_p == 0.0  # only what HELDOUT_WITH names
    # the shipped recipe's listening stage: the 6,000-step one (the fortieth round)
    last = (tmp_path / "calls").read_text().splitlines()[-1]
    assert last.startswith("train --config train/recipes/venus-tiny-listen-long.toml"), last


def test_the_shipped_recipe_is_held_out_on_the_900_sample_set_by_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HELDOUT_WITH"}
    stand_in = tmp_path / "venus"
    stand_in.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS"\n'
                        'case $* in *heldout-set.toml*) exit 3 ;; esac\nexit 0\n')  # fmt: skip
    stand_in.chmod(0o755)
    env |= {"VENUS": str(stand_in), "PYTHON": sys.executable, "CALLS": str(tmp_path / "calls")}
    # the shipped recipe's held-out set, and another recipe's: the config's own 300 samples
    for recipe, settings in (("venus-tiny-wide-gpu.toml", " --set events.reply_outlasts_s=2.0"
                              " --set samples=900 --out "),
                             ("venus-tiny-wide-long.toml", " --out ")):  # fmt: skip
        out = subprocess.run([str(ROOT / "scripts" / "make-venus-tiny"), str(tmp_path / recipe)],
                             env=env | {"RECIPE": recipe}, cwd=ROOT, capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
        assert out.returncode == 3, out.stderr
        heldout = (tmp_path / "calls").read_text().splitlines()[-1]
        assert f"--seed 11 --jobs 2{settings}" in heldout, heldout


def test_a_bad_setting_stops_the_script_before_anything_is_made(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "SAMPLES": "2",
           "VENUS": str(Path(sys.executable).with_name("venus")),
           "TRAIN_SET_WITH": "events.reply_outlast=2.0"}  # fmt: skip
    out = subprocess.run([str(ROOT / "scripts" / "make-venus-tiny"), str(tmp_path / "work")],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert out.returncode == 1
    assert "events.reply_outlast: unknown key; did you mean reply_outlasts_s?" in out.stderr
    assert not (tmp_path / "work" / "train-set").exists()


def test_reuse_links_an_earlier_runs_stages_and_they_refuse_other_settings(
    tmp_path: Path,
) -> None:
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    assert _make(first, tmp_path).returncode == 3  # the sets made, stopped at training
    out = _make(second, tmp_path, REUSE=str(first))
    assert out.returncode == 3, out.stderr
    for stage in ("train-set", "heldout", "val-set"):
        assert (second / stage).is_symlink(), stage
        assert (second / stage).resolve() == (first / stage).resolve(), stage
    assert out.stderr.count("2 of 2 samples already written; resuming") == 3, out.stderr
    assert not (second / "voice").exists()  # the first run has none (the stand-in's voice)
    # a training set of other settings is not passed off as the earlier one
    before = (first / "train-set" / "config.toml").read_text()
    out = _make(third, tmp_path, REUSE=str(first), TRAIN_SET_WITH="delegation.talk_on_p=0.15")
    assert out.returncode == 1, out.stderr
    assert "was made with another config (delegation.talk_on_p = 0.0 there, 0.15 now)" in out.stderr
    assert (first / "train-set" / "config.toml").read_text() == before
    out = _make(tmp_path / "fourth", tmp_path, REUSE=str(tmp_path / "nowhere"))
    assert out.returncode == 1
    assert "REUSE=" in out.stderr and "is not a directory" in out.stderr


def test_a_resumed_run_keeps_a_closed_loop_choice_newer_than_both_checkpoints(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    ckpt = work / "checkpoint"
    (ckpt / "last").mkdir(parents=True)
    for config in (ckpt / "config.json", ckpt / "last" / "config.json"):
        config.write_text("{}")
        os.utime(config, (1_000_000, 1_000_000))
    choice = work / "closed-loop" / "choice.json"
    choice.parent.mkdir()
    choice.write_text(json.dumps({"chosen": str(ckpt / "last")}))
    calls = tmp_path / "calls"
    out = _make(work, tmp_path, TRAIN_PASSES="1", LISTEN="")
    assert out.returncode == 3, out.stderr  # the stand-in stops at the export
    assert "the closed loop stands" in out.stderr
    assert (
        calls.read_text()
        .splitlines()[-1]
        .startswith(f"export {ckpt / 'last'} --out {work}/engines")
    )
    # a checkpoint written after the choice: the closed loop runs again (its first export)
    os.utime(ckpt / "last" / "config.json")
    calls.unlink()
    out = _make(work, tmp_path, TRAIN_PASSES="1", LISTEN="")
    assert out.returncode == 3, out.stderr
    assert "the closed loop stands" not in out.stderr
    assert calls.read_text().splitlines()[-1].startswith(f"export {ckpt} --out {work}/closed-loop/")
