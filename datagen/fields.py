"""Typed fields of frozen dataclasses, checked against their annotations, and their JSON
form: ``check_fields`` (Literal choices, element types, finite floats, no bools as
numbers), ``to_dict`` and ``from_dict`` (unknown and missing keys are errors naming
their path).

Generic: the caller passes the error class to raise (the plan passes ``PlanError``).
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

_HINTS: dict[type, dict[str, Any]] = {}
_QUALIFIED = re.compile(r"\bvenus\.datagen\.\w+\.")  # dropped from hints in messages
T = TypeVar("T")


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fits(value: object, hint: Any) -> bool:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in args)
    if origin is Literal:
        return isinstance(value, str) and value in args
    if origin is tuple:
        return isinstance(value, tuple) and all(_fits(v, args[0]) for v in value)
    if origin is Mapping:
        return isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
    if hint is float:
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def check_fields(obj: object, error: type[Exception]) -> None:
    """Raise ``error`` naming the first field of dataclass ``obj`` whose value does not
    fit its annotation (Literal choices, element types, finite floats, no bools as numbers)."""
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        hint = _hints(type(obj))[f.name]
        if not _fits(value, hint):
            shown = _QUALIFIED.sub("", str(hint).replace("typing.", ""))
            raise error(f"{type(obj).__name__}.{f.name}: {value!r} is not {shown}")


def to_dict(value: object) -> object:
    """A dataclass tree as JSON data: field order kept, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [to_dict(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_dict(v) for k, v in value.items()}
    return value


def from_dict(cls: type[T], data: object, where: str, error: type[Exception]) -> T:
    """Build dataclass ``cls`` from JSON data: unknown and missing keys are errors naming
    their path (``plan.turns[3].voice.pitch``), and every value is checked."""
    if not isinstance(data, dict):
        raise error(f"{where}: expected an object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            raise error(f"{where}.{key}: unknown key")
    kwargs: dict[str, Any] = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING:
                raise error(f"{where}.{name}: missing")
            continue
        kwargs[name] = _decode(data[name], _hints(cls)[name], f"{where}.{name}", error)
    try:
        return cls(**kwargs)
    except error as e:
        raise error(f"{where}: {e}") from e


def _decode(value: object, hint: Any, where: str, error: type[Exception]) -> object:
    origin, args = get_origin(hint), get_args(hint)
    if isinstance(hint, type) and is_dataclass(hint):
        return from_dict(hint, value, where, error)
    if origin is tuple and isinstance(value, list):
        return tuple(_decode(v, args[0], f"{where}[{i}]", error) for i, v in enumerate(value))
    if origin in (Union, types.UnionType) and value is not None:
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:
            return _decode(value, arms[0], where, error)
    return value
