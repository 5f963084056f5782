"""``mqtt_device``: read or set the state of a device in the home over MQTT.

The devices, their topics and their payloads are in ``devices.py``. A ``DeviceBridge``
holds one paho client (its own client id, given by the caller) that subscribes to every
device's state topic on each (re)connect and keeps each device's latest report, retained
or live. Its ``capability`` answers:

- ``get``: the latest report; if none has come yet, a zigbee2mqtt device is asked
  (``{"state": ""}`` on ``<topic>/get``) and the answer awaited ``get_wait_s``. Still
  nothing: failed ``device_unavailable``, retryable, naming the device and its topic.
- ``set``: the command is published (zigbee2mqtt: JSON on ``<topic>/set``, ``TOGGLE``
  included; Home Assistant: ``payload_on`` / ``payload_off`` on the command topic, a
  toggle being the opposite of the latest report), then a report that agrees with it is
  awaited ``confirm_s``. Confirmed: completed with the new state. **Not confirmed:
  completed too**, with ``confirmed: false`` and a text saying the command went out but
  the device has not confirmed it: the broker took the command, so the device has most
  likely acted (or will), and a failure would invite a retry that toggles it back.
- No broker connection at call time, or a command the broker did not acknowledge:
  failed ``device_unavailable``, retryable.

The contract is not idempotent (a retried toggle undoes itself) and not cancellable (a
sent command cannot be taken back; the call ends within ``PUBLISH_WAIT_S + confirm_s``).

Threads: paho's network thread runs the callbacks, which only parse a small payload and
update the cache under ``_changed``; handlers wait on that condition, never sleep.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from venus.capabilities.builtin.devices import (
    BRIGHTNESS_MAX,
    DeviceSpec,
    Report,
    make_command,
    parse_report,
)
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context
from venus.capabilities.mqtt_socket import broker_address, no_delay, stop_loop
from venus.capabilities.result import ToolResult
from venus.errors import CapabilityError

log = logging.getLogger(__name__)

QOS = 1
PUBLISH_WAIT_S = 2.0  # for the broker's PUBACK of a command
QUIET = frozenset({"linkquality", "last_seen", "update", "update_available"})  # not said
MAX_SAID = 4  # attributes said of a device without an on/off state
UNAVAILABLE = "device_unavailable"


@dataclass
class _Latest:
    """A device's latest report (None: none yet, or cleared); ``seq`` counts them."""

    report: Report | None = None
    seq: int = 0


