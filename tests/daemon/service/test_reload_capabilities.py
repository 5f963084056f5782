"""SIGHUP and ``[capabilities]``: reason set up, changed and removed while the harness
runs (a real harness and journal, a real local chat endpoint)."""

from __future__ import annotations

from pathlib import Path

from support.chat_server import ChatServer, completion

from venus.daemon.config import load_config
from venus.daemon.harness.core import Capture, HarnessSettings
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import State
from venus.daemon.service.notify import Notifier
from venus.daemon.service.reload import Reloader
from venus.daemon.service.reloadable import capabilities_part
from venus.daemon.transports import harness_transports


def write(path: Path, capabilities: str) -> Path:
    path.write_text(f'[harness]\nbroker_url = ""\n[capabilities]\n{capabilities}')
    return path


def ask(harness: Harness, question: str) -> tuple[State, str]:
    item_id = harness.submit(Capture("reason", {"question": question}, "s1"))
    item = harness.wait(item_id, 10)
    assert item is not None
    found = harness.core.journal.result(item_id)
    return item.state, found[1].text() if found is not None else ""


def test_reason_comes_changes_and_goes_with_a_reload(tmp_path: Path) -> None:
    first, second = ChatServer().start(), ChatServer().start()
    second.reply = completion("From the second server.")
    path = write(tmp_path / "venus.toml", "")
    cfg = load_config(path)
    harness = Harness.open(tmp_path / "j.sqlite3", harness_transports(cfg), HarnessSettings())
    harness.start()
    reloader = Reloader(lambda: load_config(path), cfg, Notifier(None))
    reloader.parts = [capabilities_part(harness)]
    try:
        assert harness.core.route("reason") is None
        write(path, f'reason_url = "{first.url}"\nreason_model = "m"\n')
        assert reloader.reload().applied == (
            f"capabilities.reason_url: '' -> '{first.url}'",
            "capabilities.reason_model: '' -> 'm'",
        )
        assert ask(harness, "Why?") == (State.COMPLETED, "Forty-two.")
        write(path, f'reason_url = "{second.url}"\nreason_model = "m"\n')
        reloader.reload()
        assert ask(harness, "Why?") == (State.COMPLETED, "From the second server.")
        assert len(first.seen) == 1 and len(second.seen) == 1
        write(path, "")
        reloader.reload()
        assert harness.core.route("reason") is None
        assert harness.core.route("timer") is not None  # the fixed built-ins stay
    finally:
        harness.stop()
        first.stop()
        second.stop()
