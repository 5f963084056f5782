"""The devices file of the ``mqtt_device`` capability: which devices, on which topics.

A TOML file with one ``[[device]]`` table per device (``systemd/devices.example.toml``)::

    [[device]]
    name = "kitchen_light"                # [a-z0-9_]{1,64}: what the assistant calls it
    description = "Ceiling light in the kitchen"
    convention = "zigbee2mqtt"
    topic = "zigbee2mqtt/kitchen_light"   # state here, commands on .../set, asks on .../get

    [[device]]
    name = "fan"
    convention = "homeassistant"          # plain payloads, as a Home Assistant MQTT switch
    state_topic = "home/fan/state"
    command_topic = "home/fan/set"

Every key is checked: an unknown key (with the nearest valid one), a missing one, a value
of the wrong type, a duplicate name and a topic with a wildcard are errors, all reported
at once in one ``CapabilityError`` naming the file, the device and the key.

Below the file: what each convention says on the wire. ``parse_report`` reads a state
report, ``make_command`` builds a command and says which report would confirm it.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from venus.capabilities.contract import NAME
from venus.errors import CapabilityError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

Convention = Literal["zigbee2mqtt", "homeassistant"]
MAX_TOPIC_BYTES = 65535  # MQTT's limit on a topic name, in UTF-8
COMMON_KEYS = ("name", "description", "convention")
KEYS: dict[str, tuple[str, ...]] = {  # convention -> the keys its devices may have
    "zigbee2mqtt": (*COMMON_KEYS, "topic"),
    "homeassistant": (
        *COMMON_KEYS,
        *("state_topic", "command_topic", "payload_on", "payload_off", "state_on", "state_off"),
    ),
}
REQUIRED: dict[str, tuple[str, ...]] = {
    "zigbee2mqtt": ("name", "convention", "topic"),
    "homeassistant": ("name", "convention", "state_topic", "command_topic"),
}
EXAMPLE = "see systemd/devices.example.toml"
BRIGHTNESS_MAX = 254  # zigbee2mqtt's brightness scale is 0..254; the capability's 0..100 %
BRIGHTNESS_SLACK = 2  # raw units a device may round a brightness it was set to


@dataclass(frozen=True)
class DeviceSpec:
    """One device and its topics, whatever its convention.

    ``get_topic`` is where a request for the current state goes (zigbee2mqtt only; a Home
    Assistant device has none). ``payload_on`` / ``payload_off`` are the plain payloads a
    Home Assistant device is commanded with and ``state_on`` / ``state_off`` the ones it
    reports (by default the same); zigbee2mqtt devices speak JSON and ignore them.
    """

    name: str
    convention: Convention
    state_topic: str
    command_topic: str
    get_topic: str | None = None
    description: str = ""
    payload_on: str = "ON"
    payload_off: str = "OFF"
    state_on: str = "ON"
    state_off: str = "OFF"

    @property
    def label(self) -> str:
        """The name as said: ``kitchen_light`` -> ``kitchen light``."""
        return self.name.replace("_", " ")


def load_devices(path: Path) -> tuple[DeviceSpec, ...]:
    """The devices in the TOML file at ``path``; CapabilityError names what is wrong."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise CapabilityError(f"devices file {path}: no such file ({EXAMPLE})") from None
    except OSError as e:
        raise CapabilityError(f"devices file {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise CapabilityError(f"devices file {path}: not valid TOML: {e}") from e
    except UnicodeDecodeError as e:
        raise CapabilityError(f"devices file {path}: not UTF-8 text: {e}") from e
    return parse_devices(data, source=f"devices file {path}")


def parse_devices(data: Mapping[str, Any], source: str = "devices") -> tuple[DeviceSpec, ...]:
    """The devices in already-parsed TOML; every problem is reported at once."""
    problems: list[str] = []
    for key in data:
        if key != "device":
            problems.append(f"{key}: unknown key{_hint(key, ('device',))}; use [[device]] tables")
    tables = data.get("device", [])
    if not isinstance(tables, list) or not all(isinstance(t, Mapping) for t in tables):
        problems.append("device: must be [[device]] tables")
        tables = []
    elif not tables and not problems:
        problems.append(f"no devices; add a [[device]] table for each ({EXAMPLE})")
    devices: list[DeviceSpec] = []
    names: dict[str, int] = {}
    topics: dict[str, int] = {}
    for i, table in enumerate(tables):
        device = _device(i, table, problems)
        if device is None:
            continue
        where = f"device[{i}] ({device.name})"
        key = "topic" if device.convention == "zigbee2mqtt" else "state_topic"
        if device.name in names:
            problems.append(f"{where}.name: already the name of device[{names[device.name]}]")
        elif device.state_topic in topics:
            first = topics[device.state_topic]
            problems.append(f"{where}.{key}: already the state topic of device[{first}]")
        else:
            names[device.name] = topics[device.state_topic] = i
            devices.append(device)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = "\n".join(f"  {p}" for p in problems)
        raise CapabilityError(f"{source}: {count}:\n{lines}")
    return tuple(devices)


def _device(i: int, table: Mapping[str, Any], problems: list[str]) -> DeviceSpec | None:
    """The ``i``-th device, or None after adding its problems to ``problems``."""
    name = table.get("name")
    where = f"device[{i}] ({name})" if isinstance(name, str) and name else f"device[{i}]"
    before = len(problems)

    def problem(key: str, message: str) -> None:
        problems.append(f"{where}.{key}: {message}")

    convention = table.get("convention")
    if convention is None:
        problem("convention", f"missing; use {' or '.join(KEYS)}")
        return None
    if convention not in KEYS:
        problem("convention", f"{convention!r} is unknown{_hint(str(convention), tuple(KEYS))}")
        return None
    allowed = KEYS[convention]
    for key in table:
        if key not in allowed:
            problem(key, f"unknown key for a {convention} device{_hint(key, allowed)}")
    for key in REQUIRED[convention]:
        if key not in table:
            problem(key, "missing")
    for key in allowed:
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            problem(key, f"must be a non-empty string, got {value!r}")
    if isinstance(name, str) and name and not NAME.fullmatch(name):
        problem("name", f"{name!r} must match [a-z0-9_]{{1,64}} (lowercase, digits, _)")
    for key in ("topic", "state_topic", "command_topic"):
        value = table.get(key)
        if isinstance(value, str) and value:
            why = _topic_problem(value)
            if why:
                problem(key, f"{value!r} {why}")
    if len(problems) > before:
        return None
    if convention == "zigbee2mqtt":
        topic = table["topic"]
        return DeviceSpec(
            name=table["name"],
            convention="zigbee2mqtt",
            state_topic=topic,
            command_topic=f"{topic}/set",
            get_topic=f"{topic}/get",
            description=table.get("description", ""),
        )
    on, off = table.get("payload_on", "ON"), table.get("payload_off", "OFF")
    return DeviceSpec(
        name=table["name"],
        convention="homeassistant",
        state_topic=table["state_topic"],
        command_topic=table["command_topic"],
        description=table.get("description", ""),
        payload_on=on,
        payload_off=off,
        state_on=table.get("state_on", on),
        state_off=table.get("state_off", off),
    )


def _topic_problem(topic: str) -> str:
    """Why ``topic`` cannot be published or subscribed to as one topic ("" if it can)."""
    if "+" in topic or "#" in topic:
        return "has an MQTT wildcard (+ or #); name one device's own topic"
    if "\0" in topic:
        return "has a NUL character"
    if len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        return f"is longer than {MAX_TOPIC_BYTES} bytes"
    return ""


def _hint(key: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, choices, n=1)
    return f"; did you mean {close[0]}?" if close else ""


# --- what the conventions say on the wire ------------------------------------------------
@dataclass(frozen=True)
class Report:
    """A state report: ``state`` is ``on`` / ``off``, another state as reported (lowercase
    for zigbee2mqtt), or None (a report without one: a sensor); ``attributes``: the other
    keys of a zigbee2mqtt report (brightness 0..254, ...), none for Home Assistant."""

    state: str | None
    attributes: Mapping[str, Any]

    @property
    def brightness(self) -> float | None:
        """The raw brightness (0..254), when the report has a number for it."""
        value = self.attributes.get("brightness")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)


