"""`venus bench train-pass`: training's decoder passes beside the exported forward, from the
command line, on a random model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

VENUS = Path(sys.executable).with_name("venus")


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), "bench", "train-pass", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_both_passes_are_timed_and_compute_the_same_loss(tmp_path: Path) -> None:
    out = bench("--batch", "1", "--runs", "2", "--warmup", "0", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert "| backbone | 1 x 1104 |" in out.stdout
    assert "| speech decoder | 1 x 379 |" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["preset"] == "tiny-wide" and data["runs"] == 2
    assert [r["decoder"] for r in data["rows"]] == ["backbone", "speech decoder"]
    for row in data["rows"]:
        assert row["baseline_ms"] > 0 and row["training_ms"] > 0
        assert row["ratio"] == row["baseline_ms"] / row["training_ms"]
        assert row["loss_gap"] < 1e-4  # the same cross-entropy both ways


def test_an_unknown_preset_is_named() -> None:
    out = bench("--preset", "huge", "--runs", "1")
    assert out.returncode == 1
    assert "--preset 'huge': not one of" in out.stderr
    assert "tiny-wide" in out.stderr
