"""`venus items`: the journal listed, read-only."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from venus.capabilities.result import ToolResult
from venus.daemon.harness.item import WorkItem, new_item_id
from venus.daemon.harness.items_cli import register
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State
from venus.errors import HarnessError

VENUS = Path(sys.executable).with_name("venus")


def parser() -> argparse.ArgumentParser:
    """The top-level options of `venus` and this subcommand, as venus.cli wires them."""
    top = argparse.ArgumentParser(prog="venus")
    top.add_argument("--config")
    top.add_argument("--log-level", type=str.upper)
    register(top.add_subparsers(dest="command", required=True))
    return top


def items(*argv: str) -> int:
    args = parser().parse_args(["items", *argv])
    code: int = args.run(args)
    return code


def item(capability: str, session: str, at: float) -> WorkItem:
    return WorkItem(
        new_item_id(),
        session,
        "kitchen",
        capability,
        "1",
        {"q": capability},
        0,
        at + 300,
        State.QUEUED,
        at,
        at,
    )


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    now = time.time()
    with Journal.open(path) as j:
        weather = item("weather", "session-aaaaaaaaaaaa", now - 7200)
        lights = item("lights", "session-bbbbbbbbbbbb", now - 90)
        search = item("search", "session-aaaaaaaaaaaa", now - 5)
        for i in (weather, lights, search):
            j.add(i)
        j.move(weather.id, State.RUNNING, "dispatched", attempt=1)
        long_text = "Sunny all week,\nhighs of 21 C and light winds from the south-west."
        j.move(weather.id, State.COMPLETED, "completed", result=ToolResult.ok(long_text))
        j.move(lights.id, State.RUNNING, "dispatched", attempt=2)
        j.move(lights.id, State.FAILED, "timeout", result=ToolResult.failed("timeout", "no answer"))
    return path


def test_the_table_lists_items_newest_first(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert items("--journal", str(journal_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "CAPABILITY", "STATE", "ATTEMPT", "AGE", "SESSION", "RESULT"]
    search, lights, weather = (line.split() for line in lines[1:])
    assert search[1:4] == ["search", "queued", "0"] and search[4] in ("5s", "6s", "7s")
    assert search[5] == "session-"
    assert len(search[0]) == 8 and len(search) == 6  # no result yet
    assert lights[1:6] == ["lights", "failed", "2", "1m", "session-"]
    assert " ".join(lights[6:]) == "timeout: no answer"
    assert weather[1:5] == ["weather", "completed", "1", "2h"]
    summary = lines[3][lines[0].index("RESULT") :]
    assert summary == "Sunny all week, highs of 21 C and lig..." and len(summary) == 40


def test_filters_by_state_session_and_limit(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def capabilities(*argv: str) -> list[str]:
        capsys.readouterr()
        assert items("--journal", str(journal_path), *argv) == 0
        return [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]]

    assert capabilities("--state", "completed", "failed") == ["lights", "weather"]
    assert capabilities("--state", "queued", "--state", "failed") == ["search", "lights"]
    assert capabilities("--session", "session-aaaaaaaaaaaa") == ["search", "weather"]
    assert capabilities("--limit", "1") == ["search"]
    capsys.readouterr()
    assert items("--journal", str(journal_path), "--state", "delivered") == 0
    out = capsys.readouterr()
    assert out.out.split() == ["ID", "CAPABILITY", "STATE", "ATTEMPT", "AGE", "SESSION", "RESULT"]
    assert f"no work items in {journal_path}" in out.err


def test_json_has_every_field_the_result_and_the_transitions(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert items("--journal", str(journal_path), "--json", "--state", "failed") == 0
    [row] = json.loads(capsys.readouterr().out)
    with Journal.open(journal_path, read_only=True) as j:
        [failed] = j.items(states=[State.FAILED])
    assert row["id"] == failed.id and row["state"] == "failed" and row["attempt"] == 2
    assert row["arguments"] == {"q": "lights"} and row["delivering_from"] is None
    assert set(row) >= {f for f in WorkItem.__dataclass_fields__}
    assert row["result_status"] == "failed"
    assert ToolResult.from_json(row["result"]) == ToolResult.failed("timeout", "no answer")
    assert [(t["old"], t["new"], t["reason"]) for t in row["transitions"]] == [
        (None, "queued", "captured"),
        ("queued", "running", "dispatched"),
        ("running", "failed", "timeout"),
    ]


def test_a_missing_journal_is_reported_and_never_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "absent" / "journal.sqlite3"
    assert items("--journal", str(path)) == 1
    assert f"no journal at {path}" in capsys.readouterr().err
    assert not path.parent.exists()


def test_the_journal_is_not_written(journal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = journal_path.read_bytes()
    assert items("--journal", str(journal_path), "--json") == 0
    assert journal_path.read_bytes() == before
    with (
        pytest.raises(HarnessError, match="read-only"),
        Journal.open(journal_path, read_only=True) as j,
    ):
        j.add_evidence("ab" * 32, 1)


def test_an_unknown_state_lists_the_states(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        items("--state", "done")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'done'" in err
    assert all(s.value in err for s in State)
    with pytest.raises(SystemExit):
        items("--limit", "0")


def test_the_default_journal_comes_from_the_configuration(
    journal_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "venus.toml"
    config.write_text(f'[harness]\njournal = "{journal_path}"\n')
    args = parser().parse_args(["--config", str(config), "items", "--limit", "1"])
    assert args.run(args) == 0
    assert "search" in capsys.readouterr().out


def test_venus_items_from_the_command_line(journal_path: Path) -> None:
    helped = subprocess.run(
        [str(VENUS), "items", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert helped.returncode == 0 and "--journal FILE" in helped.stdout, helped.stderr
    done = subprocess.run(
        [str(VENUS), "items", "--journal", str(journal_path), "--state", "failed"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "lights" in done.stdout and "timeout: no answer" in done.stdout


def test_reads_while_the_daemon_writes(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Journal.open(journal_path) as daemon:
        late = item("timer", "session-cccccccccccc", time.time())
        daemon.add(late)
        daemon.move(late.id, State.RUNNING, "dispatched", attempt=1)
        assert items("--journal", str(journal_path), "--state", "running") == 0
        assert "timer" in capsys.readouterr().out
        daemon.move(late.id, State.CANCELLED, "user", result=ToolResult.failed("cancelled", "x"))
        assert daemon.check() == []


def test_a_damaged_journal_is_an_error_that_names_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    path.write_bytes(b"\0garbage" * 512)
    with pytest.raises(HarnessError, match=str(path)):
        items("--journal", str(path))
    assert path.read_bytes() == b"\0garbage" * 512
