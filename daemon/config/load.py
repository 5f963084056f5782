"""Read ``venus.toml``, validate every key, and report every problem at once.

Problems name the full key path (``audio.sample_rte``) and what is allowed, with the
nearest valid key for a typo. Validation itself is pydantic's (strict types, ranges,
unknown keys forbidden); this module turns its errors into messages for people.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from venus.daemon.config.schema import VenusConfig
from venus.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_ADAPTER: TypeAdapter[VenusConfig] = TypeAdapter(VenusConfig)
_TOML_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "array",
    dict: "table",
}


@dataclass(frozen=True)
class ConfigProblem:
    """One invalid key: its dotted path ("" for the whole file) and what is wrong."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


class ConfigInvalid(ConfigError):
    """The configuration has one or more problems; ``problems`` lists them all."""

    def __init__(self, source: str, problems: list[ConfigProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{source}: {count}:\n{lines}")


def load_config(path: Path) -> VenusConfig:
    """Load and validate a configuration file; raise ConfigError naming the file."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; copy the example systemd/venus.toml there or pass --config FILE"
        ) from None
    except PermissionError:
        raise ConfigError(f"{path}: permission denied; make it readable by this user") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; pass the TOML file itself") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigInvalid(str(path), [ConfigProblem("", f"not valid TOML: {e}")]) from e
    except UnicodeDecodeError as e:
        raise ConfigInvalid(str(path), [ConfigProblem("", f"not UTF-8 text: {e}")]) from e
    return parse_config(data, source=str(path))


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> VenusConfig:
    """Validate already-parsed TOML data."""
    try:
        return _ADAPTER.validate_python(dict(data))
    except ValidationError as e:
        errors = e.errors()
        locs = [tuple(err["loc"]) for err in errors]
        # A container's complaint that follows from its items' errors ("too short after
        # validation") repeats them; report the items only.
        kept = [
            err
            for err, loc in zip(errors, locs, strict=True)
            if not any(other[: len(loc)] == loc and len(other) > len(loc) for other in locs)
        ]
        raise ConfigInvalid(source, [_problem(err) for err in kept]) from None


def _key(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _section_class(names: list[str]) -> type | None:
    """The dataclass holding the key at ``names`` (its parent path), if any."""
    cls: Any = VenusConfig
    for name in names:
        info = _fields(cls).get(name)
        if info is None or not (
            isinstance(info.annotation, type) and is_dataclass(info.annotation)
        ):
            return None
        cls = info.annotation
    return cls if isinstance(cls, type) else None


def _fields(cls: Any) -> dict[str, FieldInfo]:
    fields: dict[str, FieldInfo] = getattr(cls, "__pydantic_fields__", {})
    return fields


def _field(loc: tuple[int | str, ...]) -> FieldInfo | None:
    names = [p for p in loc if isinstance(p, str)]
    if not names:
        return None
    parent = _section_class(names[:-1])
    return _fields(parent).get(names[-1]) if parent is not None else None


def _allowed_range(name: str, info: FieldInfo | None) -> str:
    low = high = ""
    for m in info.metadata if info is not None else []:
        if isinstance(m, annotated_types.Ge):
            low = f"{m.ge} <="
        elif isinstance(m, annotated_types.Gt):
            low = f"{m.gt} <"
        elif isinstance(m, annotated_types.Le):
            high = f"<= {m.le}"
        elif isinstance(m, annotated_types.Lt):
            high = f"< {m.lt}"
    return " ".join(x for x in (low, name, high) if x)


def _toml_type(value: object) -> str:
    return _TOML_TYPES.get(type(value), type(value).__name__)


def _problem(err: Any) -> ConfigProblem:
    loc: tuple[int | str, ...] = tuple(err["loc"])
    kind: str = err["type"]
    value = err.get("input")
    key = _key(loc)
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        parent = _section_class([p for p in loc[:-1] if isinstance(p, str)])
        valid = sorted(_fields(parent)) if parent is not None else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"valid keys here: {', '.join(valid)}"
        return ConfigProblem(key, f"unknown key; {hint}")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return ConfigProblem(
            key, f"{value!r} is out of range; allowed: {_allowed_range(str(loc[-1]), _field(loc))}"
        )
    if kind == "literal_error":
        return ConfigProblem(
            key, f"{value!r} is not allowed; choose one of {err['ctx']['expected']}"
        )
    if kind == "dataclass_type":
        return ConfigProblem(key, f"must be a table ([{key}]), got {_toml_type(value)} {value!r}")
    if kind == "too_short":
        return ConfigProblem(key, f"must list at least {err['ctx']['min_length']} entries")
    if kind == "missing_argument":
        return ConfigProblem(key, "required key is missing")
    if kind == "value_error":
        return ConfigProblem(key, str(err["msg"]).removeprefix("Value error, "))
    message = str(err["msg"])
    message = message[:1].lower() + message[1:]
    return ConfigProblem(key, f"{message} (got {_toml_type(value)} {value!r})")
