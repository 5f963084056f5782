"""The service fixtures give real, working services (and clean up after themselves)."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from support.services import Broker, PulseServer

from venus.capabilities.mqtt_socket import stop_loop


def test_mosquitto_speaks_mqtt5(mosquitto: Broker) -> None:
    got: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
    subscribed = threading.Event()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="t1", protocol=mqtt.MQTTv5)
    client.on_message = lambda _c, _u, msg: got.put(msg)
    client.on_subscribe = lambda *_: subscribed.set()
    client.connect(mosquitto.host, mosquitto.port)
    client.loop_start()
    try:
        client.subscribe("venus/v1/test", qos=1)
        assert subscribed.wait(10), mosquitto.log()
        props = Properties(PacketTypes.PUBLISH)
        props.CorrelationData = b"item-1"
        props.MessageExpiryInterval = 30
        client.publish("venus/v1/test", b"hello", qos=1, properties=props).wait_for_publish(10)
        msg = got.get(timeout=10)
        assert msg.payload == b"hello"
        assert msg.properties.CorrelationData == b"item-1"  # an MQTT 5 property survived
    finally:
        stop_loop(client)
        client.disconnect()


def test_mosquitto_stops_afterwards(tmp_path: Path) -> None:
    from support.services import run_mosquitto

    with run_mosquitto(tmp_path) as broker:
        proc = broker.process
        assert proc.poll() is None
    assert proc.poll() is not None


def test_pulseaudio_null_sink_is_default(pulseaudio: PulseServer) -> None:
    info = pulseaudio.pactl("info")
    assert f"Default Sink: {pulseaudio.sink}" in info
    assert f"Default Source: {pulseaudio.source}" in info
    assert pulseaudio.sink in pulseaudio.pactl("list", "short", "sinks")


def test_portaudio_sees_the_pulse_device(pulseaudio: PulseServer) -> None:
    # A fresh interpreter: PortAudio enumerates devices once, when sounddevice is imported.
    code = "import sounddevice as sd; print([d['name'] for d in sd.query_devices()])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pulse" in out.stdout, out.stdout + out.stderr


def test_missing_binary_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.services import require_binary

    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install no-such-pkg"):
        require_binary("no-such-binary-venus", "no-such-pkg")


def test_missing_binary_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.services import require_binary

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_binary("no-such-binary-venus", "no-such-pkg")
    assert require_binary("sh", "dash").endswith("/sh")
