"""`venus bench harness` through the CLI: both journals measured, every figure present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from venus.cli import main


def test_bench_harness_reports_latency_and_throughput(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "h.json"
    assert (
        main(
            [
                "bench",
                "harness",
                "--items",
                "30",
                "--rate",
                "200",
                "--dir",
                str(tmp_path),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "capture -> dispatch" in table and f"disk ({tmp_path})" in table
    data = json.loads(out.read_text())
    assert data["items"] == 30 and data["rate"] == 200
    for row in data["rows"]:
        assert row["items"] == 30 and row["items_per_s"] > 0
        assert 0 <= row["capture_to_dispatch_p50_ms"] <= row["capture_to_dispatch_p99_ms"]
        assert 0 <= row["result_to_reintegration_p50_ms"] <= row["result_to_reintegration_p99_ms"]


def test_bench_harness_refuses_no_items() -> None:
    assert main(["bench", "harness", "--items", "0"]) == 1
