"""Kill the harness with SIGKILL mid-run, restart it: nothing lost, nothing duplicated."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State

RUNNER = Path(__file__).resolve().parents[2] / "support" / "harness_proc.py"
ITEMS = 200


def start(journal: Path, effects: Path, submit: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RUNNER), "--journal", str(journal), "--effects", str(effects),
         "--submit", str(submit)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def results_so_far(journal: Path) -> int:
    with Journal.open(journal, read_only=True) as j:
        return sum(1 for item in j.items() if j.result(item.id) is not None)


def test_sigkill_mid_run_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    journal, effects = tmp_path / "journal.sqlite3", tmp_path / "effects.log"
    first = start(journal, effects, ITEMS)
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "captured"  # all 200 journalled
    deadline = time.monotonic() + 60
    while results_so_far(journal) < ITEMS // 5:
        assert time.monotonic() < deadline and first.poll() is None, "no progress"
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = results_so_far(journal)
    assert killed_at < ITEMS, "the run finished before the kill; make the items slower"

    second = start(journal, effects, 0)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and out.strip().endswith("done")

    ran = collections.Counter(effects.read_text().split())
    with Journal.open(journal, read_only=True) as j:
        items = j.items()
        assert len(items) == ITEMS  # nothing lost
        assert j.check() == []
        for item in items:
            final = j.result(item.id)
            assert final is not None, f"{item.id} has no final result"
            assert item.state not in (State.QUEUED, State.RUNNING), item
            status, result = final
            if item.capability == "slow_once":
                assert ran[item.id] <= 1, f"{item.id} (not idempotent) ran {ran[item.id]} times"
                if status == "failed":
                    assert result.error is not None and result.error.code == "daemon_restarted"
            else:
                assert status == "completed" or item.state is State.EXPIRED, item
            if status == "completed":
                assert ran[item.id] >= 1
        restarted = {i.capability for i in items if (j.result(i.id) or ("", None))[0] == "failed"}
    # dispatched but unfinished at the kill: only the non-idempotent ones may not be re-run
    assert restarted <= {"slow_once"}
