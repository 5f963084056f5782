"""`venus call` as a user runs it: the result as JSON, the exit status by outcome."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.services import Broker

VENUS = Path(sys.executable).with_name("venus")


def call(tmp_path: Path, *args: str) -> tuple[int, dict[str, object] | None, str]:
    done = subprocess.run(
        [str(VENUS), "call", *args, "--journal", str(tmp_path / "j" / "journal.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, out, done.stderr


def test_a_completed_call_prints_the_result_and_exits_0(tmp_path: Path) -> None:
    code, out, _ = call(tmp_path, "clock", "--args", '{"timezone": "Asia/Tokyo"}')
    assert code == 0 and out is not None and out["status"] == "completed"
    result = out["result"]
    assert isinstance(result, dict) and result["structuredContent"]["timezone"] == "Asia/Tokyo"
    assert result["structuredContent"]["iso"].endswith("+09:00")
    items = subprocess.run(
        [str(VENUS), "items", "--json", "--journal", str(tmp_path / "j" / "journal.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (item,) = json.loads(items.stdout)
    assert item["id"] == out["item_id"] and item["state"] == "delivered"


def test_failures_exit_1_and_timeouts_exit_2(tmp_path: Path) -> None:
    code, out, _ = call(tmp_path, "no_such_thing")
    assert code == 1 and out is not None and out["status"] == "failed"
    assert "no_provider" in json.dumps(out["result"])
    code, out, _ = call(tmp_path, "clock", "--args", '{"timezone": "Mars/Olympus"}')
    assert code == 1 and "invalid_arguments" in json.dumps(out)
    code, out, _ = call(tmp_path, "clock", "--timeout", "0.000001")
    assert code == 2 and out is not None and out["status"] in ("cancelled", "expired")


def test_bad_arguments_are_refused_before_anything_runs(tmp_path: Path) -> None:
    code, out, err = call(tmp_path, "clock", "--args", "{nope")
    assert code == 1 and out is None and "--args is not JSON" in err
    assert not (tmp_path / "j").exists()


def test_venus_call_reaches_a_worker_over_mqtt(tmp_path: Path, mosquitto: Broker) -> None:
    """The issue's first-use example: a built-in worker, then `venus call --broker`."""
    worker = subprocess.Popen(
        [str(VENUS), "worker", "venus.capabilities.builtin", "--broker", mosquitto.url,
         "--node-id", "w1"],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        code, out, err = call(
            tmp_path, "calculator", "--args", '{"expression": "2*(3+4)"}', "--broker", mosquitto.url
        )
        assert code == 0, err
        assert out is not None and out["status"] == "completed"
        assert out["result"]["structuredContent"]["value"] == 14  # type: ignore[index]
    finally:
        worker.terminate()
        worker.wait(timeout=10)
    assert worker.returncode == 0
