"""`venus bench harness --broker`: the round trip over a real mosquitto beside in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.services import Broker, free_port

from venus.cli import main

TRANSPORTS = {"in-process", "mqtt"}


def test_bench_harness_over_a_broker_reports_both_transports(
    tmp_path: Path, mosquitto: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "h.json"
    argv = ["bench", "harness", "--broker", mosquitto.url, "--items", "12", "--rate", "200"]
    assert main([*argv, "--in-flight", "3", "--dir", str(tmp_path), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "round trip p50 ms | round trip p99 ms | calls / s" in table
    for load in ("paced 200 / s", "sustained 3 in flight", "burst of 12"):
        assert f"| {load} | in-process |" in table and f"| {load} | mqtt |" in table
    data = json.loads(out.read_text())
    assert data["broker"] == mosquitto.url and data["journal"] == f"on {tmp_path}"
    rows = data["rows"]
    assert [r["transport"] for r in rows] == ["in-process", "mqtt"] * 3
    for row in rows:
        assert row["calls"] == 12 and row["calls_per_s"] > 0
        assert 0 < row["round_trip_p50_ms"] <= row["round_trip_p99_ms"]


def test_rate_0_leaves_the_paced_load_out(
    mosquitto: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "harness", "--broker", mosquitto.url, "--items", "5", "--rate", "0"]) == 0
    table = capsys.readouterr().out
    assert "paced" not in table and "| burst of 5 | mqtt |" in table


def test_an_unreachable_broker_is_named_within_seconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    assert main(["bench", "harness", "--broker", url, "--items", "5"]) == 1
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err
    assert f"cannot reach the MQTT broker {url}" in err


def test_broker_options_need_the_broker(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "harness", "--items", "5", "--in-flight", "2"]) == 1
    assert "--in-flight goes with --broker" in capsys.readouterr().err
