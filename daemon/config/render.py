"""Print a resolved configuration (defaults filled in, secrets masked) as TOML or JSON."""

from __future__ import annotations

import json
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import tomli_w
from pydantic import TypeAdapter

from venus.daemon.config.schema import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, VenusConfig

_ADAPTER: TypeAdapter[VenusConfig] = TypeAdapter(VenusConfig)
MASK = "********"
# what a key left unset resolves to, where that is not simply "none"
UNSET = {
    ("model", "temperature"): f"the engines' recommendation, else {DEFAULT_TEMPERATURE:g}",
    ("model", "top_p"): f"the engines' recommendation, else {DEFAULT_TOP_P:g}",
}


def mask_url_password(url: str) -> str:
    """``mqtt://user:secret@host`` -> ``mqtt://user:********@host``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def config_dict(cfg: VenusConfig) -> dict[str, dict[str, Any]]:
    """The configuration as plain TOML-compatible values, secrets masked."""
    data: dict[str, dict[str, Any]] = _ADAPTER.dump_python(cfg, mode="json")
    data["harness"]["broker_url"] = mask_url_password(data["harness"]["broker_url"])
    return data


def render_config(cfg: VenusConfig, fmt: Literal["toml", "json"] = "toml") -> str:
    data = config_dict(cfg)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    lines: list[str] = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if value is None:
                means = UNSET.get((section, key))
                lines.append(f"# {key}: not set" + (f" ({means})" if means else ""))
            else:
                lines.append(tomli_w.dumps({key: value}).rstrip("\n"))
        lines.append("")
    return "\n".join(lines)
