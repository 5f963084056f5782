"""`venus train --init CKPT`: a run that starts where a checkpoint ended (its weights and
its tokenizer), refuses one of another preset, and resumes only with the same --init."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from venus.train.config import TrainConfig, TrainConfigError


def quick(steps: int, **kw: object) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=2, warmup_steps=1, checkpoint_every=2,
                       validation=0.34, threads=1, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_a_warm_started_run_begins_where_the_checkpoint_ended(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.train.loop import train

    first = train(quick(2), small_set, tmp_path / "first", lambda _s: None)
    second = train(quick(2, learning_rate=1e-4), small_set, tmp_path / "second",
                   lambda _s: None, init=tmp_path / "first")  # fmt: skip
    # The same validation split, weights and tokens: step 0 of the second is the first's end.
    assert second.baseline == pytest.approx(first.metrics)
    cold = train(quick(2, learning_rate=1e-4), small_set, tmp_path / "cold", lambda _s: None)
    assert cold.baseline != pytest.approx(first.metrics)
    tokens = (tmp_path / "first" / "tokenizer.json").read_text()
    assert (tmp_path / "second" / "train" / "tokenizer.json").read_text() == tokens
    assert (tmp_path / "second" / "tokenizer.json").read_text() == tokens
    with pytest.raises(TrainConfigError, match=r"another recipe, data, voice, --init"):
        train(quick(2, learning_rate=1e-4), small_set, tmp_path / "second", lambda _s: None)


def test_an_init_of_another_preset_or_no_checkpoint_is_refused(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.train.loop import train

    train(quick(2), small_set, tmp_path / "tiny", lambda _s: None)
    with pytest.raises(TrainConfigError, match=r"--init .*tiny: audio_encoder\..* is \(.*\) there"):
        train(quick(1, preset="small"), small_set, tmp_path / "small", lambda _s: None,
              init=tmp_path / "tiny")  # fmt: skip
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainConfigError, match=r"--init .*empty: no tokenizer\.json"):
        train(quick(1), small_set, tmp_path / "x", lambda _s: None, init=tmp_path / "empty")
    (tmp_path / "bare").mkdir()  # a tokenizer, and a config.json cut short
    shutil.copy(tmp_path / "tiny" / "tokenizer.json", tmp_path / "bare")
    (tmp_path / "bare" / "config.json").write_text("{")
    with pytest.raises(TrainConfigError, match=r"--init .*bare: cannot be read .*not valid JSON"):
        train(quick(1), small_set, tmp_path / "y", lambda _s: None, init=tmp_path / "bare")
