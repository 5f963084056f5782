"""The broker credentials file of a daemon or worker: ``username:password`` on one line,
readable by its owner only (both sides refuse a file others can read)."""

from __future__ import annotations

import stat
from pathlib import Path

from venus.errors import CapabilityError


def read_credentials(path: Path) -> tuple[str, str]:
    """``(username, password)`` from a ``username:password`` file only its owner reads."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CapabilityError(f"credentials file {path}: {e.strerror}") from e
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CapabilityError(
            f"credentials file {path} is readable by others (mode {stat.S_IMODE(mode):o}); "
            f"run chmod 600 {path}"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    user, sep, password = lines[0].partition(":") if len(lines) == 1 else ("", "", "")
    if not sep or not user:
        raise CapabilityError(f"credentials file {path}: put username:password on one line")
    return user, password
