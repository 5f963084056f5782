"""The memory store's entries on disk, in SQLite next to the journal, so that a daemon
restart within a session remembers what it saw and heard.

One connection (WAL) guarded by a lock; every public call is one transaction. The
frontend saves ``MemoryStore.take_changes()`` every few chunks, so ``synchronous=NORMAL``:
a power cut may lose the last saves, never the file. The file holds what the camera saw,
so it is created mode 0600, ``secure_delete`` zeroes what is deleted, and ``wipe``
checkpoints the write-ahead log (and after a full wipe vacuums) so the bytes are gone
from disk, not just unlinked. A file this code cannot read is never deleted or
overwritten: the error says how to move it aside.

Arrays are stored little-endian: keys as float32, tokens as float16 [rows, dim].
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from venus.daemon.memory.store import Entry
from venus.errors import MemoryStoreError

log = logging.getLogger(__name__)

MEMORY_FILE = "memory.sqlite3"  # beside the journal unless [memory] path says otherwise
SCHEMA_VERSION = 1  # meta.schema_version of the files this code writes
BUSY_TIMEOUT_MS = 10_000  # how long a call waits for another process's write lock

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE session (
    id TEXT PRIMARY KEY, started_at REAL, updated_at REAL, last_chunk INTEGER, ended_at REAL
);
CREATE TABLE entry (
    session TEXT, id INTEGER, kind TEXT, first_chunk INTEGER, last_chunk INTEGER,
    start_s REAL, end_s REAL, tier INTEGER, merged INTEGER, rows INTEGER, dim INTEGER,
    key BLOB, tokens BLOB, PRIMARY KEY (session, id)
);
"""
_COLUMNS = {
    "meta": ("key", "value"),
    "session": ("id", "started_at", "updated_at", "last_chunk", "ended_at"),
    "entry": (
        "session", "id", "kind", "first_chunk", "last_chunk", "start_s", "end_s", "tier",
        "merged", "rows", "dim", "key", "tokens",
    ),
}  # fmt: skip
_ENTRY_COLUMNS = ", ".join(_COLUMNS["entry"])
_KEY_DTYPE = np.dtype("<f4")
_TOKEN_DTYPE = np.dtype("<f2")


def memory_path(configured: Path | None, journal: Path) -> Path:
    """Where the memory file is: ``[memory] path``, else beside ``[harness] journal``."""
    return configured or journal.parent / MEMORY_FILE


@dataclass(frozen=True)
class SessionInfo:
    id: str
    started_at: float  # time.time() of its first save
    updated_at: float  # ... and of its last
    last_chunk: int  # the chunk its last save was made at
    ended_at: float | None = None  # time.time() it ended (kept by keep_after_session)


