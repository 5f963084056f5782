"""The live daemon's health, events and Home Assistant values, through a real mosquitto,
a real harness (journal on disk, the built-ins in process) and its MQTT transport."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.frontend import chunk_record as record
from support.services import Broker, wait_until

from venus.capabilities.builtin import builtin_transport
from venus.capabilities.mqtt_socket import stop_loop
from venus.capabilities.mqtt_transport import MqttTransport
from venus.daemon.broadcast import Broadcast, open_broadcast
from venus.daemon.config.schema import HomeAssistantConfig
from venus.daemon.harness.core import Capture
from venus.daemon.harness.service import Harness

WAIT_S = 10.0
NODE = "venus"
BASE = f"venus/v1/nodes/{NODE}"


class Watcher:
    """A raw client on the daemon's subtree and Home Assistant's discovery."""

    def __init__(self, broker: Broker) -> None:
        self.got: queue.Queue[tuple[str, bytes]] = queue.Queue()
        subscribed = threading.Event()
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="watcher", protocol=mqtt.MQTTv5)
        c.on_message = lambda _c, _u, m: self.got.put((m.topic, bytes(m.payload)))
        c.on_subscribe = lambda *_: subscribed.set()
        c.connect(broker.host, broker.port)
        c.loop_start()
        c.subscribe([(f"{BASE}/#", 1), ("homeassistant/#", 1)])
        assert subscribed.wait(WAIT_S)
        self.client = c

    def until(self, topic: str, want: bytes | None = None) -> bytes:
        """The next payload on ``topic`` (equal to ``want`` if given), skipping others."""
        return self.until_s(topic, WAIT_S, want)

    def until_s(self, topic: str, timeout_s: float, want: bytes | None = None) -> bytes:
        end = time.monotonic() + timeout_s
        while True:
            got, payload = self.got.get(timeout=max(0.0, end - time.monotonic()))
            if got == topic and (want is None or payload == want):
                return payload

    def events(self, item_id: str, until_state: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while not out or out[-1]["to"] != until_state:
            doc = json.loads(self.until(f"{BASE}/events"))
            if doc["item_id"] == item_id:
                out.append(doc)
        return out

    def close(self) -> None:
        self.client.disconnect()
        stop_loop(self.client)


@pytest.fixture
def daemon(mosquitto: Broker, tmp_path: Path) -> Iterator[tuple[Harness, Broadcast, Watcher]]:
    watcher = Watcher(mosquitto)
    harness = Harness.open(
        tmp_path / "journal.sqlite3", [builtin_transport(), MqttTransport(NODE, mosquitto.url)]
    )
    muted = threading.Event()
    broadcast = open_broadcast(harness, muted, HomeAssistantConfig(name="Test Venus"))
    assert broadcast is not None
    harness.start()
    wait_until(lambda: broadcast.transport.connected, "the daemon's connection")
    yield harness, broadcast, watcher
    broadcast.stop()
    harness.stop()
    watcher.close()


def test_a_work_item_is_seen_by_observers_and_home_assistant(
    daemon: tuple[Harness, Broadcast, Watcher],
) -> None:
    harness, _broadcast, watcher = daemon
    config = json.loads(watcher.until(f"homeassistant/device/{NODE}/config"))
    assert config["dev"]["name"] == "Test Venus"
    watcher.until(f"{BASE}/ha/pending", b"0")
    item_id = harness.submit(Capture("calculator", {"expression": "6*7"}, session_id="s1"))
    events = watcher.events(item_id, "completed")
    assert [(e["from"], e["to"]) for e in events] == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "completed"),
    ]
    assert all(e["capability"] == "calculator" and e["v"] == 1 for e in events)
    watcher.until(f"{BASE}/ha/pending", b"0")  # back to none pending (it was 1)
    finished = json.loads(watcher.until(f"{BASE}/ha/finished"))
    assert finished["event_type"] == "completed" and finished["item_id"] == item_id
    assert "42" in finished["text"]


def test_presence_follows_speech_and_work(daemon: tuple[Harness, Broadcast, Watcher]) -> None:
    harness, broadcast, watcher = daemon
    watcher.until(f"{BASE}/ha/state", b"listening")
    broadcast.on_record(record(decision="speak", reply_id=1))
    watcher.until(f"{BASE}/ha/state", b"speaking")
    broadcast.on_record(record(decision="speak", reply_id=1, reply_ended=True))
    watcher.until(f"{BASE}/ha/state", b"listening")
    timer = {"action": "set", "seconds": 60}
    item_id = harness.submit(Capture("timer", timer, session_id="s1"))
    watcher.until(f"{BASE}/ha/pending", b"1")
    watcher.until(f"{BASE}/ha/state", b"thinking")  # a timer is pending
    harness.cancel(item_id, "test over")
    watcher.until(f"{BASE}/ha/state", b"listening")
    health = broadcast.health()
    assert health["chunks"] == 2 and health["pending"] == 0 and health["state"] == "listening"


def test_the_mute_switch_mutes_the_microphone_and_health_says_so(
    daemon: tuple[Harness, Broadcast, Watcher],
) -> None:
    _harness, broadcast, watcher = daemon
    watcher.until(f"{BASE}/ha/mute", b"OFF")
    watcher.client.publish(f"{BASE}/ha/mute/set", b"ON", qos=1)
    watcher.until(f"{BASE}/ha/mute", b"ON")
    assert broadcast.muted.is_set()
    health = json.loads(watcher.until(f"{BASE}/health"))
    while not health["muted"]:  # the retained one from connect may come first
        health = json.loads(watcher.until(f"{BASE}/health"))
    assert health["state"] == "listening" and health["mqtt"]["connects"] >= 1
    watcher.client.publish(f"{BASE}/ha/mute/set", b"OFF", qos=1)
    watcher.until(f"{BASE}/ha/mute", b"OFF")
    assert not broadcast.muted.is_set()


def test_without_a_broker_there_is_nothing_to_broadcast(tmp_path: Path) -> None:
    harness = Harness.open(tmp_path / "journal.sqlite3", [builtin_transport()])
    try:
        assert open_broadcast(harness, threading.Event(), HomeAssistantConfig()) is None
    finally:
        harness.core.journal.close()


def test_venus_run_appears_in_home_assistant_and_obeys_the_mute_switch(
    mosquitto: Broker, pulseaudio: object, tmp_path: Path
) -> None:
    """The live daemon as a user runs it: `venus run` on the sound server, with a broker."""
    from importlib.resources import as_file, files

    watcher = Watcher(mosquitto)
    with as_file(files("venus.demo") / "engines" / "tiny") as engines:
        config = tmp_path / "venus.toml"
        config.write_text(
            f'[model]\nengines = "{engines}"\n[video]\nenabled = false\n'
            f'[harness]\njournal = "{tmp_path / "journal.sqlite3"}"\n'
            f'broker_url = "{mosquitto.url}"\n[homeassistant]\nname = "Live Venus"\n'
        )
        venus = Path(sys.executable).with_name("venus")
        proc = subprocess.Popen(
            [str(venus), "--config", str(config), "run", "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            started = json.loads(watcher.until_s(f"homeassistant/device/{NODE}/config", 120))
            assert started["dev"]["name"] == "Live Venus"
            watcher.until(f"{BASE}/ha/state", b"listening")
            watcher.client.publish(f"{BASE}/ha/mute/set", b"ON", qos=1)
            watcher.until(f"{BASE}/ha/mute", b"ON")
            health = json.loads(watcher.until(f"{BASE}/health"))
            while not health["muted"]:
                health = json.loads(watcher.until(f"{BASE}/health"))
            proc.send_signal(signal.SIGTERM)
            watcher.until(f"{BASE}/status", b"offline")
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, out
            assert "microphone muted from Home Assistant" in out
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
            watcher.close()
