"""Capability contracts: an MCP tool definition plus what the harness needs to know.

A contract is what a capability promises: its name and input / output schemas (MCP
``tools/list`` shape) and, under ``_meta``, the ``venus/*`` keys: how long a call may
take, how long its result stays worth saying, what evidence it needs, whether it may be
re-run or cancelled, and how its result is delivered::

    {"name": "weather", "title": "Weather", "description": "...",
     "inputSchema": {...}, "outputSchema": {...}, "annotations": {...},
     "_meta": {"venus/version": "1", "venus/timeout_s": 10, "venus/freshness_s": 600,
               "venus/evidence": "none", "venus/idempotent": true,
               "venus/cancellable": true, "venus/deliver": "when_idle"}}
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from jsonschema import validators  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

from venus.errors import CapabilityError

Evidence = Literal["none", "audio", "frame", "audio+frame"]
Deliver = Literal["when_idle", "interrupt", "silent"]
NAME = re.compile(r"[a-z0-9_]{1,64}")  # used with fullmatch: "$" would let "x\n" through
META = "venus/"
MAX_SECONDS = 1e9  # timeouts and freshness beyond ~31 years are mistakes
_FIELDS = ("version", "timeout_s", "freshness_s", "evidence", "idempotent", "cancellable")
META_KEYS = tuple(f"{META}{k}" for k in (*_FIELDS, "deliver"))  # what ``_meta`` may carry


@dataclass(frozen=True)
class Contract:
    name: str
    version: str = "1"
    title: str = ""
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 30.0  # a call still running after this fails with "timeout"
    freshness_s: float = 300.0  # a result older than this is not said any more (Expired)
    evidence: Evidence = "none"  # what the call needs besides the text and the dialogue
    idempotent: bool = False  # may be re-run: retried, and re-dispatched after a restart
    cancellable: bool = True
    deliver: Deliver = "when_idle"  # silent: delivered when its result is recorded

    def __post_init__(self) -> None:
        name: object = self.name
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise CapabilityError(f"capability name {name!r} must match [a-z0-9_]{{1,64}}")
        where = f"capability {name}"
        for key in ("version", "title", "description"):
            if not isinstance(getattr(self, key), str):
                raise CapabilityError(f"{where}: {key} must be a string")
        for key in ("timeout_s", "freshness_s"):
            value: object = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= MAX_SECONDS  # also: NaN, inf, a huge int
            ):
                raise CapabilityError(
                    f"{where}: {key} must be a positive number of seconds, got {value!r}"
                )
        for key in ("idempotent", "cancellable"):
            if not isinstance(getattr(self, key), bool):
                raise CapabilityError(f"{where}: {key} must be true or false")
        for key, choices in (("evidence", get_args(Evidence)), ("deliver", get_args(Deliver))):
            value = getattr(self, key)
            if not isinstance(value, str) or value not in choices:
                raise CapabilityError(
                    f"{where}: {key} {value!r} is not one of {', '.join(choices)}"
                )
        annotations: object = self.annotations
        if not isinstance(annotations, Mapping):
            raise CapabilityError(f"{where}: annotations must be an object")
        _check_schema(where, "input_schema", self.input_schema)
        if self.output_schema is not None:
            _check_schema(where, "output_schema", self.output_schema)

    @property
    def wants_audio(self) -> bool:
        return "audio" in self.evidence

    @property
    def wants_frame(self) -> bool:
        return "frame" in self.evidence

    def to_tool(self) -> dict[str, Any]:
        """The MCP tool definition, ``venus/*`` keys under ``_meta``."""
        tool: dict[str, Any] = {
            "name": self.name,
            "title": self.title or self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
            "annotations": dict(self.annotations),
            "_meta": {
                f"{META}version": self.version,
                f"{META}timeout_s": self.timeout_s,
                f"{META}freshness_s": self.freshness_s,
                f"{META}evidence": self.evidence,
                f"{META}idempotent": self.idempotent,
                f"{META}cancellable": self.cancellable,
                f"{META}deliver": self.deliver,
            },
        }
        if self.output_schema is not None:
            tool["outputSchema"] = dict(self.output_schema)
        return tool

    @classmethod
    def from_tool(cls, tool: Mapping[str, Any], source: str = "tool definition") -> Contract:
        """Parse an MCP tool definition; CapabilityError names what is wrong and where.

        Keys outside ``venus/*`` in ``_meta`` are left alone (MCP lets anyone add some);
        an unknown ``venus/*`` key is an error, so that a typo does not silently fall
        back to a default.
        """
        if not isinstance(tool, Mapping):
            raise CapabilityError(f"{source}: a tool definition is a JSON object")
        name = tool.get("name")
        if not isinstance(name, str):
            raise CapabilityError(f"{source}: no string 'name'")
        meta = tool.get("_meta", {})
        if not isinstance(meta, Mapping):
            raise CapabilityError(f"{source} ({name}): '_meta' is not an object")
        for key in meta:
            if isinstance(key, str) and key.startswith(META) and key not in META_KEYS:
                close = difflib.get_close_matches(key, META_KEYS, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise CapabilityError(f"{source} ({name}): _meta key {key!r} is unknown{hint}")
        for key in ("inputSchema", "outputSchema", "annotations"):
            value = tool.get(key)
            if value is not None and not isinstance(value, Mapping):
                raise CapabilityError(f"{source} ({name}): {key!r} must be an object")
        version = meta.get(f"{META}version", "1")
        output = tool.get("outputSchema")
        try:
            return cls(
                name=name,
                # a JSON integer is accepted as a version ("venus/version": 2)
                version=str(version) if type(version) is int else version,
                title=tool.get("title", ""),
                description=tool.get("description", ""),
                input_schema=dict(tool.get("inputSchema") or {"type": "object"}),
                output_schema=dict(output) if output is not None else None,
                annotations=dict(tool.get("annotations") or {}),
                timeout_s=meta.get(f"{META}timeout_s", 30.0),
                freshness_s=meta.get(f"{META}freshness_s", 300.0),
                evidence=meta.get(f"{META}evidence", "none"),
                idempotent=meta.get(f"{META}idempotent", False),
                cancellable=meta.get(f"{META}cancellable", True),
                deliver=meta.get(f"{META}deliver", "when_idle"),
            )
        except CapabilityError as e:
            raise CapabilityError(f"{source}: {e}") from e


def _check_schema(where: str, key: str, schema: object) -> None:
    """A JSON Schema for an object (MCP asks that of input and output schemas)."""
    if not isinstance(schema, Mapping):
        raise CapabilityError(f"{where}: {key} must be a JSON Schema object")
    if schema.get("type") != "object":
        raise CapabilityError(f'{where}: {key} must have "type": "object"')
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as e:
        raise CapabilityError(
            f"{where}: {key} is not a valid JSON Schema: {e.message} at {e.json_path}"
        ) from e