class MemoryFile:
    """The SQLite file of memory entries at ``path`` (created when missing); a context
    manager."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        _make_dirs(self.path.parent)
        if not self.path.exists():
            try:  # private from the first byte: it holds what the camera saw
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass  # another process made it first
            except OSError as e:
                raise MemoryStoreError(f"cannot create the memory file {self.path}: {e}") from e
        try:
            db = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # transactions are ours: BEGIN ... COMMIT
                check_same_thread=False,  # one connection, guarded by self._lock
            )
        except sqlite3.Error as e:
            raise MemoryStoreError(f"cannot open the memory file {self.path}: {e}") from e
        try:
            _setup(db, self.path)
        except BaseException:
            db.close()
            raise
        self._db: sqlite3.Connection | None = db
        self._lock = threading.Lock()
        log.debug("memory file %s open (schema %d)", self.path, SCHEMA_VERSION)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> MemoryFile:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    def latest(self) -> SessionInfo | None:
        """The most recently saved session that has not ended (``end``), or None."""
        with self._tx() as db:
            row = db.execute(
                "SELECT id, started_at, updated_at, last_chunk FROM session "
                "WHERE ended_at IS NULL ORDER BY updated_at DESC, rowid DESC LIMIT 1"
            ).fetchone()
        return SessionInfo(row[0], row[1], row[2], row[3]) if row else None

    def sessions(self) -> list[tuple[SessionInfo, int, int]]:
        """Every session, most recent first, with its entry count and stored bytes."""
        with self._tx() as db:
            rows = db.execute(
                "SELECT s.id, s.started_at, s.updated_at, s.last_chunk, s.ended_at, "
                "COUNT(e.id), COALESCE(SUM(LENGTH(e.key) + LENGTH(e.tokens)), 0) FROM session s "
                "LEFT JOIN entry e ON e.session = s.id GROUP BY s.id "
                "ORDER BY s.updated_at DESC, s.rowid DESC"
            ).fetchall()
        return [(SessionInfo(r[0], r[1], r[2], r[3], r[4]), r[5], r[6]) for r in rows]

    def load(self, session_id: str) -> list[Entry]:
        """The session's entries, oldest first (none for an unknown session)."""
        with self._tx() as db:
            rows = db.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entry WHERE session = ? ORDER BY id",
                (session_id,),
            ).fetchall()
        return [self._entry(row) for row in rows]

    # -- writing ---------------------------------------------------------------------------

    def save(
        self,
        session_id: str,
        upserts: Iterable[Entry],
        removed: Iterable[int],
        last_chunk: int,
        now: float | None = None,
    ) -> None:
        """Write ``upserts`` (new or changed entries), delete the ids in ``removed`` and
        note the session's ``last_chunk``, in one transaction (``MemoryStore.take_changes``
        gives the first two)."""
        now = time.time() if now is None else now
        rows = [_entry_row(session_id, e) for e in upserts]
        gone = [(session_id, int(i)) for i in removed]
        with self._tx(write=True) as db:
            db.execute(
                "INSERT INTO session (id, started_at, updated_at, last_chunk) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, "
                "last_chunk = excluded.last_chunk",
                (session_id, now, now, last_chunk),
            )
            marks = ", ".join("?" * len(_COLUMNS["entry"]))
            db.executemany(
                f"INSERT OR REPLACE INTO entry ({_ENTRY_COLUMNS}) VALUES ({marks})", rows
            )
            db.executemany("DELETE FROM entry WHERE session = ? AND id = ?", gone)

    def end(self, session_id: str, now: float | None = None) -> None:
        """Mark the session ended: kept (``keep_after_session``), but never continued."""
        now = time.time() if now is None else now
        with self._tx(write=True) as db:
            db.execute("UPDATE session SET ended_at = ? WHERE id = ?", (now, session_id))

    def wipe(self, session_id: str | None = None) -> int:
        """Delete one session (its entries and its row), or every session; return how many
        entries went. The bytes are zeroed and the write-ahead log emptied; after a full
        wipe the file is vacuumed, so it shrinks to its empty schema."""
        with self._tx(write=True) as db:
            if session_id is None:
                count = db.execute("DELETE FROM entry").rowcount
                db.execute("DELETE FROM session")
            else:
                count = db.execute("DELETE FROM entry WHERE session = ?", (session_id,)).rowcount
                db.execute("DELETE FROM session WHERE id = ?", (session_id,))
        with self._lock:
            db = self._open()
            try:
                if session_id is None:
                    db.execute("VACUUM")
                busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as e:
                busy, why = 1, str(e)
            else:
                why = "another process is reading it"
        if busy:
            raise MemoryStoreError(
                f"memory file {self.path}: wiped, but old copies may remain in its write-ahead "
                f"log ({why}); run the wipe again when the daemon is stopped"
            )
        log.info("memory file %s: wiped %d entries of %s", self.path, count, session_id or "all")
        return count

    # -- internals -------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            raise MemoryStoreError(f"memory file {self.path} is closed")
        return self._db

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._open()
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
                raise MemoryStoreError(f"memory file {self.path}: {e}") from e

    def _entry(self, row: tuple[Any, ...]) -> Entry:
        (session, entry_id, kind, first, last, start_s, end_s, tier, merged, rows, dim) = row[:11]
        key_blob, token_blob = row[11], row[12]
        where = f"memory file {self.path}: session {session!r}, entry {entry_id}"
        if not (isinstance(rows, int) and isinstance(dim, int) and rows >= 1 and dim >= 1):
            raise MemoryStoreError(f"{where}: bad shape {rows!r} x {dim!r}; {_WHAT_TO_DO}")
        if not isinstance(key_blob, bytes) or len(key_blob) != dim * _KEY_DTYPE.itemsize:
            raise MemoryStoreError(f"{where}: the key is not {dim} float32s; {_WHAT_TO_DO}")
        if not isinstance(token_blob, bytes) or len(token_blob) != rows * dim * 2:  # float16
            raise MemoryStoreError(
                f"{where}: the tokens are not {rows} x {dim} float16s; {_WHAT_TO_DO}"
            )
        sane = isinstance(kind, str) and kind and isinstance(tier, int) and tier >= 0
        if not (sane and isinstance(merged, int) and merged >= 1):
            raise MemoryStoreError(
                f"{where}: bad kind {kind!r}, tier {tier!r} or count {merged!r}; {_WHAT_TO_DO}"
            )
        key = np.frombuffer(key_blob, _KEY_DTYPE).astype(np.float32, copy=False)
        tokens = np.frombuffer(token_blob, _TOKEN_DTYPE).astype(np.float16, copy=False)
        tokens = tokens.reshape(rows, dim)
        return Entry(entry_id, kind, first, last, start_s, end_s, tier, merged, key, tokens)


