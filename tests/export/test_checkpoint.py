"""Checkpoint directories: `venus init`, loading, and clear errors for broken ones."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from venus.errors import ExportError
from venus.export.checkpoint import INDEX, CheckpointWriter, iter_checkpoint, load_model
from venus.export.model.config import PRESETS, load_config

VENUS = Path(sys.executable).with_name("venus")


def venus_init(out: Path, preset: str = "tiny", seed: int = 0) -> None:
    subprocess.run(
        [str(VENUS), "init", "--config", preset, "--seed", str(seed), "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    venus_init(out, seed=3)
    return out


def digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_init_writes_a_loadable_checkpoint(tiny: Path) -> None:
    assert load_config(tiny / "config.json") == PRESETS["tiny"]()
    index = json.loads((tiny / INDEX).read_text())
    prefixes = {name.split(".", 1)[0] for name in index["weight_map"]}
    assert prefixes == {
        "audio_encoder",
        "vision_encoder",
        "backbone",
        "speech_decoder",
        "flow_decoder",
        "vocoder",
    }
    # Each shard holds one component, named after it.
    for name, file in index["weight_map"].items():
        assert file.startswith(name.split(".", 1)[0] + "-")
    model = load_model(tiny)
    assert model.cfg.name == "tiny"
    # Readable by other users (the service), like every other file written.
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in tiny.iterdir())
    total = sum(p.stat().st_size for p in tiny.glob("*.safetensors"))
    assert total < 20e6, "tiny must stay a few MB"


def test_same_seed_same_bytes_other_seed_other_weights(tiny: Path, tmp_path: Path) -> None:
    venus_init(tmp_path / "again", seed=3)
    assert digests(tmp_path / "again") == digests(tiny)
    venus_init(tmp_path / "other", seed=4)
    assert (
        digests(tmp_path / "other")["backbone-00001.safetensors"]
        != digests(tiny)["backbone-00001.safetensors"]
    )


def test_audio_frontend_has_no_vision_tensors(tmp_path: Path) -> None:
    venus_init(tmp_path / "a", preset="tiny-audio")
    names = json.loads((tmp_path / "a" / INDEX).read_text())["weight_map"]
    assert not any(n.startswith("vision_encoder.") for n in names)
    assert load_model(tmp_path / "a").vision_encoder is None


def test_missing_shard_names_the_file(tiny: Path, tmp_path: Path) -> None:
    broken = copy(tiny, tmp_path / "b")
    (broken / "vocoder-00001.safetensors").unlink()
    with pytest.raises(
        ExportError, match=r"vocoder-00001\.safetensors: shard is missing \(it holds vocoder\."
    ):
        list(iter_checkpoint(broken))


def _rewrite(path: Path, name: str, tensor: torch.Tensor) -> None:
    tensors = load_file(str(path))
    tensors[name] = tensor
    save_file(tensors, str(path))


def test_wrong_shape_names_tensor_and_file(tiny: Path, tmp_path: Path) -> None:
    broken = copy(tiny, tmp_path / "b")
    shard = broken / "backbone-00001.safetensors"
    _rewrite(shard, "backbone.norm.weight", torch.ones(7))
    with pytest.raises(
        ExportError,
        match=r"backbone-00001\.safetensors: tensor backbone\.norm\.weight "
        r"has shape \(7,\), expected \(64,\)",
    ):
        list(iter_checkpoint(broken))


def test_wrong_dtype_names_tensor_and_file(tiny: Path, tmp_path: Path) -> None:
    broken = copy(tiny, tmp_path / "b")
    shard = broken / "backbone-00001.safetensors"
    _rewrite(shard, "backbone.norm.weight", torch.ones(64, dtype=torch.float16))
    with pytest.raises(
        ExportError,
        match=r"tensor backbone\.norm\.weight has dtype torch\.float16, expected float32",
    ):
        list(iter_checkpoint(broken))


def test_truncated_shard_names_the_file(tiny: Path, tmp_path: Path) -> None:
    broken = copy(tiny, tmp_path / "b")
    shard = broken / "audio_encoder-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(ExportError, match=r"audio_encoder-00001\.safetensors: unreadable shard"):
        list(iter_checkpoint(broken))


def test_missing_tensor_is_named(tiny: Path, tmp_path: Path) -> None:
    broken = copy(tiny, tmp_path / "b")
    index = json.loads((broken / INDEX).read_text())
    del index["weight_map"]["backbone.layers.1.mlp.up_proj.weight"]
    (broken / INDEX).write_text(json.dumps(index))
    with pytest.raises(
        ExportError, match=r"tensor backbone\.layers\.1\.mlp\.up_proj\.weight is missing"
    ):
        list(iter_checkpoint(broken))


def test_mismatched_config_is_caught(tiny: Path, tmp_path: Path) -> None:
    broken = copy(tiny, tmp_path / "b")
    data = json.loads((broken / "config.json").read_text())
    data["model"]["backbone"]["intermediate_size"] = 96
    (broken / "config.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match=r"mlp\.(gate|up|down)_proj\.weight has shape"):
        list(iter_checkpoint(broken))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["model"]["backbone"].update(hidden_sise=3), r"model\.backbone\.hidden_sise"),
        (lambda d: d.update(version=99), "config version 99 is not supported"),
        (lambda d: d.update(format="other"), "not a Venus model config"),
    ],
)
def test_bad_config_json(tiny: Path, tmp_path: Path, edit: object, message: str) -> None:
    broken = copy(tiny, tmp_path / "b")
    data = json.loads((broken / "config.json").read_text())
    edit(data)  # type: ignore[operator]
    (broken / "config.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match=message):
        load_model(broken)


def test_writer_splits_large_components_into_shards(tiny: Path, tmp_path: Path) -> None:
    cfg = load_config(tiny / "config.json")
    writer = CheckpointWriter(tmp_path / "s", cfg, max_shard_bytes=64 * 1024)
    for name, tensor in iter_checkpoint(tiny):
        component, rest = name.split(".", 1)
        writer.add(component, rest, tensor)
    writer.finish()
    shards = sorted(p.name for p in (tmp_path / "s").glob("backbone-*.safetensors"))
    assert len(shards) > 1
    a, b = load_model(tiny), load_model(tmp_path / "s")
    for (na, ta), (nb, tb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert na == nb and torch.equal(ta, tb)


def test_writer_refuses_a_non_empty_directory(tiny: Path) -> None:
    with pytest.raises(ExportError, match="already holds a checkpoint"):
        CheckpointWriter(tiny, load_config(tiny / "config.json"))


def test_the_manifest_records_how_a_checkpoint_was_trained(tmp_path: Path) -> None:
    """`venus train`'s train/metrics.json and recipe.toml become the manifest's ``trained``;
    a checkpoint without them was never trained; a broken record is named, not skipped."""
    from venus.export.onnx.manifest import training_record

    assert training_record(tmp_path) is None
    (tmp_path / "train").mkdir()
    recipe = b'[model]\npreset = "small"\n[train]\nsteps = 40\n'
    (tmp_path / "train" / "recipe.toml").write_bytes(recipe)
    metrics = tmp_path / "train" / "metrics.json"
    metrics.write_text(json.dumps({"step": 20, "validation": {"text_accuracy": 0.123456,
                                                             "decisions": 9}}))  # fmt: skip
    record = training_record(tmp_path)
    assert record == {
        "by": "venus train", "step": 20, "steps": 40, "preset": "small",
        "recipe_sha256": hashlib.sha256(recipe).hexdigest(),
        "recipe": {"model": {"preset": "small"}, "train": {"steps": 40}},
        "validation": {"text_accuracy": 0.1235}, "init": None,
    }  # fmt: skip
    started = {"path": "/elsewhere/listen", "step": 7, "recipe": {"train": {"steps": 7}}}
    metrics.write_text(json.dumps({"step": 20, "validation": {}, "init": started}))
    # what the run started from (`--init`), without the other machine's path
    assert training_record(tmp_path)["init"] == {"step": 7, "recipe": {"train": {"steps": 7}}}  # type: ignore[index]
    assert "voice" not in training_record(tmp_path)  # type: ignore[operator]
    # the voice it spoke with (`venus train --voice`): its step and codebook hash
    spoke = {"step": 6000, "units": "0123456789abcdef"}
    metrics.write_text(json.dumps({"step": 20, "validation": {}, "voice": spoke}))
    assert training_record(tmp_path)["voice"] == spoke  # type: ignore[index]
    metrics.write_text(json.dumps({"step": 20, "validation": {}, "voice": "a voice"}))
    with pytest.raises(ExportError, match=r"metrics\.json: cannot be read.*voice"):
        training_record(tmp_path)
    metrics.write_text(json.dumps({"step": 20, "validation": {}}))
    (tmp_path / "train" / "recipe.toml").write_text("[train\n")
    with pytest.raises(ExportError, match=r"recipe\.toml: cannot be read"):
        training_record(tmp_path)
    metrics.write_text(json.dumps({"step": 20, "validation": {"text_accuracy": None}}))
    with pytest.raises(ExportError, match=r"metrics\.json: cannot be read"):
        training_record(tmp_path)
    metrics.write_text("{not json")
    with pytest.raises(ExportError, match=r"metrics\.json: cannot be read"):
        training_record(tmp_path)
