"""``python -m venus.train.reflow``: engines whose flow decoder is exported again from their
voice at another Euler step count. A tiny Griffin-Lim voice (``venus train-voice``, three
steps) and a checkpoint built with it, exported as ``venus export`` exports, are the
engines. At another count the copy loads, says its count, and its flow graph streams what
the torch reference integrates at that count; every other file is copied as it is. A voice
trained further is taken only beside the engines' own voice, and streams its own flow. A
voice that is not the engines' (trained further, alone; another shape; another codebook),
a count out of range and a change of nothing are refused by name, and nothing is
written."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support.voices import quick

from venus.engines.manifest import MANIFEST, load_manifest
from venus.engines.runners import Engines
from venus.errors import ExportError
from venus.train import reflow as rf
from venus.train.voice_id import units_sha


@dataclasses.dataclass(frozen=True)
class Made:
    voice: Path
    engines: Path


def _train_voice(
    data: Path, out: Path, steps: int, units: dict[str, Any] | None = None, **flow: Any
) -> Path:
    from venus.train.voice_config import parse_voice_config
    from venus.train.voice_run import train_voice

    doc = quick(steps, kind="griffin_lim").to_toml_dict()
    doc["flow"].update(flow)
    doc["units"].update(units or {})
    train_voice(parse_voice_config(doc), data, out, lambda _line: None)
    return out


@pytest.fixture(scope="module")
def made(small_set: Path, tmp_path_factory: pytest.TempPathFactory) -> Made:
    """A voice, and engines of the tiny preset with its flow decoder and vocoder."""
    from venus.export.checkpoint import save_model
    from venus.export.model.config import PRESETS
    from venus.export.model.venus import VenusModel
    from venus.export.onnx.build import export_engines
    from venus.train.voice import load_voice, load_voice_weights

    base = tmp_path_factory.mktemp("reflow")
    voice = _train_voice(small_set, base / "voice", 3)
    torch.manual_seed(0)
    model = VenusModel(load_voice(voice).model_config(PRESETS["tiny"]())).eval()
    load_voice_weights(model, voice)
    save_model(model, base / "ckpt")
    export_engines(model, base / "ckpt", base / "engines")
    return Made(voice, base / "engines")


def _stream(engines: Path, tokens: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``tokens`` [1, n] through the engines' flow runner, 25 at a time, the last final."""
    flow = Engines.open(engines).flow
    state, c = flow.new_state(), flow.chunk_tokens
    return np.concatenate([
        flow.step(tokens[:, i : i + c], state, final=i + c >= tokens.shape[1],
                  noise=noise[..., 2 * i : 2 * (i + c)])
        for i in range(0, tokens.shape[1], c)
    ], axis=2)  # fmt: skip


