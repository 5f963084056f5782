"""The journal: every work item, each state it passed through and its one final result,
in SQLite, so a restart knows what was asked, what ran and what was said.

One connection (WAL, ``synchronous=FULL``) guarded by a lock; every public call is one
transaction, so a transition is either all there (state, history row, result) or not at
all. ``synchronous=FULL`` fsyncs the write-ahead log on every commit: an edge device that
loses power keeps every transition it reported. It costs one fsync per transition (about
a millisecond on NVMe or eMMC, tens on an SD card), a handful per delegation.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from venus.capabilities.result import ToolResult
from venus.daemon.harness import states
from venus.daemon.harness.item import WorkItem
from venus.daemon.harness.journal_check import check_item
from venus.daemon.harness.states import HAS_RESULT, TERMINAL, UNFINISHED, State
from venus.errors import CapabilityError, HarnessError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1  # PRAGMA user_version of the journals this code writes
BUSY_TIMEOUT_MS = 10_000  # how long a call waits for another process's write lock

SCHEMA = """
CREATE TABLE items (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, site_id TEXT NOT NULL,
    capability TEXT NOT NULL, version TEXT NOT NULL, arguments TEXT NOT NULL,
    attempt INTEGER NOT NULL, deadline_s REAL NOT NULL, state TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, evidence TEXT, supersedes TEXT,
    delivering_from TEXT, timeout_s REAL NOT NULL, freshness_s REAL NOT NULL,
    idempotent INTEGER NOT NULL, deliver TEXT NOT NULL, chunk_index INTEGER NOT NULL,
    text TEXT NOT NULL, extra TEXT NOT NULL
);
CREATE INDEX items_by_state ON items (state, created_at);
CREATE INDEX items_by_session ON items (session_id, created_at);
CREATE INDEX items_by_created ON items (created_at);
CREATE INDEX items_by_evidence ON items (evidence);
CREATE TABLE transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT NOT NULL, old TEXT, new TEXT NOT NULL,
    at REAL NOT NULL, reason TEXT NOT NULL
);
CREATE INDEX transitions_by_item ON transitions (item_id, seq);
CREATE TABLE results (
    item_id TEXT PRIMARY KEY, status TEXT NOT NULL, result TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE evidence (sha256 TEXT PRIMARY KEY, created_at REAL NOT NULL, bytes INTEGER NOT NULL);
"""

COLUMNS = tuple(f.name for f in fields(WorkItem))  # items has one column per field
_JSON_COLUMNS = ("arguments", "extra")


@dataclass(frozen=True)
class Transition:
    seq: int
    item_id: str
    old: State | None  # None for the first (-> queued)
    new: State
    at: float  # time.time()
    reason: str


@dataclass(frozen=True)
class Retention:
    items: int  # terminal work items deleted
    evidence: int  # evidence snapshots forgotten
    files: int = 0  # evidence files removed


class Journal:
    """The SQLite journal of work items. ``Journal.open(path)``; a context manager."""

    def __init__(self, db: sqlite3.Connection, path: Path, read_only: bool) -> None:
        self.path = path
        self.evidence_dir = path.with_suffix(".evidence")
        self.read_only = read_only
        self._db: sqlite3.Connection | None = db
        self._lock = threading.Lock()
        # Told of every transition once it is committed: (item after, state before or
        # None for a new item, reason). On the writer's thread; must not block.
        self.watchers: list[Callable[[WorkItem, State | None, str], None]] = []

    @classmethod
    def open(cls, path: Path, *, read_only: bool = False) -> Journal:
        """Open (creating when writable and missing) the journal at ``path``.

        ``read_only`` opens an existing journal without writing anything, for commands
        that only look (``venus items``); a missing file is then an error.
        """
        path = Path(path)
        if read_only:
            if not path.is_file():
                raise HarnessError(f"no journal at {path}")
            target, uri = f"file:{quote(str(path.resolve()))}?mode=ro", True
        else:
            _make_dirs(path.parent)
            target, uri = str(path), False
        new = not path.exists()
        try:
            db = sqlite3.connect(
                target,
                uri=uri,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # transactions are ours: BEGIN ... COMMIT
                check_same_thread=False,  # one connection, guarded by Journal._lock
            )
        except sqlite3.Error as e:
            raise HarnessError(f"cannot open the journal {path}: {e}") from e
        try:
            _setup(db, path, read_only)
        except BaseException:
            db.close()
            raise
        if new:
            os.chmod(path, 0o600)  # work items quote what users said
        log.debug("journal %s open (schema %d)", path, SCHEMA_VERSION)
        return cls(db, path, read_only)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def add(self, item: WorkItem, reason: str = "captured") -> None:
        """Record a new work item (in ``queued``) and its first transition."""
        if item.state is not State.QUEUED:
            raise HarnessError(f"work item {item.id}: a new item is queued, not {item.state}")
        row = _item_row(item)
        with self._tx(write=True) as db:
            if db.execute("SELECT 1 FROM items WHERE id = ?", (item.id,)).fetchone():
                raise HarnessError(f"work item {item.id} is already in the journal")
            marks = ", ".join("?" * len(COLUMNS))
            db.execute(f"INSERT INTO items ({', '.join(COLUMNS)}) VALUES ({marks})", row)
            db.execute(
                "INSERT INTO transitions (item_id, old, new, at, reason) VALUES (?, NULL, ?, ?, ?)",
                (item.id, State.QUEUED.value, item.updated_at, reason),
            )
        self._tell(item, None, reason)

    def move(
        self,
        item_id: str,
        new: State,
        reason: str,
        *,
        at: float | None = None,
        attempt: int | None = None,
        result: ToolResult | None = None,
        delivering_from: State | None = None,
    ) -> WorkItem:
        """Move an item to ``new`` in one transaction and return it updated.

        Raises HarnessError, writing nothing, on an illegal transition, a second result,
        a result with a move to queued or running, a move into a state that needs a
        result (``HAS_RESULT``) without one, or ``delivering_from`` with a move other
        than into ``delivering`` or naming another state than the one left (its default).
        """
        at = time.time() if at is None else at
        if delivering_from is not None and new is not State.DELIVERING:
            raise HarnessError(f"work item {item_id}: delivering_from goes with -> delivering")
        if result is not None and new in UNFINISHED:
            raise HarnessError(f"work item {item_id}: a final result cannot go with -> {new}")
        with self._tx(write=True) as db:
            old = self._get(db, item_id)
            states.check(item_id, old.state, new)
            had_result = bool(
                db.execute("SELECT 1 FROM results WHERE item_id = ?", (item_id,)).fetchall()
            )
            if result is not None and had_result:
                raise HarnessError(f"work item {item_id} already has its final result")
            if new in HAS_RESULT and result is None and not had_result:
                raise HarnessError(f"work item {item_id}: -> {new} needs its final result")
            if delivering_from not in (None, old.state):
                raise HarnessError(f"work item {item_id} is delivered from {old.state}")
            came_from = old.state if new is State.DELIVERING else None
            attempts = old.attempt if attempt is None else attempt
            update = "state = ?, updated_at = ?, attempt = ?, delivering_from = ?"
            came = came_from.value if came_from is not None else None
            db.execute(
                f"UPDATE items SET {update} WHERE id = ?", (new.value, at, attempts, came, item_id)
            )
            db.execute(
                "INSERT INTO transitions (item_id, old, new, at, reason) VALUES (?, ?, ?, ?, ?)",
                (item_id, old.state.value, new.value, at, reason),
            )
            if result is not None:
                db.execute(
                    "INSERT INTO results (item_id, status, result, at) VALUES (?, ?, ?, ?)",
                    (item_id, _status(new, result), json.dumps(result.to_json()), at),
                )
            moved = self._get(db, item_id)
        self._tell(moved, old.state, reason)
        return moved

    def _tell(self, item: WorkItem, old: State | None, reason: str) -> None:
        for watcher in self.watchers:
            try:
                watcher(item, old, reason)
            except Exception:  # an observer must not undo or stop the journal's work
                log.exception("a journal watcher failed on %s", item.id)

    def add_evidence(self, sha256: str, size: int) -> None:
        """Record an evidence snapshot (``EvidenceStore.freeze``); a second time is a no-op."""
        with self._tx(write=True) as db:
            db.execute(
                "INSERT OR IGNORE INTO evidence (sha256, created_at, bytes) VALUES (?, ?, ?)",
                (sha256, time.time(), size),
            )

    def retain(self, older_than_s: float, now: float | None = None) -> Retention:
        """Delete terminal items last updated more than ``older_than_s`` ago (with their
        transitions and results), then the evidence no remaining item refers to."""
        from venus.daemon.harness.evidence import EvidenceStore

        cutoff = (time.time() if now is None else now) - older_than_s
        with self._tx(write=True) as db:
            marks = ", ".join("?" * len(TERMINAL))
            old = f"SELECT id FROM items WHERE state IN ({marks}) AND updated_at < ?"
            params = (*(s.value for s in TERMINAL), cutoff)
            db.execute(f"DELETE FROM transitions WHERE item_id IN ({old})", params)
            db.execute(f"DELETE FROM results WHERE item_id IN ({old})", params)
            items = db.execute(f"DELETE FROM items WHERE id IN ({old})", params).rowcount
            evidence = db.execute(
                "DELETE FROM evidence WHERE created_at < ? AND sha256 NOT IN "
                "(SELECT evidence FROM items WHERE evidence IS NOT NULL)",
                (cutoff,),
            ).rowcount
            keep = {r[0] for r in db.execute("SELECT sha256 FROM evidence")}
            keep |= {r[0] for r in db.execute("SELECT evidence FROM items WHERE evidence NOTNULL")}
        # after the commit: a crash here leaves files the next retain() removes
        files = EvidenceStore(self.evidence_dir).delete(keep, older_than=cutoff)
        if items or evidence or files:
            log.info("journal retention: %d items, %d snapshots, %d files", items, evidence, files)
        return Retention(items, evidence, files)

    # -- reading ---------------------------------------------------------------------------

    def get(self, item_id: str) -> WorkItem:
        with self._tx() as db:
            return self._get(db, item_id)

    def find(self, item_id: str) -> WorkItem | None:
        with self._tx() as db:
            row = db.execute(_SELECT + " WHERE id = ?", (item_id,)).fetchone()
            return _item(row) if row else None

    def result(self, item_id: str) -> tuple[str, ToolResult] | None:
        """The item's final result and its status (completed, failed, cancelled, expired)."""
        with self._tx() as db:
            row = db.execute(
                "SELECT status, result FROM results WHERE item_id = ?", (item_id,)
            ).fetchone()
        if row is None:
            return None
        try:
            return row[0], ToolResult.from_json(json.loads(row[1]), f"work item {item_id}")
        except (ValueError, CapabilityError) as e:
            raise HarnessError(f"journal {self.path}: unreadable result of {item_id}: {e}") from e

    def transitions(self, item_id: str) -> list[Transition]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT seq, item_id, old, new, at, reason FROM transitions WHERE item_id = ? "
                "ORDER BY seq",
                (item_id,),
            ).fetchall()
        return [
            Transition(s, i, _state(old, i) if old is not None else None, _state(new, i), a, r)
            for s, i, old, new, a, r in rows
        ]

    def items(
        self,
        *,
        states: Collection[State] | None = None,
        session_id: str | None = None,
        limit: int | None = None,
    ) -> list[WorkItem]:
        """Work items, newest first."""
        where, params = _filters(states, session_id)
        sql = _SELECT + where + " ORDER BY created_at DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._tx() as db:
            return [_item(r) for r in db.execute(sql, params)]

    def unfinished(self) -> list[WorkItem]:
        """Items still queued or running, oldest first: what a restart resumes."""
        where, params = _filters(UNFINISHED, None)
        with self._tx() as db:
            rows = db.execute(_SELECT + where + " ORDER BY created_at, rowid", params)
            return [_item(r) for r in rows]

    def counts(self) -> dict[State, int]:
        """How many items are in each state (every state, zeros included)."""
        with self._tx() as db:
            rows = db.execute("SELECT state, count(*) FROM items GROUP BY state").fetchall()
        out = dict.fromkeys(State, 0)
        for state, n in rows:
            out[_state(state, "(count)")] = n
        return out

    def check(self) -> list[str]:
        """Consistency problems, each a sentence; empty when the journal is sound."""
        with self._tx() as db:
            problems = [f"sqlite: {r[0]}" for r in db.execute("PRAGMA quick_check") if r[0] != "ok"]
            items = {
                r[0]: r[1:] for r in db.execute("SELECT id, state, delivering_from FROM items")
            }
            history: dict[str, list[tuple[str | None, str]]] = {}
            for item_id, old, new in db.execute(
                "SELECT item_id, old, new FROM transitions ORDER BY seq"
            ):
                history.setdefault(item_id, []).append((old, new))
            results = Counter(r[0] for r in db.execute("SELECT item_id FROM results"))
        for item_id, (state, came_from) in items.items():
            problems += check_item(
                item_id, state, came_from, history.pop(item_id, []), results.pop(item_id, 0)
            )
        problems += [f"transitions of unknown work item {i}" for i in history]
        problems += [f"result of unknown work item {i}" for i in results]
        return problems

    # -- internals -------------------------------------------------------------------------

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._db
            if db is None:
                raise HarnessError(f"journal {self.path} is closed")
            if write and self.read_only:
                raise HarnessError(f"journal {self.path} was opened read-only")
            try:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield db
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as e:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise HarnessError(f"journal {self.path}: {e}") from e

    def _get(self, db: sqlite3.Connection, item_id: str) -> WorkItem:
        row = db.execute(_SELECT + " WHERE id = ?", (item_id,)).fetchone()
        if row is None:
            raise HarnessError(f"work item {item_id} is not in the journal {self.path}")
        return _item(row)


