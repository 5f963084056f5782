"""The daemon as a Home Assistant device, by device-based MQTT discovery.

One retained config on ``homeassistant/device/<node>/config`` declares four entities:

- ``state`` (sensor, enum): ``listening`` / ``speaking`` / ``thinking``;
- ``pending`` (sensor): work items not finished yet (queued or running);
- ``mute`` (switch): the microphone mute; Home Assistant writes ``ON`` / ``OFF`` on
  ``venus/v1/nodes/<node>/ha/mute/set``, the daemon answers on ``.../ha/mute``;
- ``finished`` (event): one event per work item that ends (``completed``, ``failed``,
  ``cancelled``, ``expired``) with its item id, capability and what it said.

Availability is the node's own retained ``status`` (``online`` / ``offline``, the last
will), so Home Assistant greys the device out when the daemon dies. The config and the
current values are published on every connect and again whenever Home Assistant
announces itself (``online`` on ``homeassistant/status``), as its docs ask. Everything
goes through the daemon's ``MqttTransport`` connection (one client id per node).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from venus.capabilities import protocol as p

log = logging.getLogger(__name__)

PREFIX = "homeassistant"  # Home Assistant's default discovery prefix
HA_STATUS = f"{PREFIX}/status"  # Home Assistant's birth / will topic
STATES = ("listening", "speaking", "thinking")
FINISHED = ("completed", "failed", "cancelled", "expired")
MAX_EVENT_TEXT = 255  # Home Assistant keeps state attributes small
Presence = Literal["listening", "speaking", "thinking"]


class Connection(Protocol):
    """What the link needs of ``MqttTransport``."""

    node: str

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> bool: ...

    def subscribe(self, topic_filter: str, handler: Callable[[str, bytes], None]) -> None: ...

    def on_connect(self, hook: Callable[[], None]) -> None: ...


def base_topic(node: str) -> str:
    """Where the daemon's Home Assistant values live: under its own subtree."""
    return f"{p.ROOT}/{node}/ha"


def discovery_topic(node: str, prefix: str = PREFIX) -> str:
    return f"{prefix}/device/{node}/config"


def discovery_config(node: str, name: str, version: str) -> dict[str, Any]:
    """The device-based discovery payload (``dev``, ``o``, ``cmps``; see the module doc)."""
    base = base_topic(node)
    return {
        "dev": {
            "ids": [f"venus_{node}"],
            "name": name,
            "mf": "Realtime-Venus",
            "mdl": "full-duplex voice assistant",
            "sw": version,
        },
        "o": {"name": "realtime-venus", "sw": version},
        "avty_t": p.status_topic(node),  # payloads online / offline: HA's defaults
        "qos": 1,
        "cmps": {
            "state": {
                "p": "sensor",
                "name": "State",
                "uniq_id": f"{node}_state",
                "dev_cla": "enum",
                "ops": list(STATES),
                "stat_t": f"{base}/state",
                "ic": "mdi:account-voice",
            },
            "pending": {
                "p": "sensor",
                "name": "Pending work items",
                "uniq_id": f"{node}_pending",
                "stat_cla": "measurement",
                "unit_of_meas": "items",
                "stat_t": f"{base}/pending",
                "ic": "mdi:progress-clock",
            },
            "mute": {
                "p": "switch",
                "name": "Microphone mute",
                "uniq_id": f"{node}_mute",
                "stat_t": f"{base}/mute",
                "cmd_t": f"{base}/mute/set",
                "pl_on": "ON",
                "pl_off": "OFF",
                "ic": "mdi:microphone-off",
            },
            "finished": {
                "p": "event",
                "name": "Finished work item",
                "uniq_id": f"{node}_finished",
                "stat_t": f"{base}/finished",
                "evt_typ": list(FINISHED),
                "ic": "mdi:check-circle-outline",
            },
        },
    }


class HomeAssistantLink:
    """Keeps the daemon's device in Home Assistant up to date.

    ``set_state``, ``set_pending`` and ``set_muted`` publish (retained) when the value
    changes; ``item_finished`` fires the event entity. A mute command from Home Assistant
    calls ``on_mute(muted)``: the daemon mutes the microphone, then calls ``set_muted``.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        name: str,
        version: str,
        on_mute: Callable[[bool], None],
        prefix: str = PREFIX,
    ) -> None:
        self.connection = connection
        self.node = connection.node
        self.name, self.version, self.prefix = name, version, prefix
        self._on_mute = on_mute
        self._base = base_topic(self.node)
        self._lock = threading.Lock()
        self._values: dict[str, str] = {"state": "listening", "pending": "0", "mute": "OFF"}

    def start(self) -> None:
        self.connection.subscribe(f"{self.prefix}/status", self._on_ha_status)
        self.connection.subscribe(f"{self._base}/mute/set", self._on_mute_command)
        self.connection.on_connect(self.announce)

    def announce(self) -> None:
        """Publish the discovery config and every current value (retained)."""
        config = discovery_config(self.node, self.name, self.version)
        payload = json.dumps(config, separators=(",", ":")).encode()
        self.connection.publish(discovery_topic(self.node, self.prefix), payload, retain=True)
        with self._lock:
            values = dict(self._values)
        for key, value in values.items():
            self.connection.publish(f"{self._base}/{key}", value.encode(), retain=True)

    # --- values --------------------------------------------------------------------------
    def set_state(self, state: Presence) -> None:
        if state not in STATES:
            raise ValueError(f"state {state!r} is not one of {', '.join(STATES)}")
        self._set("state", state)

    def set_pending(self, count: int) -> None:
        self._set("pending", str(max(0, int(count))))

    def set_muted(self, muted: bool) -> None:
        self._set("mute", "ON" if muted else "OFF")

    def item_finished(self, item_id: str, capability: str, status: str, text: str = "") -> None:
        if status not in FINISHED:
            raise ValueError(f"status {status!r} is not one of {', '.join(FINISHED)}")
        event: Mapping[str, str] = {
            "event_type": status,
            "item_id": item_id,
            "capability": capability,
            "text": text[:MAX_EVENT_TEXT],
        }
        payload = json.dumps(event, ensure_ascii=False).encode()
        self.connection.publish(f"{self._base}/finished", payload)

    def _set(self, key: str, value: str) -> None:
        with self._lock:
            if self._values[key] == value:
                return
            self._values[key] = value
        self.connection.publish(f"{self._base}/{key}", value.encode(), retain=True)

    # --- what Home Assistant sends (paho's thread: no blocking) --------------------------
    def _on_ha_status(self, _topic: str, payload: bytes) -> None:
        if payload == b"online":
            log.info("Home Assistant came online: announcing %s again", self.node)
            self.announce()

    def _on_mute_command(self, topic: str, payload: bytes) -> None:
        command = payload.strip().upper()
        if command not in (b"ON", b"OFF"):
            shown = payload[:20].decode("utf-8", "replace")
            log.warning("ignored %r on %s: the mute switch takes ON or OFF", shown, topic)
            return
        muted = command == b"ON"
        log.info("Home Assistant %s the microphone", "muted" if muted else "unmuted")
        try:
            self._on_mute(muted)
        except Exception:  # the supervisor of this callback: log, keep the connection
            log.exception("the mute handler failed")