def _reference(voice: Path, steps: int, tokens: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The torch flow decoder of ``voice`` at ``steps`` Euler steps, whole utterance."""
    from safetensors.torch import load_file

    from venus.export.model.flow import FlowDecoder
    from venus.train.voice import FLOW_FILE, load_voice

    cfg = dataclasses.replace(load_voice(voice).flow, euler_steps=steps)
    flow = FlowDecoder(cfg).eval()
    flow.load_state_dict(load_file(str(voice / FLOW_FILE)))
    with torch.no_grad():
        mel = flow(torch.from_numpy(tokens), torch.from_numpy(noise))
    return mel.numpy()


def test_another_count_is_a_working_copy(
    made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eight"
    argv = [str(made.engines), "--voice", str(made.voice), "--euler-steps", "8", "--out", str(out)]
    assert rf.main(argv) == 0
    said = capsys.readouterr().out
    units = units_sha(made.voice)
    change = f"flow decoder of {made.voice.name} (step 3, units {units}), euler_steps 4 -> 8"
    assert change in said
    manifest = load_manifest(out)  # Engines.open below checks every file's hash
    assert manifest.model_config["model"]["flow"]["euler_steps"] == 8
    assert manifest.tools["reflow"] == change
    original = load_manifest(made.engines)
    assert manifest.components["flow_decoder"] != original.components["flow_decoder"]
    assert manifest.components["flow_decoder"].layers == 2  # its cache layout kept
    assert {k: v for k, v in manifest.components.items() if k != "flow_decoder"} == {
        k: v for k, v in original.components.items() if k != "flow_decoder"
    }
    for name in sorted(p.name for p in made.engines.iterdir()):
        if name not in ("flow_decoder.onnx", MANIFEST):
            assert (out / name).read_bytes() == (made.engines / name).read_bytes(), name
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 32, (1, 60), dtype=np.int64)  # two chunks and a short final one
    noise = rng.standard_normal((1, 80, 120)).astype(np.float32)
    eight, four = _stream(out, tokens, noise), _stream(made.engines, tokens, noise)
    assert eight.shape == four.shape == (1, 80, 120)
    want, was = _reference(made.voice, 8, tokens, noise), _reference(made.voice, 4, tokens, noise)
    tolerance = 1e-4 * np.abs(want).max()
    assert np.abs(eight - want).max() < tolerance
    assert np.abs(four - was).max() < tolerance
    # a voice of three steps barely moves its noise: the counts differ, but by little
    assert np.abs(eight - was).max() > 10 * tolerance


def test_a_voice_trained_further_needs_the_engines_voice(
    made: Made, small_set: Path, tmp_path: Path
) -> None:
    """Four steps rather than three: the same codebook, other flow weights. Alone it is
    refused; named with the engines' own voice it is taken, at the engines' count; a voice
    of another codebook is not."""
    further = _train_voice(small_set, tmp_path / "further", 4)
    with pytest.raises(ExportError, match="not the voice these engines were trained with"):
        rf.reflow(made.engines, further, tmp_path / "out", 8)
    assert not (tmp_path / "out").exists()
    manifest = rf.reflow(made.engines, further, tmp_path / "out", engines_voice=made.voice)
    assert manifest.model_config["model"]["flow"]["euler_steps"] == 4
    said = f"flow decoder of {further.name} (step 4, units {units_sha(further)}), euler_steps 4"
    assert manifest.tools["reflow"] == said
    rng = np.random.default_rng(6)
    tokens = rng.integers(0, 32, (1, 30), dtype=np.int64)
    noise = rng.standard_normal((1, 80, 60)).astype(np.float32)
    got, want = _stream(tmp_path / "out", tokens, noise), _reference(further, 4, tokens, noise)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    assert np.abs(got - _reference(made.voice, 4, tokens, noise)).max() > 1e-3 * np.abs(want).max()
    # another codebook, the same flow decoder's shape
    other = _train_voice(small_set, tmp_path / "other", 1, units={"k": 16})
    with pytest.raises(ExportError, match=r"its codebook is not .*'s, whose codes"):
        rf.reflow(made.engines, other, tmp_path / "o2", engines_voice=made.voice)
    with pytest.raises(ExportError, match="nothing would change"):
        rf.reflow(made.engines, made.voice, tmp_path / "o2", 4)
    assert not (tmp_path / "o2").exists()


def test_a_voice_of_another_shape_is_refused(made: Made, small_set: Path, tmp_path: Path) -> None:
    other = _train_voice(small_set, tmp_path / "wide", 1, d_model=64, ffn_dim=64)
    with pytest.raises(ExportError, match=r"not the shape of .* d_model 64 against 32$"):
        rf.reflow(made.engines, other, tmp_path / "out", 8)
    with pytest.raises(ExportError, match=r"voice\.json: no such file"):
        rf.reflow(made.engines, tmp_path, tmp_path / "out", 8)
    assert not (tmp_path / "out").exists()


def test_a_count_out_of_range_and_a_half_precision_graph_are_refused(
    made: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in (0, rf.MAX_EULER_STEPS + 1):
        argv = [str(made.engines), "--voice", str(made.voice), "--euler-steps", str(n),
                "--out", str(tmp_path / "out")]  # fmt: skip
        assert rf.main(argv) == 1
        assert capsys.readouterr().err == (
            f"reflow: --euler-steps {n}: expected 1 to {rf.MAX_EULER_STEPS}\n"
        )
    half = tmp_path / "half"
    shutil.copytree(made.engines, half)
    doc = json.loads((half / MANIFEST).read_text())
    doc["components"]["flow_decoder"]["precision"] = "fp16"
    (half / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ExportError, match="the flow_decoder is fp16; only an fp32 graph"):
        rf.reflow(half, made.voice, tmp_path / "out", 8)
    assert not (tmp_path / "out").exists()
