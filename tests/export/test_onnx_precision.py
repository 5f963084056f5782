"""`venus export --precision int4` of tiny-audio, and float16 graphs.

One int4 export per module (tiny-audio, so it also shows an audio frontend has no
vision_encoder); the fp16 checks convert a single freshly exported backbone graph. The
full fp16 export with --verify is marked slow, and so is the module: the int4 export with
--verify takes about 80 s.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from venus.engines.manifest import Manifest, load_manifest
from venus.export.checkpoint import load_model
from venus.export.model.venus import VenusModel
from venus.export.onnx.exporter import export_graph
from venus.export.onnx.inputs import random_inputs
from venus.export.onnx.precision import INT4_BLOCK, convert_fp16, save_proto
from venus.export.onnx.reference import reference
from venus.export.onnx.session import open_session, run_session
from venus.export.onnx.specs import graph_specs
from venus.export.onnx.verify import check_component

pytestmark = pytest.mark.slow

VENUS = Path(sys.executable).with_name("venus")


@dataclass(frozen=True)
class Exported:
    root: Path
    manifest: Manifest
    model: VenusModel
    run: subprocess.CompletedProcess[str]


def venus(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), *args], cwd=cwd, capture_output=True, text=True, timeout=240, check=False
    )


@pytest.fixture(scope="module")
def int4(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    base = tmp_path_factory.mktemp("onnx-int4")
    init = venus("init", "--config", "tiny-audio", "--out", "ckpt", cwd=base)
    assert init.returncode == 0, init.stderr
    run = venus("export", "ckpt", "--out", "engines", "--precision", "int4", "--verify", cwd=base)
    assert run.returncode == 0, run.stderr
    model = load_model(base / "ckpt")
    assert isinstance(model, VenusModel)
    return Exported(base / "engines", load_manifest(base / "engines"), model, run)


def test_an_audio_frontend_export_has_no_vision_encoder(int4: Exported) -> None:
    m = int4.manifest
    assert m.frontend == "audio" and m.precision == "int4"
    assert "vision_encoder" not in m.components
    assert not (int4.root / "vision_encoder.onnx").exists()
    assert (m.schedule.vision_tokens, m.schedule.image_size) == (0, 0)


def test_int4_quantises_backbone_and_speech_decoder_only(int4: Exported) -> None:
    for name, entry in int4.manifest.components.items():
        graph = onnx.load(str(int4.root / entry.graph), load_external_data=False).graph
        nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
        if name in ("backbone", "speech_decoder"):
            assert entry.precision == "int4"
            assert len(nbits) >= 7 * 2  # q, k, v, o, gate, up, down per layer (+ LM head)
            attrs = {a.name: a.i for a in nbits[0].attribute}
            assert (attrs["bits"], attrs["block_size"]) == (4, INT4_BLOCK)
            weights = {i.name for i in graph.initializer}
            assert not [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
        else:
            assert entry.precision == "fp32" and not nbits
        assert all(t.dtype in ("float32", "int64") for t in entry.inputs)


@pytest.mark.parametrize("component", ["backbone", "speech_decoder"])
def test_int4_graphs_run_on_the_cpu_provider(int4: Exported, component: str) -> None:
    check = check_component(int4.root, int4.manifest, component, int4.model, seed=3)
    assert check.result == "measured"
    assert 0 < check.rel < 0.5  # measured and reported, not held to a bar


def test_int4_verify_reports_errors_and_decode_agreement(int4: Exported) -> None:
    lines = int4.run.stdout.splitlines()
    assert any(line.startswith("backbone") and line.endswith("measured") for line in lines)
    assert any(line.startswith("vocoder") and line.endswith("pass") for line in lines)
    assert any("decode, 50 steps (int4)" in line and "top-1 agreement" in line for line in lines)


def test_fp16_keeps_rotary_positions_in_float32(int4: Exported, tmp_path: Path) -> None:
    """Positions past 2048 are not float16 numbers: the converted graph computes them in
    float32, so its error does not grow with the position (float16 positions: ~1e-2)."""
    spec = next(s for s in graph_specs(int4.model) if s.name == "backbone")
    files = export_graph(spec, int4.model.cfg, tmp_path)
    model = convert_fp16(onnx.load(str(tmp_path / files[0])))
    save_proto(model, tmp_path / "fp16.onnx", "fp16.onnx.data")
    session = open_session(tmp_path / "fp16.onnx")
    assert {i.type for i in session.get_inputs()} == {"tensor(float16)", "tensor(int64)"}
    gen = torch.Generator().manual_seed(5)
    for start in (0, 30_000):
        inputs = random_inputs(
            spec, int4.model.cfg, {"batch": 1, "sequence": 8, "past_sequence": 0}, gen
        )
        inputs["position_ids"] = inputs["position_ids"] + start
        ref = reference("backbone", int4.model, inputs)["logits"].double().numpy()
        got = run_session(session, inputs)["logits"]
        assert got.dtype == np.float16
        assert np.abs(got - ref).max() / np.abs(ref).max() <= 2e-3


def test_fp16_export_verifies_on_cpu(tmp_path: Path) -> None:
    assert venus("init", "--config", "tiny-audio", "--out", "ckpt", cwd=tmp_path).returncode == 0
    run = venus(
        "export", "ckpt", "--out", "engines", "--precision", "fp16", "--verify", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    m = load_manifest(tmp_path / "engines")
    assert {e.precision for e in m.components.values()} == {"fp16"}
    assert m.components["backbone"].inputs[0].dtype == "float16"
    rows = [line for line in run.stdout.splitlines() if line.split()[1:2] == ["fp16"]]
    assert len(rows) == 6 and all(r.endswith("measured") for r in rows)
