"""What every benchmark ends with: the machine and command it ran on, the table printed,
the rows as JSON when asked."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any


def machine() -> str:
    """The machine a figure was measured on, in words."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}"


def command() -> str:
    """The command line that produced a figure."""
    return " ".join(["venus", *sys.argv[1:]])


def report(
    rows: Sequence[Any],
    info: dict[str, Any],
    render: Callable[[Any, dict[str, Any]], str],
    json_path: Path | None,
    row: Callable[[Any], dict[str, Any]] = asdict,
) -> int:
    """Print the table (with the machine and command added to ``info``) and write the
    rows (each as ``row`` makes it) as JSON when asked; 0, the command's exit status."""
    info = {**info, "machine": machine(), "command": command()}
    sys.stdout.write(render(rows, info))
    if json_path:
        data = {**info, "rows": [row(r) for r in rows]}
        json_path.write_text(json.dumps(data, indent=2) + "\n")
    return 0
