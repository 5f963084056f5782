"""The SQLite journal of work items, on real SQLite files."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from venus.capabilities.result import ToolResult
from venus.daemon.harness.evidence import EvidenceInput, EvidenceStore
from venus.daemon.harness.item import WorkItem, new_item_id
from venus.daemon.harness.journal import COLUMNS, SCHEMA_VERSION, Journal, Retention, Transition
from venus.daemon.harness.states import HAS_RESULT, TRANSITIONS, UNFINISHED, State
from venus.errors import HarnessError

Q, R, C, F = State.QUEUED, State.RUNNING, State.COMPLETED, State.FAILED
DG, DD, X, E = State.DELIVERING, State.DELIVERED, State.CANCELLED, State.EXPIRED
DAY_S = 86400.0


def make_item(at: float = 1000.0, session: str = "session-1", **kw: Any) -> WorkItem:
    fields: dict[str, Any] = {
        "id": new_item_id(),
        "session_id": session,
        "site_id": "kitchen",
        "capability": "weather",
        "version": "1.0",
        "arguments": {"city": "Oslo", "days": [1, 2]},
        "attempt": 0,
        "deadline_s": at + 300.0,
        "state": Q,
        "created_at": at,
        "updated_at": at,
    }
    fields.update(kw)
    return WorkItem(**fields)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.open(tmp_path / "journal.sqlite3") as j:
        yield j


def walk(j: Journal, item_id: str, *path: State) -> WorkItem:
    """Move through ``path``, giving the result on the first state that needs one."""
    item = j.get(item_id)
    for state in path:
        needs = state in HAS_RESULT and j.result(item_id) is None
        item = j.move(
            item_id, state, f"to {state}", result=ToolResult.ok("sunny") if needs else None
        )
    return item


def test_the_schema_has_a_column_per_work_item_field(journal: Journal) -> None:
    """A new WorkItem field needs a schema change (and SCHEMA_VERSION + 1)."""
    raw = sqlite3.connect(journal.path)
    columns = tuple(r[1] for r in raw.execute("PRAGMA table_info(items)"))
    raw.close()
    assert columns == COLUMNS == tuple(f.name for f in dataclasses.fields(WorkItem))


def test_an_item_round_trips_with_every_field(journal: Journal) -> None:
    item = make_item(
        evidence="ab" * 32,
        supersedes="older",
        timeout_s=5.0,
        freshness_s=60.0,
        idempotent=True,
        deliver="interrupt",
        chunk_index=17,
        text='<|delegate|>{"tool": "weather"}<|/delegate|> «Ø»',
        extra={"nested": {"a": [1, None]}},
    )
    journal.add(item)
    assert journal.get(item.id) == item
    assert journal.find(item.id) == item
    assert journal.find("nope") is None
    with pytest.raises(HarnessError, match="not in the journal"):
        journal.get("nope")
    assert journal.transitions(item.id) == [Transition(1, item.id, None, Q, 1000.0, "captured")]
    assert journal.result(item.id) is None


def test_add_refuses_a_duplicate_id_and_a_state_other_than_queued(journal: Journal) -> None:
    item = make_item()
    journal.add(item)
    with pytest.raises(HarnessError, match="already in the journal"):
        journal.add(item)
    with pytest.raises(HarnessError, match="queued"):
        journal.add(make_item(state=R))
    with pytest.raises(HarnessError, match="not JSON"):
        journal.add(make_item(arguments={"x": object()}))
    assert len(journal.items()) == 1 and len(journal.transitions(item.id)) == 1


def test_the_whole_lifecycle_with_a_cut_reply(journal: Journal) -> None:
    item = make_item()
    journal.add(item)
    running = journal.move(item.id, R, "dispatched", at=1001.0, attempt=1)
    assert (running.state, running.attempt, running.updated_at) == (R, 1, 1001.0)
    done = journal.move(item.id, C, "completed", at=1002.0, result=ToolResult.ok("sunny, 21 C"))
    assert done.state is C and done.attempt == 1
    assert journal.result(item.id) == ("completed", ToolResult.ok("sunny, 21 C"))
    speaking = journal.move(item.id, DG, "reply 3", at=1003.0, delivering_from=C)
    assert speaking.delivering_from is C
    back = journal.move(item.id, C, "reply 3 cut", at=1004.0)
    assert back.state is C and back.delivering_from is None
    assert journal.move(item.id, DG, "reply 4", at=1005.0).delivering_from is C  # the default
    final = journal.move(item.id, DD, "reply 4 played", at=1006.0)
    assert final.state is DD and final.delivering_from is None and final.updated_at == 1006.0
    hops = [(t.old, t.new, t.reason) for t in journal.transitions(item.id)]
    assert hops == [
        (None, Q, "captured"),
        (Q, R, "dispatched"),
        (R, C, "completed"),
        (C, DG, "reply 3"),
        (DG, C, "reply 3 cut"),
        (C, DG, "reply 4"),
        (DG, DD, "reply 4 played"),
    ]
    assert journal.check() == []


def test_an_illegal_transition_raises_and_writes_nothing(journal: Journal) -> None:
    item = make_item()
    journal.add(item)
    with pytest.raises(HarnessError, match=r"illegal transition queued -> delivered"):
        journal.move(item.id, DD, "nonsense", result=ToolResult.ok("x"))
    assert journal.get(item.id) == item
    assert len(journal.transitions(item.id)) == 1 and journal.result(item.id) is None
    walk(journal, item.id, X)
    with pytest.raises(HarnessError, match="terminal"):
        journal.move(item.id, Q, "resurrect")
    with pytest.raises(HarnessError, match="not in the journal"):
        journal.move("unknown", R, "dispatched")


def test_a_second_result_is_refused_and_nothing_is_written(journal: Journal) -> None:
    item = make_item()
    journal.add(item)
    walk(journal, item.id, R, F)
    before = (journal.get(item.id), journal.transitions(item.id), journal.result(item.id))
    with pytest.raises(HarnessError, match="already has its final result"):
        journal.move(item.id, X, "revoked", result=ToolResult.failed("cancelled", "no"))
    assert (journal.get(item.id), journal.transitions(item.id), journal.result(item.id)) == before
    journal.move(item.id, X, "revoked")  # without one it is fine
    assert journal.result(item.id) == ("failed", ToolResult.ok("sunny"))


def test_states_that_need_a_result_need_one(journal: Journal) -> None:
    item = make_item()
    journal.add(item)
    journal.move(item.id, R, "dispatched")
    for state in (C, F):
        with pytest.raises(HarnessError, match="needs its final result"):
            journal.move(item.id, state, "no result")
    with pytest.raises(HarnessError, match="cannot go with -> queued"):
        journal.move(item.id, Q, "retry", result=ToolResult.ok("x"))
    journal.move(item.id, Q, "retry", attempt=1)
    journal.move(item.id, R, "dispatched", attempt=2)
    stopped = journal.move(item.id, X, "user", result=ToolResult.failed("cancelled", "stop"))
    assert stopped.attempt == 2
    assert journal.result(item.id) == ("cancelled", ToolResult.failed("cancelled", "stop"))


def test_delivering_from_must_match_the_state_left(journal: Journal) -> None:
    item = make_item()
    journal.add(item)
    walk(journal, item.id, R, F)
    with pytest.raises(HarnessError, match="delivered from failed"):
        journal.move(item.id, DG, "reply", delivering_from=C)
    with pytest.raises(HarnessError, match="goes with -> delivering"):
        journal.move(item.id, DD, "played", delivering_from=F)
    assert journal.get(item.id).state is F


def test_listing_filters_orders_and_counts(journal: Journal) -> None:
    a = make_item(at=1.0, session="s-a")
    b = make_item(at=2.0, session="s-b")
    c = make_item(at=3.0, session="s-a")
    d = make_item(at=4.0, session="s-b")
    for item in (c, a, d, b):  # insertion order is not the order
        journal.add(item)
    walk(journal, b.id, R)
    walk(journal, c.id, R, C, DD)
    walk(journal, d.id, E)
    ids = lambda items: [i.id for i in items]  # noqa: E731
    assert ids(journal.items()) == [d.id, c.id, b.id, a.id]
    assert ids(journal.items(limit=2)) == [d.id, c.id]
    assert ids(journal.items(states=[Q, R])) == [b.id, a.id]
    assert ids(journal.items(session_id="s-a")) == [c.id, a.id]
    assert ids(journal.items(states={DD}, session_id="s-b")) == []
    assert ids(journal.unfinished()) == [a.id, b.id]
    counts = journal.counts()
    assert counts == {**dict.fromkeys(State, 0), Q: 1, R: 1, DD: 1, E: 1}


def test_a_journal_persists_and_is_set_up_for_power_loss(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "journal.sqlite3"
    item = make_item()
    with Journal.open(path) as j:
        j.add(item)
        walk(j, item.id, R)
        assert j.evidence_dir == tmp_path / "new" / "deeper" / "journal.evidence"
        assert j._db is not None  # the connection's own settings
        assert j._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert j._db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    for d in (tmp_path / "new", tmp_path / "new" / "deeper"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()
    with Journal.open(path) as j:
        assert j.get(item.id).state is R
        with pytest.raises(HarnessError, match="closed"):
            j.close()
            j.get(item.id)


def test_a_newer_schema_asks_to_upgrade_venus(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal.open(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    with pytest.raises(HarnessError, match=r"newer venus.*upgrade venus"):
        Journal.open(path)


@pytest.mark.parametrize("content", [b"this is not sqlite " * 300, "sqlite"])
def test_a_corrupt_or_foreign_file_is_named_and_kept(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "journal.sqlite3"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:  # an SQLite database of something else
        raw = sqlite3.connect(path)
        raw.execute("CREATE TABLE songs (title TEXT)")
        raw.commit()
        raw.close()
    before = path.read_bytes()
    with pytest.raises(HarnessError) as caught:
        Journal.open(path)
    message = str(caught.value)
    assert str(path) in message and "never deletes" in message and "mv " in message
    assert path.read_bytes() == before


def test_read_only_never_creates_or_writes(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with pytest.raises(HarnessError, match="no journal at"):
        Journal.open(path, read_only=True)
    assert not path.exists()
    item = make_item()
    with Journal.open(path) as j:
        j.add(item)
    before = path.read_bytes()
    with Journal.open(path, read_only=True) as j:
        assert j.get(item.id) == item
        with pytest.raises(HarnessError, match="read-only"):
            j.move(item.id, R, "dispatched")
        with pytest.raises(HarnessError, match="read-only"):
            j.add_evidence("ab" * 32, 10)
    assert path.read_bytes() == before


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from venus.capabilities.result import ToolResult
from venus.daemon.harness.item import WorkItem
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State

j = Journal.open(Path(sys.argv[1]))
j.add(WorkItem("item-1", "s", "site", "weather", "1", {}, 0, 2e9, State.QUEUED, 1.0, 1.0))
j.move("item-1", State.RUNNING, "dispatched", attempt=1)
j.move("item-1", State.COMPLETED, "done", result=ToolResult.ok("sunny"))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_committed_move_survives_the_writer_being_killed(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    assert path.with_name(path.name + "-wal").exists()  # the moves are in the log, unmerged
    with Journal.open(path) as j:
        assert j.get("item-1").state is C and j.get("item-1").attempt == 1
        assert j.result("item-1") == ("completed", ToolResult.ok("sunny"))
        assert [t.new for t in j.transitions("item-1")] == [Q, R, C]
        assert j.check() == []


def test_retention_deletes_old_finished_items_and_unreferenced_evidence(tmp_path: Path) -> None:
    now = time.time() + 40 * DAY_S  # the journal as it looks 40 days from now
    with Journal.open(tmp_path / "journal.sqlite3") as j:
        store = EvidenceStore(j.evidence_dir)
        frame = np.full((32, 32, 3), 200, np.uint8)
        shared = store.freeze(EvidenceInput("old", (), frame=frame), audio=False, frame=True)
        kept_snap = store.freeze(
            EvidenceInput("kept", (), audio=np.zeros(1600, np.float32), frame=frame),
            audio=True,
            frame=True,
        )
        fresh = store.freeze(EvidenceInput("frozen, not yet added", ()), audio=False, frame=False)
        fresh_file = j.evidence_dir / fresh.sha256[:2] / fresh.sha256
        os.utime(fresh_file, (now - 60, now - 60))  # a capture in progress at `now`
        for snap in (shared, kept_snap):
            j.add_evidence(snap.sha256, snap.bytes)
            j.add_evidence(snap.sha256, snap.bytes)  # idempotent
        old = make_item(at=1000.0, evidence=shared.sha256)
        running = make_item(at=1000.0, evidence=kept_snap.sha256)
        recent = make_item(at=now - DAY_S)
        old_failed = make_item(at=1000.0)
        for item in (old, running, recent, old_failed):
            j.add(item)
        j.move(old.id, X, "user", at=2000.0, result=ToolResult.failed("cancelled", "x"))
        j.move(running.id, R, "dispatched", at=2000.0)
        j.move(recent.id, E, "stale", at=now - DAY_S, result=ToolResult.failed("expired", "x"))
        j.move(old_failed.id, E, "stale", at=2000.0)

        assert j.retain(30 * DAY_S, now=now) == Retention(items=2, evidence=1, files=1)
        assert j.find(old.id) is None and j.find(old_failed.id) is None
        assert j.transitions(old.id) == [] and j.result(old.id) is None
        assert {i.id for i in j.items()} == {running.id, recent.id}
        assert store.load(kept_snap.sha256).frame == shared.frame  # the shared frame stays
        with pytest.raises(HarnessError, match="missing"):
            store.load(shared.sha256)
        store.load(fresh.sha256)  # younger than the cutoff, though no item refers to it
        assert j.retain(30 * DAY_S, now=now) == Retention(0, 0, 0)
        assert j.check() == []


def test_check_finds_hand_corrupted_rows(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    a, b, c, d = (make_item() for _ in range(4))
    with Journal.open(path) as j:
        for item in (a, b, c, d):
            j.add(item)
        walk(j, b.id, R, C)
        walk(j, c.id, R)
        assert j.check() == []
    raw = sqlite3.connect(path)
    raw.execute("UPDATE items SET state = 'delivered' WHERE id = ?", (a.id,))
    raw.execute("DELETE FROM results WHERE item_id = ?", (b.id,))
    raw.execute(
        "INSERT INTO transitions (item_id, old, new, at, reason) "
        "VALUES (?, 'running', 'delivered', 0, 'x')",
        (c.id,),
    )
    raw.execute("UPDATE items SET state = 'delivered' WHERE id = ?", (c.id,))
    raw.execute("UPDATE items SET state = 'bogus' WHERE id = ?", (d.id,))
    raw.execute("INSERT INTO results VALUES ('ghost', 'completed', '{}', 0)")
    raw.commit()
    raw.close()
    with Journal.open(path) as j:
        problems = "\n".join(j.check())
    assert f"{a.id}: state delivered but its last transition is to queued" in problems
    assert f"{a.id}: delivered without a final result" in problems
    assert f"{b.id}: completed without a final result" in problems
    assert f"{c.id}: illegal transition running -> delivered" in problems
    assert f"{d.id}: unknown state 'bogus'" in problems
    assert "result of unknown work item ghost" in problems


def test_writers_on_four_threads_and_two_connections_stay_consistent(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    journals = [Journal.open(path), Journal.open(path)]  # two connections, as two processes
    per_thread = 25
    errors: list[BaseException] = []

    def writer(j: Journal, session: str) -> None:
        try:
            for _ in range(per_thread):
                item = make_item(at=time.time(), session=session)
                j.add(item)
                walk(j, item.id, R, C, DG, DD)
                assert len(j.items(session_id=session)) >= 1
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=writer, args=(journals[n % 2], f"session-{n}")) for n in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and errors == []
    j = journals[0]
    assert j.counts()[DD] == 4 * per_thread
    assert j.check() == []
    seqs = [t.seq for item in j.items() for t in j.transitions(item.id)]
    assert len(seqs) == len(set(seqs)) == 4 * per_thread * 5
    for journal in journals:
        journal.close()


MOVES = st.lists(st.tuples(st.sampled_from(list(State)), st.booleans()), max_size=10)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(moves=MOVES)
def test_random_moves_follow_the_transition_table(
    journal: Journal, moves: list[tuple[State, bool]]
) -> None:
    item = make_item()
    journal.add(item)
    state, has_result, hops = Q, False, 1
    for new, give in moves:
        allowed = (
            new in TRANSITIONS[state]
            and not (give and (has_result or new in UNFINISHED))
            and (give or has_result or new not in HAS_RESULT)
        )
        result = ToolResult.ok(f"to {new}") if give else None
        if allowed:
            assert journal.move(item.id, new, "step", result=result).state is new
            state, has_result, hops = new, has_result or give, hops + 1
        else:
            with pytest.raises(HarnessError):
                journal.move(item.id, new, "step", result=result)
        assert journal.get(item.id).state is state
        assert len(journal.transitions(item.id)) == hops
        assert (journal.result(item.id) is not None) == has_result
    assert journal.check() == []
