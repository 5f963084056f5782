"""A `venus train` or `venus train-voice` stopped by SIGTERM or Ctrl-C (SIGINT) ends its
step and saves its state before it exits, so the same command goes on from that step, not
from the last checkpoint (train/stopping.py). Real parts: the CLI in its own process, a
real signal, the saved state.pt read back, and the resumed run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
import torch

from venus.train.config import TrainConfig

STEPS, EVERY = 400, 200  # far more steps than the test waits for; no checkpoint before the signal


def _steps_run(history: Path) -> int:
    if not history.is_file():
        return 0
    whole = history.read_text().split("\n")[:-1]  # not a line the run is writing now
    return sum("validation" not in json.loads(x) for x in whole if x.strip())


def _signal_after_steps(cmd: list[str], history: Path, sig: signal.Signals) -> tuple[int, str, str]:
    """Run ``cmd``, send ``sig`` once ``history`` holds three steps: (exit status, stdout,
    stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 240
        while _steps_run(history) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, "no step in 240 s"
            time.sleep(0.05)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, stdout, stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_the_step_in_hand_and_the_same_command_goes_on(
    small_set: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    from venus.train.loop import train

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        f"[train]\nsteps = {STEPS}\nbatch_size = 2\nwarmup_steps = 1\n"
        f"checkpoint_every = {EVERY}\nthreads = 1\n[data]\nvalidation = 0.34\n"
    )
    out = tmp_path / "ck"
    venus = Path(sys.executable).with_name("venus")
    cmd = [str(venus), "train", "--config", str(recipe), "--data", str(small_set)]
    cmd += ["--out", str(out)]
    status, stdout, stderr = _signal_after_steps(cmd, out / "train" / "history.jsonl", sig)
    assert status == 128 + sig, stderr
    state = torch.load(out / "train" / "state.pt", weights_only=False)
    step = int(state["step"])
    assert 3 <= step < EVERY, step  # the step in hand, not a checkpoint's
    assert f"train: {sig.name}: stopped at step {step}/{STEPS}, the state saved" in stderr
    assert _steps_run(out / "train" / "history.jsonl") == step
    assert "Traceback" not in stderr and "steps;" not in stdout  # no finished-run summary
    # the same recipe goes on from that step (one step more, in-process; another recipe
    # would be refused, so this is the one the CLI read)
    lines: list[str] = []
    cfg = TrainConfig(steps=STEPS, batch_size=2, warmup_steps=1, checkpoint_every=EVERY,
                      validation=0.34, threads=1)  # fmt: skip
    again = train(cfg, small_set, out, lines.append, stop_after=1)
    assert again.resumed_from == step and again.steps == step + 1, lines
    assert any(f"resuming {out} at step {step}/{STEPS}" in line for line in lines)


def test_a_second_signal_acts_as_it_did_before() -> None:
    """The first SIGTERM is caught; the next one reaches the handler that was there
    before (by default: the process ends); leaving the block puts it back."""
    from venus.train.stopping import StopRequest

    seen: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda s, _f: seen.append(s))
    try:
        with StopRequest() as stop:
            assert stop.signal is None
            signal.raise_signal(signal.SIGTERM)
            assert stop.signal is signal.SIGTERM and seen == []
            signal.raise_signal(signal.SIGTERM)
            assert seen == [signal.SIGTERM]
        with StopRequest() as stop:
            pass
        signal.raise_signal(signal.SIGTERM)  # outside the block: the earlier handler
        assert stop.signal is None and seen == [signal.SIGTERM, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_signal_stops_train_voice_at_the_step_in_hand(small_set: Path, tmp_path: Path) -> None:
    """The same for `venus train-voice`: SIGTERM, the step saved, the same recipe resumes
    from it."""
    from venus.train.voice_config import parse_voice_config
    from venus.train.voice_run import train_voice

    cfg = parse_voice_config({
        "data": {"validation": 0.34}, "units": {"k": 32, "iterations": 5},
        "flow": {"steps": STEPS, "batch": 2, "warmup_steps": 1, "window_s": 2.0,
                 "d_model": 32, "ffn_dim": 64},
        "vocoder": {"steps": STEPS, "batch": 2, "warmup_steps": 1, "segment_s": 0.4,
                    "channels": 16, "kernels": [3], "dilations": [1, 3]},
        "train": {"checkpoint_every": EVERY, "threads": 1}, "eval": {"utterances": 0},
    })  # fmt: skip
    recipe = tmp_path / "voice.toml"
    recipe.write_text(tomli_w.dumps(cfg.to_toml_dict()))
    out = tmp_path / "voice"
    venus = Path(sys.executable).with_name("venus")
    cmd = [str(venus), "train-voice", "--config", str(recipe), "--data", str(small_set)]
    cmd += ["--out", str(out)]
    history = out / "train" / "history.jsonl"
    status, stdout, stderr = _signal_after_steps(cmd, history, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, stderr
    step = int(torch.load(out / "train" / "state.pt", weights_only=False)["step"])
    assert 3 <= step < EVERY, step  # the step in hand, not a checkpoint's
    assert f"train-voice: SIGTERM: stopped at step {step}/{STEPS}, the state saved" in stderr
    assert _steps_run(history) == step
    assert "Traceback" not in stderr and "steps;" not in stdout
    lines: list[str] = []
    again = train_voice(cfg, small_set, out, lines.append, stop_after=1)
    assert again.resumed_from == step and again.steps == step + 1, lines
