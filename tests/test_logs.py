"""Logging lines: syslog priority prefixes for journald, timestamps elsewhere."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import tempfile

import pytest

from venus.logs import setup_logging, stderr_is_journal


@pytest.fixture(autouse=True)
def _restore_root_logger():  # type: ignore[no-untyped-def]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_journal_format_prefixes_priority() -> None:
    out = io.StringIO()
    setup_logging("DEBUG", "journal", stream=out)
    log = logging.getLogger("venus.test")
    log.error("broken %s", "mic")
    log.warning("slow")
    log.info("ready")
    log.debug("chunk")
    assert out.getvalue().splitlines() == [
        "<3>venus.test: broken mic",
        "<4>venus.test: slow",
        "<6>venus.test: ready",
        "<7>venus.test: chunk",
    ]


def test_level_filters() -> None:
    out = io.StringIO()
    setup_logging("WARNING", "text", stream=out)
    logging.getLogger("venus.test").info("hidden")
    logging.getLogger("venus.test").warning("shown")
    assert "hidden" not in out.getvalue()
    assert "WARNING venus.test: shown" in out.getvalue()


def test_bad_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        setup_logging("LOUD")


def test_journal_stream_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryFile("w") as f:
        st = os.fstat(f.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert stderr_is_journal(f)
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
        assert not stderr_is_journal(f)
    monkeypatch.delenv("JOURNAL_STREAM")
    assert not stderr_is_journal(io.StringIO())


def test_lines_survive_a_library_silencing_stderr() -> None:
    """sounddevice points fd 2 at /dev/null while PortAudio initialises; what other threads
    log meanwhile must still come out."""
    script = (
        "import logging, os\n"
        "from venus.logs import setup_logging\n"
        "setup_logging('INFO', 'text')\n"
        "saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)\n"
        "os.dup2(null, 2)\n"
        "logging.getLogger('venus.test').info('said while fd 2 is silenced')\n"
        "os.dup2(saved, 2)\n"
        "logging.getLogger('venus.test').info('said after')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "said while fd 2 is silenced" in done.stderr
    assert "said after" in done.stderr