class DeviceBridge:
    """The devices of one devices file, reached through the broker at ``broker_url``.

    ``broker_url``: ``mqtt://``, ``mqtts://`` (TLS), ``ws://`` or ``wss://`` ``HOST[:PORT]``.
    ``credentials``: ``(username, password)`` (``read_credentials`` reads them from a file).
    """

    def __init__(
        self,
        devices: Sequence[DeviceSpec],
        broker_url: str,
        *,
        client_id: str,
        credentials: tuple[str, str] | None = None,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        keepalive_s: int = 30,
        reconnect_min_s: int = 1,
        reconnect_max_s: int = 30,
        get_wait_s: float = 2.0,
        confirm_s: float = 3.0,
    ) -> None:
        self._devices = {d.name: d for d in devices}
        self._by_topic = {d.state_topic: d for d in devices}
        if not len(devices) == len(self._devices) == len(self._by_topic):
            raise CapabilityError("mqtt_device: two devices have the same name or state topic")
        self._contract = device_contract(devices, get_wait_s, confirm_s)
        self._host, self._port, scheme = broker_address(broker_url)
        self._client_id = client_id
        self._keepalive_s = keepalive_s
        self._get_wait_s, self._confirm_s = get_wait_s, confirm_s
        self._changed = threading.Condition()
        self._latest = {name: _Latest() for name in self._devices}
        self._ready = threading.Event()  # subscribed since the latest connect
        self._client = client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=MQTTProtocolVersion.MQTTv5,
            transport="websockets" if scheme in ("ws", "wss") else "tcp",
        )
        if scheme in ("mqtts", "wss") or tls_ca or tls_cert or tls_key:
            client.tls_set(
                ca_certs=str(tls_ca) if tls_ca else None,
                certfile=str(tls_cert) if tls_cert else None,
                keyfile=str(tls_key) if tls_key else None,
            )
        if credentials is not None:
            client.username_pw_set(*credentials)
        client.reconnect_delay_set(reconnect_min_s, reconnect_max_s)
        no_delay(client)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message

    @property
    def capability(self) -> Capability:
        return Capability(self._contract, self._handle)

    @property
    def connected(self) -> bool:
        """Connected and subscribed to the state topics."""
        return self._ready.is_set()

    # --- life ----------------------------------------------------------------------------
    def start(self, timeout_s: float = 5.0) -> bool:
        """Connect in the background and wait up to ``timeout_s`` for the subscriptions.

        False if not connected by then: it keeps trying (with backoff) and calls fail
        ``device_unavailable`` until it is.
        """
        self._client.connect_async(self._host, self._port, self._keepalive_s, clean_start=True)
        self._client.loop_start()
        if self._ready.wait(timeout_s):
            return True
        log.warning(
            "mqtt_device: no connection to the broker %s:%s within %g s; still trying",
            *(self._host, self._port, timeout_s),
        )
        return False

    def stop(self) -> None:
        self._ready.clear()
        self._client.disconnect()
        stop_loop(self._client)

    # --- paho's callbacks (network thread: no blocking) ----------------------------------
    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            log.warning(
                "mqtt_device: the broker %s:%s refused us: %s", self._host, self._port, reason
            )
            return
        log.info("mqtt_device: connected to %s:%s as %s", self._host, self._port, self._client_id)
        client.subscribe([(topic, QOS) for topic in self._by_topic])

    def _on_disconnect(self, _c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if self._ready.is_set():
            log.warning("mqtt_device: lost the broker (%s); reconnecting", reason)
        self._ready.clear()

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, codes: Any, _p: Any) -> None:
        refused = [t for t, c in zip(self._by_topic, codes, strict=False) if c.is_failure]
        if refused:  # the broker's ACL: those devices will never report
            log.error("mqtt_device: the broker refused subscriptions to %s", ", ".join(refused))
        self._ready.set()

    def _on_message(self, _c: Any, _u: Any, message: mqtt.MQTTMessage) -> None:
        device = self._by_topic.get(message.topic)
        if device is None:
            return
        try:
            report = parse_report(device, bytes(message.payload))
        except CapabilityError as e:
            log.warning("mqtt_device: ignored a report of %s: %s", device.name, e)
            return
        with self._changed:
            latest = self._latest[device.name]
            latest.report = report
            latest.seq += 1
            self._changed.notify_all()
        log.debug("mqtt_device: %s reports %s", device.name, report)

    # --- the capability ------------------------------------------------------------------
    def _handle(self, ctx: Context) -> ToolResult:
        args = ctx.arguments
        device = self._devices[args["device"]]
        if args["action"] == "get":
            given = [k for k in ("state", "brightness", "attributes") if k in args]
            if given:
                return _refuse(f"get takes only a device; {', '.join(given)} go with set")
            return self._get(device, ctx.deadline_s)
        return self._set(device, args, ctx.deadline_s)

    def _get(self, device: DeviceSpec, deadline_s: float) -> ToolResult:
        if not self._ready.is_set():
            return self._no_broker(device)
        latest = self._latest[device.name]
        with self._changed:
            known = latest.report is not None
        if not known and device.get_topic is not None:
            self._client.publish(device.get_topic, json.dumps({"state": ""}), QOS)
        wait_s = _wait(self._get_wait_s, deadline_s)
        with self._changed:
            self._changed.wait_for(lambda: latest.report is not None, wait_s)
            report = latest.report
        if report is None:
            message = (
                f"the {device.label} has not reported its state on {device.state_topic} "
                f"(waited {self._get_wait_s:g} s); check that it is powered and connected"
            )
            return ToolResult.failed(UNAVAILABLE, message, retryable=True)
        return ToolResult.ok(_say(device, report, "is"), _structured(device, report))

    def _set(self, device: DeviceSpec, args: Mapping[str, Any], deadline_s: float) -> ToolResult:
        latest = self._latest[device.name]
        with self._changed:
            seq, before = latest.seq, latest.report
        try:
            command = make_command(
                device, args.get("state"), args.get("brightness"), args.get("attributes"), before
            )
        except CapabilityError as e:
            return _refuse(str(e))
        if not self._ready.is_set():
            return self._no_broker(device)
        info = self._client.publish(device.command_topic, command.payload, QOS)
        try:
            info.wait_for_publish(_wait(PUBLISH_WAIT_S, deadline_s))
        except (RuntimeError, ValueError) as e:  # not queued: the connection went
            log.debug("mqtt_device: command to %s not sent: %s", device.name, e)
        if not info.is_published():
            message = (
                f"the broker did not take the command for the {device.label} "
                f"(on {device.command_topic}); try again"
            )
            return ToolResult.failed(UNAVAILABLE, message, retryable=True)

        def confirmed() -> bool:
            r = latest.report
            return latest.seq > seq and r is not None and command.confirmed_by(r)

        with self._changed:
            ok = self._changed.wait_for(confirmed, _wait(self._confirm_s, deadline_s))
            report = latest.report
        if ok and report is not None:
            return ToolResult.ok(_say(device, report, "is now"), _structured(device, report, True))
        text = (
            f"I asked the {device.label} to {command.said}, but it has not confirmed it "
            f"within {self._confirm_s:g} s (on {device.state_topic})."
        )
        if report is not None:
            text += " " + _say(device, report, "was last reported")
        return ToolResult.ok(text, _structured(device, report, False))

    def _no_broker(self, device: DeviceSpec) -> ToolResult:
        message = (
            f"the {device.label} is unreachable: no connection to the MQTT broker "
            f"{self._host}:{self._port} (reconnecting)"
        )
        return ToolResult.failed(UNAVAILABLE, message, retryable=True)


