"""The memory file: the store's entries in SQLite across a restart, on real files."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from venus.daemon.memory.persist import SCHEMA_VERSION, MemoryFile, SessionInfo
from venus.daemon.memory.store import Entry, MemorySettings, MemoryStore
from venus.errors import MemoryStoreError

DIM = 32
SETTINGS = MemorySettings(budget_bytes=30_000)


def scene(rng: np.random.Generator, rows: int = 8) -> np.ndarray:
    return (rng.normal(size=DIM) * 3 + rng.normal(size=(rows, DIM))).astype(np.float32)


def fill(store: MemoryStore, rng: np.random.Generator, chunks: range) -> None:
    """Vision with repeats (folds), audio of varying length; enough to reach every tier."""
    current = scene(rng)
    for chunk in chunks:
        if rng.random() < 0.3:
            current = scene(rng)
        store.add("vision", chunk, float(chunk), chunk + 1.0, current)
        rows = int(rng.integers(1, 4))
        store.add("audio", chunk, float(chunk), chunk + 1.0, scene(rng, rows))


def assert_same(loaded: list[Entry], expected: list[Entry]) -> None:
    assert [e.id for e in loaded] == [e.id for e in expected]
    for a, b in zip(loaded, expected, strict=True):
        fields = ("kind", "first_chunk", "last_chunk", "start_s", "end_s", "tier", "merged")
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert a.key.dtype == np.float32 and a.tokens.dtype == np.float16
        assert a.key.tobytes() == b.key.tobytes()  # bit-exact
        assert a.tokens.shape == b.tokens.shape and a.tokens.tobytes() == b.tokens.tobytes()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "memory.sqlite3"


@pytest.fixture
def memory(path: Path) -> Iterator[MemoryFile]:
    with MemoryFile(path) as f:
        yield f


def test_entries_survive_a_reopen_bit_exact(path: Path, memory: MemoryFile) -> None:
    store = MemoryStore(SETTINGS)
    fill(store, np.random.default_rng(1), range(200))
    assert {e.tier for e in store.entries()} == {0, 1, 2}
    changed, removed = store.take_changes()
    memory.save("s1", changed, removed, last_chunk=199, now=1000.0)
    memory.close()
    with MemoryFile(path) as again:
        loaded = again.load("s1")
        assert again.load("other") == []
    assert_same(loaded, store.entries())
    restored = MemoryStore(SETTINGS)
    restored.restore(loaded)
    query = store.entries()[0].key
    assert [(e.id, s) for e, s in restored.search("vision", query, 5)] == [
        (e.id, s) for e, s in store.search("vision", query, 5)
    ]


def test_incremental_saves_round_trip(path: Path, memory: MemoryFile) -> None:
    rng = np.random.default_rng(2)
    store = MemoryStore(SETTINGS)
    removed_total = 0
    for start in range(0, 300, 7):  # a save every 7 chunks
        fill(store, rng, range(start, start + 7))
        changed, removed = store.take_changes()
        removed_total += len(removed)
        memory.save("s1", changed, removed, last_chunk=start + 6, now=float(start))
        assert_same(memory.load("s1"), store.entries())
    assert removed_total > 0  # removals were saved too
    memory.close()
    with MemoryFile(path) as again:
        assert_same(again.load("s1"), store.entries())
        info = again.latest()
    assert info == SessionInfo("s1", 0.0, 294.0, 300)


def test_a_restored_store_saves_only_what_changed_after(memory: MemoryFile) -> None:
    rng = np.random.default_rng(3)
    store = MemoryStore(SETTINGS)
    fill(store, rng, range(100))
    memory.save("s1", *store.take_changes(), last_chunk=99, now=1.0)
    restored = MemoryStore(SETTINGS)
    restored.restore(memory.load("s1"))
    assert restored.take_changes() == ([], [])
    fill(restored, rng, range(100, 130))
    memory.save("s1", *restored.take_changes(), last_chunk=129, now=2.0)
    assert_same(memory.load("s1"), restored.entries())


def test_wipe_one_session_leaves_the_others(memory: MemoryFile) -> None:
    rng = np.random.default_rng(4)
    stores = {}
    for name, now in (("old", 10.0), ("new", 20.0)):
        stores[name] = MemoryStore(SETTINGS)
        fill(stores[name], rng, range(50))
        memory.save(name, *stores[name].take_changes(), last_chunk=49, now=now)
    assert memory.latest() == SessionInfo("new", 20.0, 20.0, 49)
    assert memory.wipe("new") == len(stores["new"])
    assert memory.load("new") == []
    assert_same(memory.load("old"), stores["old"].entries())
    assert memory.latest() == SessionInfo("old", 10.0, 10.0, 49)
    assert memory.wipe("nobody") == 0


def test_wipe_all_empties_and_shrinks_the_file(path: Path, memory: MemoryFile) -> None:
    MemoryFile(path.with_name("empty.sqlite3")).close()
    empty = path.with_name("empty.sqlite3").stat().st_size  # the schema alone
    store = MemoryStore(MemorySettings(budget_bytes=400_000))
    fill(store, np.random.default_rng(5), range(300))
    marker = store.entries()[-1].tokens.tobytes()  # a kilobyte-sized pattern
    memory.save("s1", *store.take_changes(), last_chunk=299, now=1.0)
    memory.save("s2", store.entries()[:10], [], last_chunk=5, now=2.0)
    full = path.stat().st_size + Path(f"{path}-wal").stat().st_size
    assert memory.wipe() == len(store) + 10
    assert memory.latest() is None and memory.load("s1") == [] and memory.load("s2") == []
    wal = Path(f"{path}-wal")
    assert full > 5 * empty
    assert path.stat().st_size == empty and (not wal.exists() or wal.stat().st_size == 0)
    on_disk = path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert marker not in on_disk  # the bytes are gone, not just unlinked


def test_wipe_one_session_zeroes_its_bytes(path: Path, memory: MemoryFile) -> None:
    store = MemoryStore(SETTINGS)
    fill(store, np.random.default_rng(6), range(60))
    marker = store.entries()[-1].tokens.tobytes()
    memory.save("s1", *store.take_changes(), last_chunk=59, now=1.0)
    memory.save("s2", [], [], last_chunk=0, now=2.0)
    memory.wipe("s1")
    wal = Path(f"{path}-wal")
    assert marker not in path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def test_latest_of_an_empty_file_is_none(memory: MemoryFile) -> None:
    assert memory.latest() is None


def test_the_file_is_private(path: Path, memory: MemoryFile) -> None:
    memory.save("s1", [], [], last_chunk=0, now=1.0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert memory.load("s1") == []


def test_a_garbage_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(MemoryStoreError) as raised:
        MemoryFile(path)
    message = str(raised.value)
    assert str(path) in message and "venus memory wipe" in message and "mv " in message
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_another_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(MemoryStoreError, match="not a memory file"):
        MemoryFile(path)
    assert path.read_bytes() == before


def rewrite(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def test_a_newer_schema_is_refused(path: Path) -> None:
    MemoryFile(path).close()
    rewrite(path, f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")
    with pytest.raises(MemoryStoreError, match=f"schema version {SCHEMA_VERSION + 1}.*newer"):
        MemoryFile(path)


def test_a_changed_table_is_refused(path: Path) -> None:
    MemoryFile(path).close()
    rewrite(path, "ALTER TABLE entry ADD COLUMN extra TEXT")
    with pytest.raises(MemoryStoreError, match="table entry has columns"):
        MemoryFile(path)


def test_a_blob_of_the_wrong_size_names_the_entry(path: Path, memory: MemoryFile) -> None:
    store = MemoryStore(SETTINGS)
    entry = store.add("vision", 0, 0.0, 1.0, scene(np.random.default_rng(7)))
    memory.save("s1", *store.take_changes(), last_chunk=0, now=1.0)
    rewrite(path, f"UPDATE entry SET tokens = substr(tokens, 1, 10) WHERE id = {entry.id}")
    with pytest.raises(MemoryStoreError, match=rf"session 's1', entry {entry.id}: the tokens"):
        memory.load("s1")
    rewrite(path, f"UPDATE entry SET key = x'00' WHERE id = {entry.id}")
    with pytest.raises(MemoryStoreError, match=rf"session 's1', entry {entry.id}: the key"):
        memory.load("s1")


def test_a_closed_file_says_so(path: Path) -> None:
    memory = MemoryFile(path)
    memory.close()
    memory.close()  # twice is fine
    with pytest.raises(MemoryStoreError, match="closed"):
        memory.latest()
