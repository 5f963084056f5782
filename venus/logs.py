"""Logging to stderr in a journald-friendly format.

Under systemd (``JOURNAL_STREAM`` names our stderr) each line carries the syslog
priority prefix of sd-daemon(3) (``<3>`` for errors) and no timestamp, since
journald stamps lines itself. Elsewhere lines start with a timestamp and level.

The handler writes to a duplicate of file descriptor 2, not to fd 2 itself: sounddevice
points fd 2 at /dev/null while PortAudio initialises (at start, and on every device
rescan), and lines other threads log meanwhile (MQTT, the harness) would be lost.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Literal, TextIO

LogFormat = Literal["auto", "journal", "text"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# sd-daemon(3) priority prefixes, from syslog(3): err=3, warning=4, info=6, debug=7.
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


class JournalFormatter(logging.Formatter):
    """``<priority>logger: message``; journald parses the prefix into PRIORITY=."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        text = super().format(record)
        # A multi-line message (a traceback) stays one journal entry per line, each prefixed.
        return "\n".join(f"<{priority}>{line}" for line in text.splitlines())


def stderr_is_journal(stream: TextIO) -> bool:
    """True when systemd connected ``stream`` to the journal (see systemd.exec(5))."""
    journal = os.environ.get("JOURNAL_STREAM", "")
    if ":" not in journal:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return False
    dev, _, ino = journal.partition(":")
    return f"{st.st_dev}:{st.st_ino}" == f"{dev}:{ino}"


def setup_logging(
    level: str = "INFO", fmt: LogFormat = "auto", stream: TextIO | None = None
) -> None:
    """Configure the root logger once; calling it again replaces the handler (SIGHUP reload)."""
    if level.upper() not in LEVELS:
        raise ValueError(f"log level {level!r}: must be one of {', '.join(LEVELS)}")
    out = stream if stream is not None else sys.stderr
    use_journal = fmt == "journal" or (fmt == "auto" and stderr_is_journal(out))
    handler = logging.StreamHandler(out if stream is not None else _stderr_copy())
    handler.setFormatter(
        JournalFormatter()
        if use_journal
        else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


_COPY: dict[str, TextIO] = {}  # the one duplicate of fd 2, kept for the process's life


def _stderr_copy() -> TextIO:
    """A line-buffered text stream on a duplicate of stderr's descriptor (made once), or
    ``sys.stderr`` itself when it has no descriptor (a test's capture)."""
    if "stream" not in _COPY:
        try:
            fd = os.dup(sys.stderr.fileno())
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation: ValueError
            return sys.stderr
        encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
        _COPY["stream"] = open(  # noqa: SIM115 - kept open on purpose, see _COPY
            fd, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=True
        )
    return _COPY["stream"]