def device_contract(devices: Sequence[DeviceSpec], get_wait_s: float, confirm_s: float) -> Contract:
    """The ``mqtt_device`` contract; the device names are an enum of its input schema."""
    if not devices:
        raise CapabilityError("mqtt_device: no devices; add [[device]] tables to the devices file")
    listed = "; ".join(f"{d.name}: {d.description}" if d.description else d.name for d in devices)
    return Contract(
        name="mqtt_device",
        title="Home devices",
        description=(
            f"Read (get) or change (set) the state of a device in the home. Devices: {listed}."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "device": {"type": "string", "enum": [d.name for d in devices]},
                "action": {"enum": ["get", "set"], "description": "get: read; set: change"},
                "state": {"enum": ["on", "off", "toggle"], "description": "set only"},
                "brightness": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 100,
                    "description": "percent; set only, zigbee2mqtt lights only",
                },
                "attributes": {
                    "type": "object",
                    "description": "set only, zigbee2mqtt only: more keys of its JSON command",
                },
            },
            "required": ["device", "action"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "device": {"type": "string"},
                "state": {"type": ["string", "null"], "description": "on, off, ...; null: none"},
                "attributes": {"type": "object", "description": "the rest of its report"},
                "confirmed": {"type": "boolean", "description": "set: the device confirmed it"},
            },
            "required": ["device", "state", "attributes"],
        },
        annotations={"readOnlyHint": False, "idempotentHint": False, "openWorldHint": True},
        timeout_s=max(10.0, PUBLISH_WAIT_S + max(get_wait_s, confirm_s) + 1.0),
        freshness_s=30.0,  # "the light is on" may be wrong half a minute later
        evidence="none",
        idempotent=False,  # "toggle" twice is not "toggle" once
        cancellable=False,  # a sent command cannot be taken back; every wait is short
        deliver="when_idle",
    )


# --- what is said ------------------------------------------------------------------------
def _say(device: DeviceSpec, report: Report, verb: str) -> str:
    """``The kitchen light is on (brightness 40%).``"""
    the = f"The {device.label}"
    brightness = report.brightness
    if report.state == "on" and brightness is not None:
        return f"{the} {verb} on (brightness {round(brightness * 100 / BRIGHTNESS_MAX)}%)."
    if report.state in ("on", "off"):
        return f"{the} {verb} {report.state}."
    if report.state is not None:
        return f"{the} reports the state {report.state}."
    said = [
        f"{k.replace('_', ' ')} {v}"
        for k, v in report.attributes.items()
        if k not in QUIET and isinstance(v, str | int | float) and not isinstance(v, bool)
    ]
    if said:
        return f"{the} reports {', '.join(said[:MAX_SAID])}."
    return f"{the} reported nothing I can say."


def _structured(
    device: DeviceSpec, report: Report | None, confirmed: bool | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "device": device.name,
        "state": report.state if report is not None else None,
        "attributes": dict(report.attributes) if report is not None else {},
    }
    if confirmed is not None:
        out["confirmed"] = confirmed
    return out


def _refuse(message: str) -> ToolResult:
    return ToolResult.failed("invalid_arguments", message)


def _wait(wait_s: float, deadline_s: float) -> float:
    """``wait_s``, cut short by the call's deadline."""
    return max(0.0, min(wait_s, deadline_s - time.time()))
