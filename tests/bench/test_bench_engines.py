"""`venus bench engines` on the tiny engines, with the torch reference side by side."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TinyExport

from venus.bench.engines import percentile
from venus.engines.runners import Engines
from venus.errors import EngineError

VENUS = Path(sys.executable).with_name("venus")
COMPONENTS = (
    "audio_encoder",
    "vision_encoder",
    "backbone",
    "speech_decoder",
    "flow_decoder",
    "vocoder",
)


def bench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), "bench", "engines", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )


def test_engines_beside_torch(tiny_export: TinyExport, tmp_path: Path) -> None:
    out = bench(
        "--engines",
        str(tiny_export.engines),
        "--checkpoint",
        str(tiny_export.checkpoint),
        "--runs",
        "3",
        "--warmup",
        "1",
        "--context",
        "64",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    for name in COMPONENTS:
        assert f"| {name} |" in out.stdout
    assert "real-time factor" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["component"] for r in data["rows"]] == list(COMPONENTS)
    for row in data["rows"]:
        assert 0 < row["engines"]["p50_ms"] <= row["engines"]["p95_ms"]
        assert row["torch"]["p50_ms"] > 0
        assert row["ratio"] == pytest.approx(row["torch"]["p50_ms"] / row["engines"]["p50_ms"])
    assert data["providers"] == ["CPUExecutionProvider"]


def test_without_a_checkpoint_only_the_engines_are_timed(tiny_export: TinyExport) -> None:
    out = bench(
        "--engines", str(tiny_export.engines), "--runs", "2", "--warmup", "0", "--context", "0"
    )
    assert out.returncode == 0, out.stderr
    assert "| backbone |" in out.stdout
    assert "| - | - | - |" in out.stdout


def test_a_broken_engine_fails_as_in_the_daemon(tiny_export: TinyExport, tmp_path: Path) -> None:
    broken = Path(shutil.copytree(tiny_export.engines, tmp_path / "engines"))
    (broken / "vocoder.onnx").unlink()
    with pytest.raises(EngineError) as daemon_error:
        Engines.open(broken)
    out = bench("--engines", str(broken), "--runs", "1")
    assert out.returncode == 1
    assert str(daemon_error.value) in out.stderr
    assert "vocoder.onnx: missing" in out.stderr


def test_another_checkpoint_is_refused(tiny_export: TinyExport, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(
        [str(VENUS), "init", "--config", "tiny", "--seed", "9", "--out", str(other)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    out = bench("--engines", str(tiny_export.engines), "--checkpoint", str(other), "--runs", "1")
    assert out.returncode == 1
    assert "is not the checkpoint" in out.stderr


def test_without_engines_or_configuration(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(VENUS), "--config", str(tmp_path / "none.toml"), "bench", "engines"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1
    assert "--engines DIR" in out.stderr


def test_percentile() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.5) in (10.0, 11.0)
    assert percentile(values, 0.95) == 19.0
    assert percentile([3.0], 0.95) == 3.0