_SELECT = f"SELECT {', '.join(COLUMNS)} FROM items"


def _make_dirs(directory: Path) -> None:
    """Create ``directory`` and missing parents, each new one mode 0700."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)


def _setup(db: sqlite3.Connection, path: Path, read_only: bool) -> None:
    """Check the schema version (creating the schema in a new file) and set the pragmas."""
    unreadable = (
        f"{path} is not a readable venus journal ({{e}}). venus never deletes it: move it "
        f"aside (mv {path} {path}.broken) and the daemon starts a new journal, or restore "
        "it from a backup"
    )
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HarnessError(
                f"the journal {path} has schema version {version}, written by a newer venus "
                f"(this one reads up to {SCHEMA_VERSION}): upgrade venus"
            )
        if version == 0 and tables:
            raise HarnessError(unreadable.format(e="an SQLite file, but not a journal"))
        if read_only:
            if version == 0:
                raise HarnessError(f"{path} is an empty journal file: nothing was journaled yet")
            db.execute("PRAGMA query_only = ON")
            return
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise HarnessError(f"the journal {path} cannot use WAL mode (a network filesystem?)")
        db.execute("PRAGMA synchronous = FULL")
        if version == 0:
            db.execute("BEGIN IMMEDIATE")
            if db.execute("PRAGMA user_version").fetchone()[0] == 0:  # not another process
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
    except sqlite3.OperationalError as e:  # locked, unwritable, out of space
        raise HarnessError(f"cannot open the journal {path}: {e}") from e
    except sqlite3.DatabaseError as e:  # not a database, malformed
        raise HarnessError(unreadable.format(e=e)) from e


def _item_row(item: WorkItem) -> list[Any]:
    row: list[Any] = []
    for name in COLUMNS:
        value = getattr(item, name)
        if name in _JSON_COLUMNS:
            try:
                value = json.dumps(dict(value), sort_keys=True, ensure_ascii=False)
            except (TypeError, ValueError) as e:
                raise HarnessError(f"work item {item.id}: {name} is not JSON: {e}") from e
        elif isinstance(value, State):
            value = value.value
        elif isinstance(value, bool):
            value = int(value)
        row.append(value)
    return row


def _item(row: tuple[Any, ...]) -> WorkItem:
    values = dict(zip(COLUMNS, row, strict=True))
    item_id = values["id"]
    for name in _JSON_COLUMNS:
        try:
            values[name] = json.loads(values[name])
        except (TypeError, ValueError) as e:
            raise HarnessError(f"work item {item_id}: unreadable {name} in the journal") from e
    values["state"] = _state(values["state"], item_id)
    if values["delivering_from"] is not None:
        values["delivering_from"] = _state(values["delivering_from"], item_id)
    values["idempotent"] = bool(values["idempotent"])
    return WorkItem(**values)


def _state(value: str, item_id: str) -> State:
    try:
        return State(value)
    except ValueError:
        raise HarnessError(f"work item {item_id}: unknown state {value!r} in the journal") from None


def _status(new: State, result: ToolResult) -> str:
    """What the final result says: the state it came with, else failed or completed."""
    if new in (State.COMPLETED, State.FAILED, State.CANCELLED, State.EXPIRED):
        return str(new)
    return "failed" if result.is_error else "completed"


def _filters(wanted: Collection[State] | None, session_id: str | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if wanted is not None:
        clauses.append(f"state IN ({', '.join('?' * len(wanted))})")
        params += [State(s).value for s in wanted]
    if session_id is not None:
        clauses.append("session_id = ?")
        params.append(session_id)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
