"""Where `venus train` runs: the device it resolves (a clear error for one torch cannot
use), batches moved whole onto the model's device, and samples loaded in several
processes equal to those loaded in one. Training on a real GPU is checked on a GPU
machine (docs/training-log.md, "Fifth round"); here torch's CUDA answers are monkeypatched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.layouts import byte_builder

from venus.train.config import TrainConfigError


def test_samples_loaded_in_processes_equal_those_loaded_in_one(small_set: Path) -> None:
    from venus.train.data import load_examples, read_index

    build = byte_builder()
    records = read_index(small_set)
    seen: list[tuple[int, int]] = []
    one = load_examples(small_set, records, build, image_size=32)
    many = load_examples(small_set, records, build, image_size=32, jobs=3,
                         progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert seen == [(n, len(records)) for n in range(1, len(records) + 1)]
    assert [e.sample_id for e in many] == [r["sample_id"] for r in records]
    for a, b in zip(one, many, strict=True):
        assert a.layout == b.layout and a.chunks == b.chunks and a.crops == b.crops
        assert a.frame_index == b.frame_index and a.heard == b.heard
        np.testing.assert_array_equal(a.mel, b.mel)
        assert (a.frames is None) == (b.frames is None)
        if a.frames is not None and b.frames is not None:
            np.testing.assert_array_equal(a.frames, b.frames)


def test_a_batch_moves_every_tensor_and_its_speech_rows(small_set: Path) -> None:
    from venus.train.batch import collate
    from venus.train.data import load_examples, read_index
    from venus.train.speech_batch import SpeechBatch

    batch = collate(load_examples(small_set, read_index(small_set)[:2], byte_builder(),
                                  image_size=32))  # fmt: skip
    assert batch.to(torch.device("cpu")) is batch  # already there: no copy
    rows = torch.ones(2, 3, dtype=torch.long)
    batch.speech = SpeechBatch(rows[:, 0], rows, rows, rows, rows)
    meta = batch.to(torch.device("meta"))
    tensors = {name: value for name, value in vars(meta).items() if isinstance(value, torch.Tensor)}
    assert {"ids", "mel", "frames", "frame_offset", "mask"} <= set(tensors)
    assert all(t.device.type == "meta" for t in tensors.values()), tensors.keys()
    assert meta.speech is not None
    assert all(t.device.type == "meta" for t in vars(meta.speech).values())
    assert meta.heard == batch.heard and meta.chunks == batch.chunks
    assert batch.ids.device.type == "cpu"  # the original stays


def test_devices_resolve_or_say_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from venus.train.loop import resolve_device

    said: list[str] = []
    assert resolve_device("cpu", said.append) == torch.device("cpu")
    assert said == ["train: on the CPU"]
    with pytest.raises(TrainConfigError, match=r"--device 'gpu0': not a device"):
        resolve_device("gpu0")
    with pytest.raises(TrainConfigError, match=r"--device 'mps': venus train runs on cpu or cuda"):
        resolve_device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(TrainConfigError, match=r"--device cuda: this torch .* sees no CUDA GPU"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _d: "Test GPU")
    assert resolve_device("auto", said.append) == torch.device("cuda")
    assert said[-1] == "train: on cuda (Test GPU)"
    with pytest.raises(TrainConfigError, match=r"--device cuda:1: this machine has 1 CUDA GPU"):
        resolve_device("cuda:1")


def test_the_cli_refuses_a_bad_device_or_jobs(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main

    base = ["train", "--data", str(small_set), "--out", str(tmp_path / "ck")]
    assert main([*base, "--device", "mps"]) == 1
    err = capsys.readouterr().err
    assert "--device 'mps': venus train runs on cpu or cuda" in err
    assert "loading samples" not in err  # refused before the set is read
    assert main([*base, "--jobs", "-2"]) == 1
    assert "--jobs -2: use 0 (one per CPU) or more" in capsys.readouterr().err
    assert not (tmp_path / "ck" / "config.json").exists()


def test_a_sample_that_cannot_be_read_in_a_process_is_named(
    small_set: Path, tmp_path: Path
) -> None:
    import shutil

    from venus.train.data import TrainDataError, load_examples, read_index

    data = tmp_path / "set"
    shutil.copytree(small_set, data)
    records = read_index(data)
    bad = records[3]["sample_id"]
    (data / "samples" / bad / "trajectory.json").write_text("{", "utf-8")
    with pytest.raises(TrainDataError, match=rf"{bad}/trajectory\.json: cannot be read"):
        load_examples(data, records, byte_builder(), image_size=0, jobs=2)