_WHAT_TO_DO = "wipe the session (venus memory wipe) or move the file aside"


def _entry_row(session_id: str, e: Entry) -> tuple[Any, ...]:
    rows, dim = e.tokens.shape
    return (
        session_id, e.id, e.kind, e.first_chunk, e.last_chunk, e.start_s, e.end_s, e.tier,
        e.merged, rows, dim, np.ascontiguousarray(e.key, _KEY_DTYPE).tobytes(),
        np.ascontiguousarray(e.tokens, _TOKEN_DTYPE).tobytes(),
    )  # fmt: skip


def _make_dirs(directory: Path) -> None:
    """Create ``directory`` and missing parents, each new one mode 0700."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700, exist_ok=True)
        except OSError as e:
            raise MemoryStoreError(f"cannot create the memory directory {d}: {e}") from e


def _setup(db: sqlite3.Connection, path: Path) -> None:
    """Check the schema (creating it in an empty file), then set the pragmas. Reads before
    it writes, so a file that is not ours is left as it was."""
    unreadable = (
        f"{path} is not a readable venus memory file ({{e}}). venus never deletes it: move "
        f"it aside (mv {path} {path}.broken) or run `venus memory wipe` to start afresh"
    )
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables:
            _check_schema(db, path, tables, unreadable)
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise MemoryStoreError(f"the memory file {path} cannot use WAL mode (a network fs?)")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA secure_delete = ON")
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            if not db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            db.execute("COMMIT")  # another process made it first: checked on its next open
    except sqlite3.OperationalError as e:  # locked, unwritable, out of space
        raise MemoryStoreError(f"cannot open the memory file {path}: {e}") from e
    except sqlite3.DatabaseError as e:  # not a database, malformed
        raise MemoryStoreError(unreadable.format(e=e)) from e


def _check_schema(db: sqlite3.Connection, path: Path, tables: set[str], unreadable: str) -> None:
    if "meta" not in tables:
        raise MemoryStoreError(unreadable.format(e="an SQLite file, but not a memory file"))
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row else 0
    except (TypeError, ValueError):
        version = 0
    if version > SCHEMA_VERSION:
        raise MemoryStoreError(
            f"the memory file {path} has schema version {version}, written by a newer venus "
            f"(this one reads up to {SCHEMA_VERSION}): upgrade venus, or move the file aside "
            f"(mv {path} {path}.new) to start a new memory"
        )
    if version != SCHEMA_VERSION:
        raise MemoryStoreError(unreadable.format(e=f"unknown schema version {row and row[0]!r}"))
    for table, columns in _COLUMNS.items():
        found = tuple(r[1] for r in db.execute(f"PRAGMA table_info({table})"))
        if found != columns:
            raise MemoryStoreError(
                unreadable.format(e=f"table {table} has columns {found}, expected {columns}")
            )
