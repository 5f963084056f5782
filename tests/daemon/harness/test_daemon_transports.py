"""The daemon's harness reaches both kinds of capability: built-ins in its own process
and workers over MQTT (a real mosquitto and a real worker)."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.chat_server import ChatServer
from support.services import Broker

from venus.capabilities.mqtt_socket import stop_loop
from venus.capabilities.worker import Context, Worker, capability
from venus.daemon.config.schema import VenusConfig
from venus.daemon.harness.core import Capture, HarnessSettings
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import State
from venus.daemon.transports import harness_transports


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


def _configured(tmp_path: Path, broker_url: str = "", **capabilities: object) -> VenusConfig:
    cfg = VenusConfig()
    return dataclasses.replace(
        cfg,
        harness=dataclasses.replace(cfg.harness, broker_url=broker_url, node_id="daemon"),
        capabilities=dataclasses.replace(cfg.capabilities, **capabilities),  # type: ignore[arg-type]
    )


def test_reason_is_offered_when_configured(tmp_path: Path) -> None:
    server = ChatServer().start()
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    key.chmod(0o600)
    cfg = _configured(tmp_path, reason_url=server.url, reason_model="m", reason_key_file=key)
    harness = Harness.open(tmp_path / "j.sqlite3", harness_transports(cfg), HarnessSettings())
    harness.start()
    try:
        item_id = harness.submit(Capture("reason", {"question": "Why?"}, "s1"))
        item = harness.wait(item_id, 10)
        assert item is not None and item.state is State.COMPLETED, item
        result = harness.core.journal.result(item_id)
        assert result is not None and result[1].text() == "Forty-two."
        assert server.seen[0].headers["authorization"] == "Bearer sk-test"
    finally:
        harness.stop()
        server.stop()


def test_a_built_in_that_cannot_be_set_up_is_left_out_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    key.chmod(0o644)  # readable by others: refused
    devices = tmp_path / "devices.toml"
    devices.write_text('[[device]]\nname = "lamp"\nconvention = "zigbee2mqtt"\n')  # no topic
    cfg = _configured(
        tmp_path,
        "mqtt://127.0.0.1:1",
        reason_url="http://127.0.0.1:1/v1",
        reason_model="m",
        reason_key_file=key,
        devices_file=devices,
    )
    with caplog.at_level(logging.ERROR):
        transports = harness_transports(cfg)
    names = [c.name for c in transports[0].contracts()]
    assert names == ["clock", "calculator", "timer"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("reason off" in e and str(key) in e for e in errors), errors
    assert any("mqtt_device off" in e and "devices" in e for e in errors), errors


def test_mqtt_device_is_offered_and_reaches_a_device(mosquitto: Broker, tmp_path: Path) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text(
        '[[device]]\nname = "lamp"\nconvention = "zigbee2mqtt"\ntopic = "zigbee2mqtt/lamp"\n'
    )
    lamp = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="lamp", protocol=mqtt.MQTTv5)
    lamp.connect(mosquitto.host, mosquitto.port)
    lamp.loop_start()
    lamp.publish("zigbee2mqtt/lamp", b'{"state":"ON"}', qos=1, retain=True).wait_for_publish(10)
    cfg = _configured(tmp_path, mosquitto.url, devices_file=devices)
    harness = Harness.open(tmp_path / "j.sqlite3", harness_transports(cfg), HarnessSettings())
    harness.start()
    try:
        item_id = harness.submit(Capture("mqtt_device", {"device": "lamp", "action": "get"}, "s1"))
        item = harness.wait(item_id, 15)
        assert item is not None and item.state is State.COMPLETED, item
        result = harness.core.journal.result(item_id)
        assert result is not None and result[1].structured is not None
        assert result[1].structured["state"] == "on"
    finally:
        harness.stop()
        lamp.disconnect()
        stop_loop(lamp)
