"""Parsing the model's private ``<|delegate|> ... <|/delegate|>`` spans.

The span holds one JSON object in MCP ``tools/call`` shape::

    {"name": "weather", "arguments": {"city": "Paris", "day": "tomorrow"}}

(``arguments`` may be omitted: ``{}``). The model's decisions on earlier items (it sees
their short ids in ``<|result|>`` text) take the same span::

    {"name": "weather", "arguments": {...}, "supersedes": "3f2a9c1b"}   revise / replace
    {"cancel": "3f2a9c1b"}                                             cancel
    {"retry": "3f2a9c1b"}                                              retry

(retain is saying nothing). Anything else (not JSON, not an object, no string ``name``,
non-object ``arguments``, a span cut off by the token budget) is malformed: it is logged,
counted in the timeline, and never spoken nor dispatched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

DECISIONS: tuple[Literal["cancel", "retry"], ...] = ("cancel", "retry")
MAX_SPAN_CHARS = 8192  # a call longer than this is malformed (and surely a runaway decode)


@dataclass(frozen=True)
class ParsedCall:
    raw: str
    name: str | None  # set when valid (for cancel / retry: "cancel" / "retry")
    arguments: dict[str, Any] | None
    error: str | None  # why it is malformed; None when valid
    action: Literal["call", "cancel", "retry"] = "call"
    target: str | None = None  # the item a decision is about (supersedes, cancel, retry)

    @property
    def valid(self) -> bool:
        return self.error is None


def parse_call(raw: str, truncated: bool = False) -> ParsedCall:
    """The call in a span's decoded text; ``truncated``: the span never closed."""

    def bad(why: str) -> ParsedCall:
        return ParsedCall(raw=raw, name=None, arguments=None, error=why)

    if truncated:
        return bad("the span did not close within the delegation token budget")
    if len(raw) > MAX_SPAN_CHARS:
        return bad(f"the span is longer than {MAX_SPAN_CHARS} characters")
    try:
        call = json.loads(raw)
    except json.JSONDecodeError as e:
        return bad(f"not JSON: {e.msg} at character {e.pos}")
    if not isinstance(call, dict):
        return bad(f"a JSON {type(call).__name__}, not an object")
    for action in DECISIONS:
        if action in call:
            target = call[action]
            if set(call) != {action} or not isinstance(target, str) or not target.strip():
                return bad(f'"{action}" takes one item id and nothing else')
            return ParsedCall(raw, action, {}, None, action=action, target=target.strip())
    name = call.get("name")
    if not isinstance(name, str) or not name.strip():
        return bad('no "name" string')
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        return bad('"arguments" is not an object')
    unknown = sorted(set(call) - {"name", "arguments", "supersedes"})
    if unknown:
        return bad(f"unknown keys {', '.join(unknown)}")
    target = call.get("supersedes")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        return bad('"supersedes" is not an item id')
    return ParsedCall(
        raw=raw,
        name=name.strip(),
        arguments=arguments,
        error=None,
        target=target.strip() if target else None,
    )
