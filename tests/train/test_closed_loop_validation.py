"""scripts/closed-loop-validation: checkpoints (and a run's last step beside its kept one)
exported and run in the closed loop on a validation set's cuts, and the one with the
highest mean rate as posed chosen (real datagen, a real run, real engines)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "closed-loop-validation"


def _run(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "VENUS": str(bin_dir / "venus"), "PYTHON": sys.executable,
           "WORK": str(work), "JOBS": "1", "LIMIT": "1"}  # fmt: skip
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=900, check=False)  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_kept_and_the_last_step_are_compared_on_the_cuts(tmp_path: Path) -> None:
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run
    from venus.train.config import TrainConfig
    from venus.train.loop import train

    mix = dict.fromkeys(("offline_understanding", "proactive_duplex", "delegation"), 0.0)
    data = tmp_path / "set"  # proactive-duplex samples with their cuts
    run(parse_config({
        "samples": 3, "duration": {"min_s": 20.0, "max_s": 25.0},
        "mix": {"category": mix | {"proactive_duplex": 1.0}},
        "output": {"full_duplex_bench": True, "timeline_plots": 0},
    }), data, seed=2)  # fmt: skip
    cuts = sorted((data / "full_duplex_bench").glob("*/*/metadata.json"))
    assert cuts
    cfg = TrainConfig(steps=4, batch_size=2, warmup_steps=1, checkpoint_every=1,
                      learning_rate=0.02, validation=0.5, threads=1, max_text_tokens=6,
                      keep="balanced_events")  # fmt: skip
    ck = tmp_path / "ck"
    train(cfg, data, ck, lambda _l: None)
    # a second checkpoint: a shorter run of the same recipe, kept to its last step
    other = tmp_path / "other"
    train(dataclasses.replace(cfg, keep="last", steps=2), data, other, lambda _l: None)
    work = tmp_path / "work"
    done = _run(work, str(data), str(ck), str(other))
    assert done.returncode == 0, done.stderr
    expected = [str(ck)] + ([str(ck / "last")] if (ck / "last").is_dir() else []) + [str(other)]
    choice = json.loads((work / "choice.json").read_text())
    assert list(choice["candidates"]) == expected
    means = {}
    for path, row in choice["candidates"].items():
        name = path.lstrip("/").replace("/", "-")
        report = json.loads((work / name / "eval" / "model" / "report.json").read_text())
        posed = {s["task"]: s["headline_rate_posed"] for s in report["scenarios"]
                 if s["headline_rate_posed"] is not None}  # fmt: skip
        assert {t: r["rate"] for t, r in row["scenarios"].items()} == posed
        assert row["mean"] == pytest.approx(sum(posed.values()) / max(len(posed), 1))
        means[path] = row["mean"]
        assert (work / name / "engines" / "manifest.json").is_file()
    best = max(means.values())
    assert choice["chosen"] == next(p for p in expected if means[p] == best)
    assert done.stdout.splitlines()[-1] == f"chosen: {choice['chosen']}"
    assert (work / "choice.md").read_text().splitlines() == done.stdout.splitlines()


def test_a_set_without_cuts_is_named(tmp_path: Path) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "index.jsonl").write_text("")
    (tmp_path / "ck").mkdir()
    done = _run(tmp_path / "work", str(tmp_path / "set"), str(tmp_path / "ck"))
    assert done.returncode == 1
    assert f"{tmp_path / 'set'} has no Full-Duplex-Bench cuts" in done.stderr


def test_a_missing_checkpoint_is_named(tmp_path: Path) -> None:
    (tmp_path / "set" / "full_duplex_bench").mkdir(parents=True)
    (tmp_path / "set" / "index.jsonl").write_text("")
    done = _run(tmp_path / "work", str(tmp_path / "set"), str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert f"{tmp_path / 'nowhere'} is not a checkpoint (no config.json)" in done.stderr