def parse_report(device: DeviceSpec, payload: bytes) -> Report | None:
    """The report in ``payload``; None for an empty one (a retained state cleared).
    CapabilityError if a zigbee2mqtt payload is not a JSON object."""
    if not payload:
        return None
    if device.convention == "homeassistant":
        text = payload.decode("utf-8", "replace").strip()
        return Report({device.state_on: "on", device.state_off: "off"}.get(text, text), {})
    try:
        doc = json.loads(payload)
    except ValueError as e:
        raise CapabilityError(f"{device.state_topic}: not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise CapabilityError(f"{device.state_topic}: not a JSON object")
    raw = doc.pop("state", None)
    return Report(None if raw is None else str(raw).lower(), doc)


@dataclass(frozen=True)
class Command:
    """A command's payload, what it asks in words, and the report that confirms it."""

    payload: bytes
    said: str  # "turn on and set brightness to 40%"
    want_state: str | None  # None: any state confirms it
    want_brightness: int | None  # raw 0..254; None: any

    def confirmed_by(self, report: Report) -> bool:
        if self.want_state is not None and report.state != self.want_state:
            return False
        if self.want_brightness is None:
            return True
        brightness = report.brightness
        return brightness is not None and abs(brightness - self.want_brightness) <= BRIGHTNESS_SLACK


def make_command(
    device: DeviceSpec,
    state: str | None,
    brightness_pct: int | None,
    attributes: Mapping[str, Any] | None,
    before: Report | None,
) -> Command:
    """The command setting ``state`` (on / off / toggle), ``brightness_pct`` (0..100) and
    ``attributes``; ``before``: the device's latest report. CapabilityError says why it
    cannot be made."""
    if state is None and brightness_pct is None and not attributes:
        raise CapabilityError("set needs a state, a brightness or attributes")
    was = before.state if before is not None else None
    # a toggle is confirmed by the opposite of the latest state, or by any report
    want = {"on": "off", "off": "on"}.get(was or "") if state == "toggle" else state
    if device.convention == "homeassistant":
        if brightness_pct is not None or attributes is not None:
            raise CapabilityError(
                f"the {device.label} takes only a state "
                "(brightness and attributes are for zigbee2mqtt devices)"
            )
        if want is None:  # a toggle, with no state to flip: Home Assistant has no TOGGLE
            raise CapabilityError(
                f"the {device.label} has not reported on or off (on {device.state_topic}), "
                "so it cannot be toggled; ask for on or off"
            )
        payload = device.payload_on if want == "on" else device.payload_off
        return Command(payload.encode(), f"turn {want}", want, None)
    doc: dict[str, Any] = dict(attributes or {})
    said = []
    if state is not None:
        doc["state"] = state.upper()
        said.append("toggle" if state == "toggle" else f"turn {state}")
    raw = None if brightness_pct is None else round(brightness_pct * BRIGHTNESS_MAX / 100)
    if raw is not None:
        doc["brightness"] = raw
        said.append(f"set brightness to {brightness_pct}%")
    if attributes:
        said.append(f"set {', '.join(attributes)}")
    return Command(json.dumps(doc).encode(), " and ".join(said), want, raw)
