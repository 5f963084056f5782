"""``mqtt_device`` against a real mosquitto and simulated devices (real paho clients that
behave as a zigbee2mqtt device and as a Home Assistant MQTT switch)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.inprocess import Recorder, request
from support.services import Broker, require_binary, wait_until

from venus.capabilities.builtin.devices import DeviceSpec, load_devices, parse_devices
from venus.capabilities.builtin.mqtt_device import DeviceBridge
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import InProcessTransport
from venus.capabilities.mqtt_socket import stop_loop
from venus.capabilities.mqtt_transport import MqttTransport
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Finished, TransportEvent
from venus.capabilities.worker import Worker
from venus.errors import CapabilityError

WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it
LIGHT = DeviceSpec(
    "kitchen_light",
    "zigbee2mqtt",
    "zigbee2mqtt/kitchen_light",
    "zigbee2mqtt/kitchen_light/set",
    "zigbee2mqtt/kitchen_light/get",
    "Ceiling light in the kitchen",
)
FAN = DeviceSpec("fan", "homeassistant", "home/fan/state", "home/fan/set")
LAMP = DeviceSpec("lamp", "zigbee2mqtt", "z2m/lamp", "z2m/lamp/set", "z2m/lamp/get")
QUICK = pytest.mark.parametrize("bridge", [0.5], indirect=True)  # waits of 0.5 s


class SimDevice:
    """A device on its own paho client. ``zigbee2mqtt``: JSON merged from ``<topic>/set``
    (TOGGLE flips), the state published retained on ``<topic>`` at connect, after each
    command and on ``<topic>/get``. ``homeassistant``: plain ON / OFF on the command topic,
    echoed retained on the state topic. ``silent``: subscribes, never answers."""

    def __init__(self, broker: Broker, spec: DeviceSpec, state: dict[str, Any] | None) -> None:
        self.spec, self.state, self.silent = spec, state, False
        self.commands: queue.Queue[bytes] = queue.Queue()  # on the command topic
        self.asked = threading.Event()  # a request on the get topic came
        self.ready = threading.Event()  # subscribed (again on every reconnect)
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sim-{spec.name}")
        c.reconnect_delay_set(1, 1)
        c.on_connect = self._on_connect
        c.on_subscribe = lambda *_: self.ready.set()
        c.on_message = self._on_message
        self.client = c
        c.connect(broker.host, broker.port, keepalive=5)
        c.loop_start()
        assert self.ready.wait(WAIT_S), broker.log()

    def _on_connect(self, c: mqtt.Client, *_: Any) -> None:
        if self.state is not None:
            self._report()
        topics = [self.spec.command_topic, self.spec.get_topic]
        c.subscribe([(t, 1) for t in topics if t is not None])

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        if msg.topic == self.spec.get_topic:
            assert json.loads(msg.payload) == {"state": ""}
            self.asked.set()
        else:
            self.commands.put(bytes(msg.payload))
        if self.silent:
            return
        state = dict(self.state or {})
        if self.spec.convention == "homeassistant":
            state["state"] = msg.payload.decode()
        elif msg.topic == self.spec.command_topic:
            command = json.loads(msg.payload)
            if command.get("state") == "TOGGLE":
                command["state"] = "OFF" if state.get("state") == "ON" else "ON"
            state.update(command)
        self.state = state
        self._report()

    def _report(self) -> None:
        assert self.state is not None
        if self.spec.convention == "homeassistant":
            payload = str(self.state["state"]).encode()
        else:
            payload = json.dumps(self.state).encode()
        self.client.publish(self.spec.state_topic, payload, qos=1, retain=True)

    def stop(self) -> None:
        self.client.disconnect()
        stop_loop(self.client)


@pytest.fixture
def devices(mosquitto: Broker) -> Iterator[Callable[..., SimDevice]]:
    made: list[SimDevice] = []

    def make(spec: DeviceSpec, state: dict[str, Any] | None = None) -> SimDevice:
        made.append(SimDevice(mosquitto, spec, state))
        return made[-1]

    yield make
    for d in made:
        d.stop()


@pytest.fixture
def bridge(mosquitto: Broker, request: pytest.FixtureRequest) -> Iterator[DeviceBridge]:
    """Waits long enough for a loaded CI machine, or ``QUICK`` (parametrized indirectly)
    for tests of devices that never answer."""
    wait_s = getattr(request, "param", 3.0)
    b = DeviceBridge(
        (LIGHT, FAN, LAMP),
        mosquitto.url,
        client_id="kitchen-devices",
        reconnect_min_s=1,
        reconnect_max_s=1,
        get_wait_s=wait_s,
        confirm_s=wait_s,
    )
    assert b.start(WAIT_S), mosquitto.log()
    yield b
    b.stop()


@pytest.fixture
def call(
    bridge: DeviceBridge, recorder: Recorder, make: Callable[..., InProcessTransport]
) -> Callable[..., Finished]:
    """One call of ``mqtt_device`` through a real in-process transport."""
    transport = make(bridge.capability)
    ids = iter(range(1, 1000))

    def run(**arguments: Any) -> Finished:
        item = f"i{next(ids)}"
        transport.call(request(item, "mqtt_device", arguments=arguments))
        return recorder.finished(item)

    return run


def ok(done: Finished) -> ToolResult:
    assert done.status == "completed", done.result
    return done.result


def failed(done: Finished, code: str) -> ToolResult:
    assert done.status == "failed" and done.result.error is not None, done.result
    assert done.result.error.code == code, done.result.error
    return done.result


# --- the devices file --------------------------------------------------------------------
def test_the_example_devices_file(repo: Path) -> None:
    light, fan = load_devices(repo / "systemd" / "devices.example.toml")
    assert light == LIGHT
    assert fan == DeviceSpec(
        "fan", "homeassistant", "home/fan/state", "home/fan/set", None, "Desk fan in the office"
    )
    assert (fan.payload_on, fan.state_off, light.label) == ("ON", "OFF", "kitchen light")


LIGHT_TOML = '[[device]]\nname = "kitchen_light"\nconvention = "zigbee2mqtt"\ntopic = "z/k"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[device]]\nname = "a"\nconvention = "zigbee2mqtt"\ntopc = "z/a"\n',
         ["device[0] (a).topc: unknown key for a zigbee2mqtt device; did you mean topic?",
          "device[0] (a).topic: missing"]),
        ('[[device]]\nname = "fan"\nconvention = "homeassistant"\nstate_topic = "s"\n',
         ["device[0] (fan).command_topic: missing"]),
        (LIGHT_TOML + LIGHT_TOML.replace("z/k", "z/j"),
         ["device[1] (kitchen_light).name: already the name of device[0]"]),
        (LIGHT_TOML + LIGHT_TOML.replace("kitchen_light", "hall"),
         ["device[1] (hall).topic: already the state topic of device[0]"]),
        (LIGHT_TOML.replace("z/k", "z/+"),
         ["device[0] (kitchen_light).topic: 'z/+' has an MQTT wildcard (+ or #)"]),
        (LIGHT_TOML.replace("zigbee2mqtt", "zigbee"),
         ["device[0] (kitchen_light).convention: 'zigbee' is unknown; did you mean zigbee2mqtt?"]),
        (LIGHT_TOML.replace("kitchen_light", "Kitchen Light"),
         ["device[0] (Kitchen Light).name: 'Kitchen Light' must match [a-z0-9_]{1,64}"]),
        (LIGHT_TOML.replace('"z/k"', "3"),
         ["device[0] (kitchen_light).topic: must be a non-empty string, got 3"]),
        ('[[devices]]\nname = "a"\n', ["devices: unknown key; did you mean device?"]),
        ("", ["no devices; add a [[device]] table"]),
        ("name = ", ["not valid TOML"]),
    ],
    ids=["unknown_key", "missing_key", "same_name", "same_topic", "wildcard", "convention",
         "bad_name", "wrong_type", "top_level", "empty", "not_toml"],
)  # fmt: skip
def test_devices_file_errors(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(text)
    with pytest.raises(CapabilityError) as e:
        load_devices(path)
    message = str(e.value)
    assert message.startswith(f"devices file {path}: ")
    for part in expected:
        assert part in message


def test_a_missing_devices_file_says_where_the_example_is(tmp_path: Path) -> None:
    with pytest.raises(CapabilityError, match=r"no such file \(see systemd/devices.example"):
        load_devices(tmp_path / "nope.toml")


def test_the_contract(bridge: DeviceBridge) -> None:
    contract = bridge.capability.contract
    assert contract.input_schema["properties"]["device"]["enum"] == ["kitchen_light", "fan", "lamp"]
    assert "kitchen_light: Ceiling light in the kitchen" in contract.description
    assert not contract.idempotent and not contract.cancellable
    assert (contract.timeout_s, contract.freshness_s, contract.deliver) == (10.0, 30.0, "when_idle")
    assert contract.annotations["readOnlyHint"] is False
    assert Contract.from_tool(contract.to_tool()) == contract
    with pytest.raises(CapabilityError, match="no devices"):
        DeviceBridge((), "mqtt://127.0.0.1:1", client_id="x")
    with pytest.raises(CapabilityError, match="not a broker URL"):
        DeviceBridge((LIGHT,), "http://127.0.0.1", client_id="x")


# --- calls -------------------------------------------------------------------------------
def test_get_a_retained_state(devices: Any, call: Any) -> None:
    devices(LIGHT, {"state": "ON", "brightness": 102, "linkquality": 90})
    result = ok(call(device="kitchen_light", action="get"))
    assert result.text() == "The kitchen light is on (brightness 40%)."
    assert result.structured == {
        "device": "kitchen_light",
        "state": "on",
        "attributes": {"brightness": 102, "linkquality": 90},
    }


def test_get_asks_a_zigbee2mqtt_device_without_a_retained_state(
    devices: Any, call: Any, bridge: DeviceBridge
) -> None:
    light = devices(LIGHT)
    light.state = {"state": "OFF"}  # known to the device, never published yet
    assert ok(call(device="kitchen_light", action="get")).text() == "The kitchen light is off."
    assert light.asked.is_set()


def test_set_on_off_and_brightness_are_confirmed(devices: Any, call: Any) -> None:
    light = devices(LIGHT, {"state": "OFF", "brightness": 254})
    result = ok(call(device="kitchen_light", action="set", state="on", brightness=40))
    assert json.loads(light.commands.get(timeout=WAIT_S)) == {"state": "ON", "brightness": 102}
    assert result.text() == "The kitchen light is now on (brightness 40%)."
    assert result.structured is not None and result.structured["confirmed"] is True
    result = ok(call(device="kitchen_light", action="set", state="off", attributes={"x": 1}))
    assert json.loads(light.commands.get(timeout=WAIT_S)) == {"x": 1, "state": "OFF"}
    assert result.text() == "The kitchen light is now off."
    assert result.structured == {
        "device": "kitchen_light",
        "state": "off",
        "attributes": {"brightness": 102, "x": 1},
        "confirmed": True,
    }


def test_toggle(devices: Any, call: Any) -> None:
    light = devices(LIGHT, {"state": "ON"})
    fan = devices(FAN, {"state": "OFF"})
    assert ok(call(device="kitchen_light", action="get")).text() == "The kitchen light is on."
    assert ok(call(device="fan", action="get")).text() == "The fan is off."
    assert ok(call(device="kitchen_light", action="set", state="toggle")).structured == {
        "device": "kitchen_light", "state": "off", "attributes": {}, "confirmed": True
    }  # fmt: skip
    assert json.loads(light.commands.get(timeout=WAIT_S)) == {"state": "TOGGLE"}
    # a Home Assistant switch has no toggle: the opposite of its cached state is sent
    assert ok(call(device="fan", action="set", state="toggle")).text() == "The fan is now on."
    assert fan.commands.get(timeout=WAIT_S) == b"ON"
    assert ok(call(device="fan", action="get")).text() == "The fan is on."


def test_a_home_assistant_switch(devices: Any, call: Any) -> None:
    fan = devices(FAN, {"state": "ON"})
    assert ok(call(device="fan", action="set", state="off")).text() == "The fan is now off."
    assert fan.commands.get(timeout=WAIT_S) == b"OFF"
    refused = failed(call(device="fan", action="set", brightness=50), "invalid_arguments")
    assert "only a state" in refused.text()


@QUICK
def test_a_silent_device_fails_clearly_and_quickly(devices: Any, call: Any) -> None:
    lamp = devices(LAMP)
    lamp.silent = True
    started = time.monotonic()
    result = failed(call(device="lamp", action="get"), "device_unavailable")
    assert result.retryable
    assert result.text() == (
        "the lamp has not reported its state on z2m/lamp (waited 0.5 s); "
        "check that it is powered and connected"
    )
    # a set goes out, and says it was not confirmed: completed, confirmed false
    result = ok(call(device="lamp", action="set", state="on"))
    assert lamp.asked.is_set()
    assert json.loads(lamp.commands.get(timeout=WAIT_S)) == {"state": "ON"}
    assert result.text() == (
        "I asked the lamp to turn on, but it has not confirmed it within 0.5 s (on z2m/lamp)."
    )
    assert result.structured == {
        "device": "lamp",
        "state": None,
        "attributes": {},
        "confirmed": False,
    }
    assert time.monotonic() - started < 5.0
    # a toggle of a Home Assistant switch whose state is unknown
    refused = failed(call(device="fan", action="set", state="toggle"), "invalid_arguments")
    assert refused.text() == (
        "the fan has not reported on or off (on home/fan/state), "
        "so it cannot be toggled; ask for on or off"
    )


@QUICK
def test_a_device_that_ignores_commands(devices: Any, call: Any) -> None:
    light = devices(LIGHT, {"state": "OFF"})
    assert ok(call(device="kitchen_light", action="get")).text() == "The kitchen light is off."
    light.silent = True
    result = ok(call(device="kitchen_light", action="set", state="toggle"))
    assert result.text() == (
        "I asked the kitchen light to toggle, but it has not confirmed it within 0.5 s "
        "(on zigbee2mqtt/kitchen_light). The kitchen light was last reported off."
    )
    assert result.structured is not None and result.structured["confirmed"] is False


def test_a_sensor_and_a_bad_report(
    devices: Any, call: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sensor = devices(LAMP, {"temperature": 21.5, "humidity": 40, "linkquality": 5})
    result = ok(call(device="lamp", action="get"))
    assert result.text() == "The lamp reports temperature 21.5, humidity 40."
    assert result.structured == {
        "device": "lamp",
        "state": None,
        "attributes": {"temperature": 21.5, "humidity": 40, "linkquality": 5},
    }
    sensor.client.publish(LAMP.state_topic, b"[1]", qos=1).wait_for_publish(WAIT_S)
    # retained and kept as the device's state, as zigbee2mqtt does: if a client reconnects
    # on a loaded machine (the device re-reports its state at connect; the broker re-sends
    # the retained one), the bridge gets this report back, not the first one, which once
    # left it reporting the first state for good
    sensor.state = {"state": "OPEN"}
    sensor.client.publish(
        LAMP.state_topic, b'{"state": "OPEN"}', qos=1, retain=True
    ).wait_for_publish(WAIT_S)
    wait_until(
        lambda: ok(call(device="lamp", action="get")).text() == "The lamp reports the state open.",
        "the second report",
        WAIT_S,
    )
    assert "ignored a report of lamp: z2m/lamp: not a JSON object" in caplog.text


def test_bad_arguments_are_refused(call: Any) -> None:
    refused = failed(call(device="garage", action="get"), "invalid_arguments")
    assert "'garage' is not one of ['kitchen_light', 'fan', 'lamp']" in refused.text()
    failed(call(device="lamp", action="set", brightness=101), "invalid_arguments")
    refused = failed(call(device="lamp", action="get", state="on"), "invalid_arguments")
    assert refused.text() == "get takes only a device; state go with set"
    refused = failed(call(device="lamp", action="set"), "invalid_arguments")
    assert refused.text() == "set needs a state, a brightness or attributes"


def test_broker_down_at_call_time_is_retryable(
    call: Any, bridge: DeviceBridge, mosquitto: Broker
) -> None:
    mosquitto.process.kill()
    mosquitto.process.wait(timeout=WAIT_S)
    wait_until(lambda: not bridge.connected, "the bridge noticing", WAIT_S)
    for action in ("get", "set"):
        args = {"state": "on"} if action == "set" else {}
        result = failed(call(device="kitchen_light", action=action, **args), "device_unavailable")
        assert result.retryable
        assert "no connection to the MQTT broker" in result.text()


def test_the_bridge_reconnects_after_a_broker_restart(
    devices: Any, call: Any, bridge: DeviceBridge, mosquitto: Broker, tmp_path: Path
) -> None:
    light = devices(LIGHT, {"state": "OFF"})
    assert ok(call(device="kitchen_light", action="get")).text() == "The kitchen light is off."
    light.ready.clear()
    mosquitto.process.kill()  # no persistence: the retained states and sessions are gone
    mosquitto.process.wait(timeout=WAIT_S)
    wait_until(lambda: not bridge.connected, "the bridge noticing", WAIT_S)
    binary = require_binary("mosquitto", "mosquitto")
    conf = mosquitto.log_path.with_name("mosquitto.conf")
    with (tmp_path / "restart.log").open("wb") as log:
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=log)
    try:
        wait_until(lambda: bridge.connected, "the bridge reconnecting", 3 * WAIT_S)
        assert light.ready.wait(3 * WAIT_S)
        result = ok(call(device="kitchen_light", action="set", state="on"))
        assert result.text() == "The kitchen light is now on."  # re-subscribed: confirmed
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_S)


def test_end_to_end_through_a_worker_and_the_mqtt_transport(
    devices: Any, bridge: DeviceBridge, mosquitto: Broker
) -> None:
    devices(FAN, {"state": "OFF"})
    worker = Worker("w1", [bridge.capability], mosquitto.url)
    worker.start(WAIT_S)
    finals: queue.Queue[Finished] = queue.Queue()

    def sink(event: TransportEvent) -> None:
        if isinstance(event, Finished):
            finals.put(event)

    daemon = MqttTransport("daemon1", mosquitto.url)
    daemon.start(sink)
    try:
        names = lambda: {c.name for c in daemon.contracts()}  # noqa: E731
        wait_until(lambda: "mqtt_device" in names(), "discovery of mqtt_device", WAIT_S)
        daemon.call(request("e1", "mqtt_device", arguments={"device": "fan", "action": "set",
                                                            "state": "on"}))  # fmt: skip
        result = ok(finals.get(timeout=WAIT_S))
        assert result.text() == "The fan is now on."
        assert result.structured == {"device": "fan", "state": "on", "attributes": {},
                                     "confirmed": True}  # fmt: skip
    finally:
        daemon.stop()
        worker.stop()


def test_parse_devices_reports_every_problem_at_once() -> None:
    data = {"device": [{"name": "a", "convention": "zigbee2mqtt"}, {"convention": "x"}]}
    with pytest.raises(CapabilityError) as e:
        parse_devices(data, source="devices.toml")
    assert str(e.value).splitlines() == [
        "devices.toml: 2 problems:",
        "  device[0] (a).topic: missing",
        "  device[1].convention: 'x' is unknown",
    ]
