"""Engines fixtures: a hand-built toy KV graph (no exporter needed) and real tiny engines.

``tiny_engine_dir`` is the session's shared export (``tiny_export`` in tests/conftest.py:
``venus init --config tiny --seed 0`` then ``venus export --verify``). Tests that corrupt
files work on a copy. To reuse ones built before (the export takes a minute), set
``VENUS_TEST_CHECKPOINT`` and ``VENUS_TEST_ENGINES`` to their directories.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import TinyExport
from onnx import TensorProto, helper, numpy_helper

from venus.engines.manifest import (
    ComponentEntry,
    Manifest,
    Schedule,
    TensorSpec,
    file_entry,
    write_manifest,
)
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines

TOY_WIDTH = 4
TOY_HIDDEN = 65536  # 4 x 65536 float32 = 1 MiB per weight: big enough for external data


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_export: TinyExport) -> Path:
    if given := os.environ.get("VENUS_TEST_CHECKPOINT"):
        return Path(given)
    return tiny_export.checkpoint


@pytest.fixture(scope="session")
def tiny_engine_dir(tiny_export: TinyExport) -> Path:
    if given := os.environ.get("VENUS_TEST_ENGINES"):
        return Path(given)
    return tiny_export.engines


@pytest.fixture
def engine_copy(tiny_engine_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny engines, free to corrupt."""
    return Path(shutil.copytree(tiny_engine_dir, tmp_path / "engines"))


def toy_kv_graph(root: Path, name: str = "toy") -> ComponentEntry:
    """A one-layer "KV-cached" graph in the engines' naming, with a 1 MiB weight pair.

    x [batch, 1, sequence, 4] -> present.0.key = past ++ x, present.0.value = past ++ 2x
    (along the sequence), total = sum of present.0.key over the sequence [batch, 1, 4],
    and side = x @ w1 @ w2 (weights only there to be optimised and saved).
    """
    kv = ["batch", 1, "past_sequence", TOY_WIDTH]
    new = ["batch", 1, "sequence", TOY_WIDTH]
    present = ["batch", 1, "total_sequence", TOY_WIDTH]
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((TOY_WIDTH, TOY_HIDDEN), np.float32), "w1"),
        numpy_helper.from_array(np.zeros((TOY_HIDDEN, TOY_WIDTH), np.float32), "w2"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array([2], np.int64), "seq_axis"),
    ]
    nodes = [
        helper.make_node("Concat", ["past_key_values.0.key", "x"], ["present.0.key"], axis=2),
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Concat", ["past_key_values.0.value", "x2"], ["present.0.value"], axis=2),
        helper.make_node("ReduceSum", ["present.0.key", "seq_axis"], ["total"], keepdims=0),
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["side"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, new),
            helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, kv),
            helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, kv),
        ],
        [
            helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch", 1, TOY_WIDTH]),
            helper.make_tensor_value_info("side", TensorProto.FLOAT, new),
            helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, present),
            helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, present),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    root.mkdir(parents=True, exist_ok=True)
    onnx.save(model, root / f"{name}.onnx")

    def spec(n: str, shape: list[int | str]) -> TensorSpec:
        return TensorSpec(name=n, dtype="float32", shape=tuple(shape))

    return ComponentEntry(
        files=(file_entry(root, f"{name}.onnx"),),
        inputs=(
            spec("x", new),
            spec("past_key_values.0.key", kv),
            spec("past_key_values.0.value", kv),
        ),
        outputs=(
            spec("total", ["batch", 1, TOY_WIDTH]),
            spec("side", new),
            spec("present.0.key", present),
            spec("present.0.value", present),
        ),
        precision="fp32",
        layers=1,
        kv_heads=1,
        head_dim=TOY_WIDTH,
    )


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Path, ComponentEntry]:
    root = tmp_path / "toy-engine"
    return root, toy_kv_graph(root)


def toy_manifest(root: Path) -> Manifest:
    """An engine directory whose one component is the toy graph plus a data file."""
    entry = toy_kv_graph(root)
    (root / "toy.onnx.data").write_bytes(bytes(range(256)) * 64)
    entry = dataclasses.replace(entry, files=(*entry.files, file_entry(root, "toy.onnx.data")))
    schedule = Schedule(
        chunk_s=1.0,
        sample_rate_in=16000,
        hop_length=160,
        n_mels=80,
        mel_frames=100,
        audio_tokens=10,
        vision_tokens=0,
        image_size=0,
        speech_tokens=25,
        speech_codebook=6561,
        speech_end_token=6561,
        speech_start_token=6562,
        mel_frames_out=2,
        lookahead_tokens=3,
        prompt_frames=8,
        sample_rate_out=24000,
        hop_out=480,
    )
    manifest = Manifest(
        format="venus-engines",
        version=1,
        model="toy",
        frontend="audio",
        precision="fp32",
        backend="onnx",
        opset=17,
        special_tokens={},
        control_tokens=(),
        schedule=schedule,
        components={"toy": entry},
        source={},
        tools={},
    )
    write_manifest(root, manifest)
    return manifest


def age(root: Path, seconds: float = 3600.0) -> None:
    """Backdate every file under ``root``, as for engines installed a while ago."""
    past = time.time() - seconds
    for p in root.rglob("*"):
        os.utime(p, (past, past))


@pytest.fixture
def toy_engine(tmp_path: Path) -> tuple[Path, Manifest]:
    """A toy engine directory installed an hour ago (old mtimes), and its manifest."""
    root = tmp_path / "engine"
    manifest = toy_manifest(root)
    age(root)
    return root, manifest


@pytest.fixture
def fresh_toy_engine(tmp_path: Path) -> tuple[Path, Manifest]:
    """A toy engine directory written just now."""
    root = tmp_path / "engine"
    return root, toy_manifest(root)


@pytest.fixture(scope="session")
def engines(tiny_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Engines:
    """The tiny engines on CPU, caches in a private directory."""
    cache = tmp_path_factory.mktemp("engine-cache")
    return Engines.open(tiny_engine_dir, EngineOptions(providers=("cpu",), cache_dir=cache))


@pytest.fixture(scope="session")
def reference(tiny_checkpoint: Path) -> Any:
    """The torch reference ``VenusModel`` of the same checkpoint (float32, eval)."""
    from venus.export.checkpoint import load_model

    return load_model(tiny_checkpoint)
