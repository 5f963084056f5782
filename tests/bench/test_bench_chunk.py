"""`venus bench chunk`: the frontend loop over the demo scenario, engines beside torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TinyExport

from venus.bench.chunk import STAGES, trim

VENUS = Path(sys.executable).with_name("venus")
SCENARIO = Path(__file__).parents[2] / "demo" / "scenario" / "scenario.wav"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), "bench", "chunk", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_engines_beside_torch_over_the_scenario(tiny_export: TinyExport, tmp_path: Path) -> None:
    out = bench(
        "--engines",
        str(tiny_export.engines),
        "--checkpoint",
        str(tiny_export.checkpoint),
        "--seconds",
        "4",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    for stage in STAGES:
        assert f"| {stage} |" in out.stdout
    assert "4 chunks of 1 s (4.0 s of scenario.wav, with video)" in out.stdout
    assert "real-time factor (wall / input): engines " in out.stdout
    assert ", torch " in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["providers"] == ["CPUExecutionProvider"] and data["temperature"] == 0.0
    for side in ("engines", "torch"):
        run = data[side]
        assert run["real_time_factor"] > 0
        assert run["input_s"] == pytest.approx(4.0)
        assert len(run["decisions"]) == 4
        for stage in ("mel", "audio_encoder", "vision_encoder", "prefill", "decide", "total"):
            latency = run["latency"][stage]
            assert latency["runs"] == 4 and 0 <= latency["p50_ms"] <= latency["p95_ms"]
    ratio = data["ratio"]["total"]
    assert ratio == pytest.approx(
        data["torch"]["latency"]["total"]["p50_ms"] / data["engines"]["latency"]["total"]["p50_ms"]
    )
    # fp32 engines, greedy, the same seed: the same decisions (reported, not enforced).
    assert data["same_decisions"] is (data["engines"]["decisions"] == data["torch"]["decisions"])
    assert "decisions: " in out.stdout


def test_engines_only_on_a_given_input(tiny_export: TinyExport, tmp_path: Path) -> None:
    wav = trim(SCENARIO, 2.5, tmp_path / "in.wav")
    out = bench(
        "--engines",
        str(tiny_export.engines),
        "--input",
        str(wav),
        "--threads",
        "1",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    # No video given: the vision encoder never runs.
    assert "(2.5 s of in.wav); temperature 0; intra-op threads 1;" in out.stdout
    assert "| vision_encoder | 0 | - | - | - | - | - |" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["torch"] is None and data["same_decisions"] is None and data["threads"] == 1
    assert len(data["engines"]["decisions"]) == 3


def test_another_checkpoint_is_refused(tiny_export: TinyExport, tmp_path: Path) -> None:
    other = Path(shutil.copytree(tiny_export.checkpoint, tmp_path / "other"))
    with (other / "config.json").open("a") as f:
        f.write("\n")
    out = bench("--engines", str(tiny_export.engines), "--checkpoint", str(other), "--seconds", "1")
    assert out.returncode == 1
    assert f"{other} is not the checkpoint {tiny_export.engines} was exported from" in out.stderr
    assert "running the loop" not in out.stderr  # refused before anything ran


def test_trim_keeps_the_format_and_a_short_input_as_is(tmp_path: Path) -> None:
    import wave

    clip = trim(SCENARIO, 1.5, tmp_path / "clip.wav")
    with wave.open(str(clip)) as w, wave.open(str(SCENARIO)) as s:
        assert w.getnframes() == round(1.5 * s.getframerate())
        assert w.getparams()[:3] == s.getparams()[:3]
    assert trim(clip, 60, tmp_path / "again.wav") == clip
