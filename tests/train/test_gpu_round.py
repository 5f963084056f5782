"""scripts/gpu-round on the CPU (SKIP_ENV: the venus of this environment, no pack): real
datagen, a real listening stage and model run from the shipped recipes (cut to two
steps), packed as the device call returns them, and the errors it stops on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (JetPack 6)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-round"
QUICK = {"steps": 2, "batch_size": 2, "warmup_steps": 1, "checkpoint_every": 2,
         "max_text_tokens": 6}  # fmt: skip


def _quick(recipe: str, out: Path) -> None:
    """The shipped ``recipe`` (train/recipes/) cut to two steps of two, written to ``out``."""
    import tomli_w

    data = tomllib.loads((ROOT / "train" / "recipes" / recipe).read_text())
    data["train"] |= QUICK
    out.write_text(tomli_w.dumps(data))


def _round(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    base = {"SKIP_ENV": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp / "out"),
            "W": str(tmp / "w"), "N": "6", "NVAL": "4", "DEVICE": "cpu", "DEADLINE": "400",
            "VOICE": str(tmp / "voice"), "LISTEN_RECIPE": str(tmp / "listen.toml"),
            "RECIPE": str(tmp / "model.toml")}  # fmt: skip
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **base, **env}, timeout=600, check=False)  # fmt: skip


@pytest.mark.slow
def test_a_round_trains_both_stages_and_packs_them_in_parts(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.train.voice_config import parse_voice_config
    from venus.train.voice_run import train_voice

    _quick("venus-tiny-listen.toml", tmp_path / "listen.toml")
    _quick("venus-tiny-wide-gpu.toml", tmp_path / "model.toml")
    missing = _round(tmp_path, "start")
    assert missing.returncode == 1
    assert f"{tmp_path / 'voice'}/voice.json not found" in missing.stderr
    assert _round(tmp_path, "stop").returncode == 2
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "round.log").write_text("[1s] datagen: 6 samples\n")  # not ended
    running = _round(tmp_path, "start")
    assert running.returncode == 1 and "a round is running" in running.stderr
    (tmp_path / "w" / "ended").touch()  # an ended round is made again from nothing
    voice_cfg = parse_voice_config({
        "units": {"k": 32, "iterations": 5},
        "flow": {"steps": 1, "batch": 2, "warmup_steps": 1, "window_s": 2.0,
                 "d_model": 32, "ffn_dim": 64},
        "vocoder": {"kind": "griffin_lim", "iterations": 2},
        "train": {"checkpoint_every": 1, "threads": 1},
        "eval": {"utterances": 0},
    })  # fmt: skip
    train_voice(voice_cfg, small_set, tmp_path / "voice", lambda _l: None)

    done = _round(tmp_path, "start", TRAIN_SET_WITH="events.reply_outlasts_s=2.0")
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out"
    log = done.stdout
    assert "datagen: 6 samples (with events.reply_outlasts_s=2.0)" in log, log
    assert "the model" in log and "] ended" in log, log
    for made in ("train-set", "val-set"):  # both sets with the key (venus datagen --set)
        config = tomllib.loads((tmp_path / "w" / made / "config.toml").read_text())
        assert config["events"]["reply_outlasts_s"] == 2.0, made
    parts = sorted(out.glob("res.tgz.*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    whole = tmp_path / "res.tgz"
    whole.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(whole) as tar:
        tar.extractall(tmp_path / "back", filter="data")
    back = tmp_path / "back"
    assert json.loads((back / "listen" / "config.json").read_text())["model"]["name"] == "tiny"
    assert json.loads((back / "ckpt" / "config.json").read_text())["model"]["name"] == "tiny-wide"
    assert not (back / "listen" / "train" / "state.pt").exists()  # not needed there
    assert (back / "ckpt" / "train" / "state.pt").exists()  # the model's run can resume
    metrics = json.loads((back / "ckpt" / "train" / "metrics.json").read_text())
    assert metrics["step"] == 2 and metrics["init"]["path"] == str(tmp_path / "w" / "listen")
    assert metrics["init"]["recipe"]["train"]["listen_only"] is True
    assert "== " in (out / "logs.txt").read_text()

    again = _round(tmp_path, "collect", "1")  # a later call: the round has ended
    assert again.returncode == 0 and "] ended" in again.stdout
