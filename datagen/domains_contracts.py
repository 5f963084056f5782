"""The capability contracts a plan may call, and validation of a call's arguments.

The built-ins are the real contracts (``clock``, ``calculator``, ``timer``,
``mqtt_device`` with the devices in ``DEVICES``, ``reason``); ``weather``, ``calendar``
and ``shopping_list`` are mock contracts defined here. ``contracts()`` has them all by
name; ``argument_errors`` checks arguments against a contract's input schema.
Re-exported by ``venus.datagen.domains``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from jsonschema import validators  # type: ignore[import-untyped]

from venus.capabilities.builtin import CLOCK, WEEKDAYS
from venus.capabilities.builtin.calculator import CALCULATOR
from venus.capabilities.builtin.devices import DeviceSpec
from venus.capabilities.builtin.mqtt_device import device_contract
from venus.capabilities.builtin.reason import reason_capability
from venus.capabilities.builtin.timer import TIMER
from venus.capabilities.contract import Contract

DAYS = ("today", "tomorrow", *(d.lower() for d in WEEKDAYS))


def _mock(name: str, description: str, schema: Mapping[str, Any], idempotent: bool) -> Contract:
    return Contract(
        name=name,
        title=name.replace("_", " ").capitalize(),
        description=description,
        input_schema=schema,
        timeout_s=15.0,
        freshness_s=600.0,
        idempotent=idempotent,
    )


_TEXT = {"type": "string", "minLength": 1, "maxLength": 64}
WEATHER = _mock(
    "weather",
    "The weather forecast for a city on a day.",
    {
        "type": "object",
        "properties": {"city": _TEXT, "day": {"enum": list(DAYS)}},
        "required": ["city", "day"],
        "additionalProperties": False,
    },
    idempotent=True,
)
CALENDAR = _mock(
    "calendar",
    "The user's calendar: list a day's events, or add one (title, day, time HH:MM).",
    {
        "type": "object",
        "properties": {
            "action": {"enum": ["list", "add"]},
            "day": {"enum": list(DAYS)},
            "title": _TEXT,
            "time": {"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d$"},
        },
        "required": ["action", "day"],
        "additionalProperties": False,
        "if": {"properties": {"action": {"const": "add"}}},
        "then": {"required": ["title", "time"]},
    },
    idempotent=False,
)
SHOPPING_LIST = _mock(
    "shopping_list",
    "The shopping list: add or remove an item.",
    {
        "type": "object",
        "properties": {"action": {"enum": ["add", "remove"]}, "item": _TEXT},
        "required": ["action", "item"],
        "additionalProperties": False,
    },
    idempotent=False,
)
DEVICES = tuple(
    DeviceSpec(name, "zigbee2mqtt", f"zigbee2mqtt/{name}", f"zigbee2mqtt/{name}/set")
    for name in ("kitchen_light", "living_room_lamp", "bedroom_light", "fan", "heater")
)


@functools.cache
def contracts() -> dict[str, Contract]:
    """Every capability a plan may call, by name (built lazily: ``reason`` logs)."""
    reason = reason_capability("http://127.0.0.1:8080/v1", model="planner").contract
    made = (CLOCK, CALCULATOR, TIMER, device_contract(DEVICES, 1.0, 2.0), reason)
    return {c.name: c for c in (*made, WEATHER, CALENDAR, SHOPPING_LIST)}


@functools.cache
def _validator(name: str) -> Any:
    schema = contracts()[name].input_schema
    return validators.validator_for(schema)(schema)


def argument_errors(capability: str, arguments: Mapping[str, Any]) -> list[str]:
    """Why ``arguments`` are not valid for ``capability`` (empty: they are)."""
    if capability not in contracts():
        return [f"unknown capability {capability!r}; known: {', '.join(contracts())}"]
    errors = _validator(capability).iter_errors(dict(arguments))
    return sorted(f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors)
