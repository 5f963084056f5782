"""Payloads of the MQTT protocol: JSON, size, version and JSON Schema checks.

``decode`` turns bytes into a checked JSON object and ``encode`` does the reverse, checking
what it sends as a receiver will; both raise ``ProtocolError`` naming the source and the
fault, never another exception. The schemas ship as package data (``schemas/*.json``).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from venus.capabilities.topics import VERSION, ProtocolError

# 1 MiB: a call with the default evidence inlined fits (10 s of 16 kHz 16-bit WAV is
# 320 KB, 427 KB as base64, plus a JPEG of at most 448 px a side); see fit_evidence.
MAX_PAYLOAD_BYTES = 1 << 20
MAX_SCHEMA_ERRORS = 3  # violations quoted in one ProtocolError
MAX_QUOTE_CHARS = 200  # of one violation's text (they quote the offending value)
SCHEMA_KINDS = ("status", "capabilities", "health", "call", "cancel", "reply")


@functools.cache
def _schema_text(kind: str) -> str:
    if kind not in SCHEMA_KINDS:
        raise ProtocolError(f"no schema {kind!r}; there are {', '.join(SCHEMA_KINDS)}")
    return resources.files("venus.capabilities").joinpath(f"schemas/{kind}.json").read_text()


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one message kind, a fresh copy."""
    loaded: dict[str, Any] = json.loads(_schema_text(kind))
    return loaded


@functools.cache
def _validator(kind: str) -> Any:
    return Draft202012Validator(schema(kind))


def _check(kind: str, doc: object, source: str) -> None:
    try:
        errors = list(itertools.islice(_validator(kind).iter_errors(doc), MAX_SCHEMA_ERRORS + 1))
    except RecursionError as e:
        raise ProtocolError(f"{source}: the {kind} payload is nested too deeply") from e
    if errors:
        quoted = "; ".join(_violation(e) for e in errors[:MAX_SCHEMA_ERRORS])
        more = " (and more)" if len(errors) > MAX_SCHEMA_ERRORS else ""
        raise ProtocolError(
            f"{source}: the {kind} payload breaks the protocol: {quoted}{more} "
            "(see docs/protocol.md)"
        )


def _violation(error: Any) -> str:
    if error.validator == "not" and error.validator_value == {}:  # {"not": {}}: a banned key
        return f"{error.json_path}: not allowed here"
    return f"{error.json_path}: {cut(error.message)}"


def cut(text: str) -> str:
    return text if len(text) <= MAX_QUOTE_CHARS else text[: MAX_QUOTE_CHARS - 3] + "..."


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise ValueError("an object has a key twice")
    return doc


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)


def decode(kind: str, payload: bytes, source: str) -> dict[str, Any]:
    """The checked JSON object of a payload; ProtocolError names ``source`` and the fault."""
    if not isinstance(payload, bytes | bytearray):
        raise ProtocolError(f"{source}: a payload is bytes, got {type(payload).__name__}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ProtocolError(
            f"{source}: the {kind} payload has {len(payload)} bytes, over the limit of "
            f"{MAX_PAYLOAD_BYTES}; send large evidence by sha256 reference, not inline"
        )
    try:
        doc = _loads(bytes(payload).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ProtocolError(f"{source}: the {kind} payload is not UTF-8 (byte {e.start})") from e
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"{source}: the {kind} payload is not JSON: {cut(str(e))}") from e
    if not isinstance(doc, dict):
        raise ProtocolError(f"{source}: a {kind} payload is a JSON object, not {_json_type(doc)}")
    v = doc.get("v")
    if type(v) is not int:
        raise ProtocolError(f'{source}: the {kind} payload has no integer "v" (protocol version)')
    if v > VERSION:
        raise ProtocolError(
            f"{source}: the sender speaks protocol version {v}, this venus speaks {VERSION}: "
            "upgrade venus on this node"
        )
    if v != VERSION:
        raise ProtocolError(f'{source}: "v" is {v}; protocol versions start at 1')
    _check(kind, doc, source)
    return doc


def encode(kind: str, doc: Mapping[str, Any]) -> bytes:
    """The payload of ``doc``, checked as a receiver will check it."""
    source = f"outgoing {kind}"
    try:
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        payload = text.encode("utf-8")
        _check(kind, _loads(text), source)
    except (TypeError, ValueError, RecursionError) as e:  # UnicodeEncodeError is a ValueError
        raise ProtocolError(f"{source}: not JSON: {cut(str(e))}") from e
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ProtocolError(
            f"{source}: {len(payload)} bytes, over the limit of {MAX_PAYLOAD_BYTES}; "
            "reference large evidence by sha256 (fit_evidence) and keep arguments small"
        )
    return payload


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
