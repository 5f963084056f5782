"""``python -m venus.export.onnx.revocode``: the shipped engines' Griffin-Lim vocoder made
again at another round count from the engines alone. Each run first re-makes it at the
engines' own count and checks it gives their own output (a check that fails when the
stats are read wrong, below); at another count the copy loads, verifies, says its count,
streams speech that differs, and leaves every other file as it was. What it cannot re-make
(a trained vocoder, a graph of another make, stats read wrong, a count out of range, engines
without a model config) is refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import REPO, TinyExport

from venus.engines.manifest import MANIFEST, load_manifest
from venus.engines.runners import Engines
from venus.errors import ExportError
from venus.export.onnx import revocode as rv

SHIPPED = REPO / "demo" / "engines" / "tiny"


def _pcm(engines: Path, mel: np.ndarray) -> np.ndarray:
    e = Engines.open(engines)
    state = e.vocoder.new_state()
    return np.concatenate([e.vocoder.step(mel[..., i : i + 50], state) for i in (0, 50)], axis=1)


def _mel() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1, 80, 100)).astype(np.float32)


def test_another_count_is_a_working_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "four"
    assert rv.main([str(SHIPPED), "--iterations", "4", "--out", str(out)]) == 0
    assert "griffin_lim iterations 16 -> 4" in capsys.readouterr().out
    manifest = load_manifest(out)  # Engines.open below checks every file's hash
    assert manifest.model_config["model"]["vocoder"]["iterations"] == 4
    assert manifest.tools["revocode"] == "griffin_lim iterations 16 -> 4"
    shipped = load_manifest(SHIPPED)
    assert manifest.components["vocoder"] != shipped.components["vocoder"]
    assert {k: v for k, v in manifest.components.items() if k != "vocoder"} == {
        k: v for k, v in shipped.components.items() if k != "vocoder"
    }
    for name in sorted(p.name for p in SHIPPED.iterdir()):
        if name not in ("vocoder.onnx", MANIFEST):
            assert (out / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    four, sixteen = _pcm(out, _mel()), _pcm(SHIPPED, _mel())
    assert four.shape == sixteen.shape == (1, 100 * 480)
    assert np.abs(four - sixteen).max() > 1e-2 * np.abs(sixteen).max()
    # a second change is recorded after the first
    again = rv.revocode(out, tmp_path / "eight", 8)
    assert again.tools["revocode"] == (
        "griffin_lim iterations 16 -> 4; griffin_lim iterations 4 -> 8"
    )


def test_a_trained_vocoder_is_refused(tiny_export: TinyExport, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="'hifigan', whose weights were trained"):
        rv.revocode(tiny_export.engines, tmp_path / "out", 4)
    assert not (tmp_path / "out").exists()


def test_a_count_out_of_range_is_refused(tmp_path: Path) -> None:
    for n, said in ((0, "greater than or equal to 1"), (257, "less than or equal to 256")):
        with pytest.raises(ExportError, match=f"--iterations {n}: Input should be {said}$"):
            rv.revocode(SHIPPED, tmp_path / "out", n)
    assert not (tmp_path / "out").exists()


def test_a_graph_of_another_make_is_refused(tmp_path: Path) -> None:
    engines = tmp_path / "engines"
    shutil.copytree(SHIPPED, engines)
    graph = onnx.load(str(engines / "vocoder.onnx"))
    first = next(n for n in graph.graph.node if n.op_type == "Mul" and "mel" in n.input)
    first.op_type = "Div"  # mel / std + mean: not what the exporter writes
    onnx.save(graph, str(engines / "vocoder.onnx"))
    with pytest.raises(ExportError, match="does not open with mel \\* std \\+ mean over 80"):
        rv.revocode(engines, tmp_path / "out", 4)


def test_stats_read_wrong_stop_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = rv.graph_stats

    def swapped(graph: onnx.ModelProto, bins: int) -> tuple[np.ndarray, ...]:
        mean, std = read(graph, bins)
        return std, mean

    monkeypatch.setattr(rv, "graph_stats", swapped)
    with pytest.raises(ExportError, match="re-made from its own stats it differs"):
        rv.revocode(SHIPPED, tmp_path / "out", 4)
    assert not (tmp_path / "out").exists()


def test_engines_without_a_model_config_are_refused(tmp_path: Path) -> None:
    engines = tmp_path / "engines"
    shutil.copytree(SHIPPED, engines)
    data = json.loads((engines / MANIFEST).read_text())
    data["model_config"] = {}
    (engines / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ExportError, match="no model_config"):
        rv.revocode(engines, tmp_path / "out", 4)


def test_the_stats_are_the_voice_s() -> None:
    """The stats read back are what the exporter stored: a std that is positive and a mean
    of log energies below zero, one per mel bin."""
    mean, std = rv.graph_stats(onnx.load(str(SHIPPED / "vocoder.onnx")), 80)
    assert mean.shape == std.shape == (80,)
    assert (std > 0).all() and (mean < 0).all()


def test_a_corrupt_vocoder_file_is_named(tmp_path: Path) -> None:
    engines = tmp_path / "engines"
    shutil.copytree(SHIPPED, engines)
    (engines / "vocoder.onnx").write_bytes(b"not a graph")
    with pytest.raises(ExportError, match=r"vocoder\.onnx: not a readable ONNX graph"):
        rv.revocode(engines, tmp_path / "out", 4)
    assert not (tmp_path / "out").exists()


def test_a_failed_export_leaves_no_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest is written last, as venus export writes it: a copy whose new vocoder
    failed to export is an unfinished engine directory, not the old engines under a new name."""
    real = rv._export
    calls: list[int] = []

    def second_fails(cfg: Any, vocoder: Any, out: Path) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise ExportError("vocoder: torch.onnx.export failed (a test)")
        real(cfg, vocoder, out)

    monkeypatch.setattr(rv, "_export", second_fails)
    with pytest.raises(ExportError, match="a test"):
        rv.revocode(SHIPPED, tmp_path / "out", 4)
    assert (tmp_path / "out" / "backbone.onnx").is_file()
    assert not (tmp_path / "out" / MANIFEST).exists()
