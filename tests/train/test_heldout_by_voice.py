"""scripts/heldout-by-voice: the held-out set made again in each of its voices alone, the
same dialogues, and a checkpoint's figures on each (real datagen, a real 2-step run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (JetPack 6)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "heldout-by-voice"
VOICES = ["espeak-ng-en-gb+f2", "espeak-ng-en-us+f4", "flite-rms", "flite-slt"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "VENUS": str(bin_dir / "venus"), "PYTHON": sys.executable,
           "SAMPLES": "2"}  # fmt: skip
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)  # fmt: skip


@pytest.mark.slow
def test_each_voice_speaks_the_same_dialogues_and_is_scored_apart(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.train.config import TrainConfig
    from venus.train.loop import train

    cfg = TrainConfig(steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2,
                      validation=0.34, threads=1, max_text_tokens=6, ctc_weight=1.0)  # fmt: skip
    ck = tmp_path / "ck"
    train(cfg, small_set, ck, lambda _l: None)
    work = tmp_path / "by-voice"
    done = _run(str(ck), str(work))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "%" in line]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == VOICES
    assert (work / "ck.md").read_text().splitlines() == done.stdout.splitlines()
    figures = json.loads((work / "ck.json").read_text())
    assert list(figures) == VOICES and all(0 <= m["heard_cer"] <= 1 for m in figures.values())
    users = []
    for name in VOICES:
        speech = tomllib.loads((work / f"{name}.toml").read_text())["speech"]
        engine = "espeak-ng" if name.startswith("espeak-ng-") else "flite"
        voice = name.removeprefix(f"{engine}-")
        key = "espeak_voices" if engine == "espeak-ng" else "flite_voices"
        assert speech["engines"] == [engine] and speech[key] == [voice]
        assert speech["assistant_voice"] == "flite:kal16"  # the rest is the held-out config's
        sample = json.loads((work / name / "samples" / "11-000000" / "trajectory.json").read_text())
        users.append([t["text"] for t in sample["turns"] if t["speaker"] == "user"])
    assert users[0] and all(u == users[0] for u in users)  # the same dialogues
    # the sets are kept: a second checkpoint is scored on them without datagen
    again = _run(str(ck), str(work))
    assert again.returncode == 0 and "venus datagen" not in again.stderr
    assert "venus validate" in again.stderr


def test_a_missing_checkpoint_is_named(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "nowhere"), str(tmp_path / "work"))
    assert done.returncode == 1
    assert f"no checkpoint directory {tmp_path / 'nowhere'}" in done.stderr
