"""Argument comparison for delegation scoring: schema-normalised exact match.

``normalise`` puts a value in a canonical form for its JSON Schema; ``same_value``
compares a hypothesis value with the reference's; ``argument_checks`` scores one pair of
calls per top-level argument (``delegation.CallPair`` counts them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MISSING",
    "REL_TOL",
    "Schemas",
    "argument_checks",
    "normalise",
    "same_value",
]

REL_TOL = 0.05  # numbers within 5% of the reference's value are equal
_EPS = 1e-12  # float noise on the tolerance's edge (105 against 100 passes)
Schemas = Mapping[str, Mapping[str, Any]]  # capability -> its input schema
MISSING = "(missing)"  # what ``argument_checks`` says a call without the key said


def normalise(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """``value`` in a canonical form for ``schema``: objects get the ``default`` of every
    missing property (recursively); strings lose outer whitespace and runs of inner
    whitespace become one space; a string under an ``enum`` / ``const`` equal to one
    allowed value but for case becomes that value; a free-text string (no ``enum``,
    ``const``, ``pattern`` or ``format``: nothing pins its spelling) is case-folded. Key
    order never matters (compared as dicts); numbers are compared by ``same_value``."""
    schema = schema if isinstance(schema, Mapping) else {}
    if isinstance(value, Mapping):
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        out = {
            k: normalise(s["default"], s)
            for k, s in props.items()
            if isinstance(s, Mapping) and "default" in s and k not in value
        }
        out.update({str(k): normalise(v, props.get(k)) for k, v in value.items()})
        return out
    if isinstance(value, list):
        return [normalise(v, schema.get("items")) for v in value]
    if isinstance(value, str):
        text = " ".join(value.split())
        allowed = [v for v in schema.get("enum", ()) if isinstance(v, str)]
        if isinstance(schema.get("const"), str):
            allowed.append(schema["const"])
        if allowed:
            hits = [a for a in allowed if a.casefold() == text.casefold()]
            return hits[0] if len(hits) == 1 else text
        return text if "pattern" in schema or "format" in schema else text.casefold()
    return value


def same_value(hypothesis: Any, reference: Any) -> bool:
    """Equal after ``normalise``: numbers within ``REL_TOL`` of the reference's (exact when
    it is 0; booleans are not numbers), objects key by key, arrays item by item."""
    if isinstance(hypothesis, bool) or isinstance(reference, bool):
        return type(hypothesis) is type(reference) and hypothesis == reference
    if isinstance(hypothesis, int | float) and isinstance(reference, int | float):
        return abs(hypothesis - reference) <= REL_TOL * abs(reference) + _EPS
    if isinstance(hypothesis, dict) and isinstance(reference, dict):
        return hypothesis.keys() == reference.keys() and all(
            same_value(hypothesis[k], reference[k]) for k in reference
        )
    if isinstance(hypothesis, list) and isinstance(reference, list):
        return len(hypothesis) == len(reference) and all(
            same_value(h, r) for h, r in zip(hypothesis, reference, strict=True)
        )
    return type(hypothesis) is type(reference) and bool(hypothesis == reference)


def argument_checks(
    hypothesis: Mapping[str, Any], reference: Mapping[str, Any], schema: Mapping[str, Any] | None
) -> tuple[tuple[str, bool, str], ...]:
    """One pair of calls, argument by argument: both normalised with the capability's
    input ``schema``, each top-level key of either side (sorted) as (key, right, what the
    hypothesis said: its normalised value as JSON, or ``MISSING``). A key on one side only
    is wrong (an extra or a missing argument); a key is right when ``same_value`` says so
    (a nested object is one argument)."""
    hn, rn = normalise(dict(hypothesis), schema), normalise(dict(reference), schema)
    return tuple(
        (
            k,
            k in hn and k in rn and same_value(hn[k], rn[k]),
            json.dumps(hn[k], sort_keys=True, ensure_ascii=False) if k in hn else MISSING,
        )
        for k in sorted(set(hn) | set(rn))
    )
