"""The daemon's harness reaches both kinds of capability: built-ins in its own process
and workers over MQTT (a real mosquitto and a real worker)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from support.services import Broker

from venus.capabilities.worker import Context, Worker, capability
from venus.daemon.config.schema import VenusConfig
from venus.daemon.harness.core import Capture, HarnessSettings
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import State
from venus.daemon.run_cli import harness_transports


@capability(description="Say a word back.", timeout_s=5, idempotent=True)
def echo_word(ctx: Context, word: str) -> str:
    return f"you said {word}"


def test_built_ins_and_mqtt_workers_are_both_routed(mosquitto: Broker, tmp_path: Path) -> None:
    cfg = VenusConfig()
    cfg = dataclasses.replace(
        cfg, harness=dataclasses.replace(cfg.harness, broker_url=mosquitto.url, node_id="daemon")
    )
    worker = Worker("w1", [echo_word], mosquitto.url)
    worker.start()
    harness = Harness.open(tmp_path / "j.sqlite3", harness_transports(cfg), HarnessSettings())
    harness.start()
    try:
        deadline = time.monotonic() + 10
        while harness.core.route("echo_word") is None:
            assert time.monotonic() < deadline, "the worker was never discovered"
            time.sleep(0.05)
        remote = harness.submit(Capture("echo_word", {"word": "hello"}, "s1"))
        local = harness.submit(Capture("calculator", {"expression": "6*7"}, "s1"))
        for item_id, name in ((remote, "mqtt"), (local, "in-process")):
            item = harness.wait(item_id, 10)
            assert item is not None and item.state is State.COMPLETED, (name, item)
        remote_result = harness.core.journal.result(remote)
        local_result = harness.core.journal.result(local)
        assert remote_result is not None and remote_result[1].text() == "you said hello"
        assert local_result is not None and local_result[1].structured is not None
        assert local_result[1].structured["value"] == 42
    finally:
        harness.stop()
        worker.stop()


def test_without_a_broker_url_only_the_built_ins_run() -> None:
    cfg = VenusConfig()
    cfg = dataclasses.replace(cfg, harness=dataclasses.replace(cfg.harness, broker_url=""))
    assert [t.name for t in harness_transports(cfg)] == ["in-process"]
