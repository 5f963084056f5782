"""`venus memory show | wipe` on a real memory file, through the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from venus.daemon.memory.persist import MemoryFile
from venus.daemon.memory.store import MemorySettings, MemoryStore


def venus(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("venus")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=120, check=False
    )


def two_sessions(path: Path) -> None:
    rng = np.random.default_rng(0)
    with MemoryFile(path) as file:
        for session, chunks in (("alpha", 4), ("beta", 7)):
            store = MemoryStore(MemorySettings(budget_bytes=1 << 20, merge_similarity=1.0))
            for k in range(chunks):
                store.add("vision", k, float(k), k + 1.0, rng.standard_normal((4, 8)))
            upserts, removed = store.take_changes()
            file.save(session, upserts, removed, chunks - 1, now=1000.0 + chunks)


def test_show_lists_sessions_and_wipe_removes_them(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    two_sessions(path)
    shown = venus("memory", "show", "--file", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert [(r["id"], r["entries"], r["last_chunk"]) for r in rows] == [
        ("beta", 7, 6),
        ("alpha", 4, 3),
    ]
    assert rows[0]["bytes"] == 7 * (4 * 8 * 2 + 8 * 4)  # float16 tokens + float32 key
    table = venus("memory", "show", "--file", str(path))
    assert "beta" in table.stdout and "alpha" in table.stdout

    one = venus("memory", "wipe", "--file", str(path), "--session", "alpha")
    assert one.returncode == 0 and "4 entries" in one.stderr
    with MemoryFile(path) as file:
        assert file.load("alpha") == [] and len(file.load("beta")) == 7
    every = venus("memory", "wipe", "--file", str(path))
    assert every.returncode == 0 and "7 entries" in every.stderr
    with MemoryFile(path) as file:
        assert file.latest() is None


def test_an_unreadable_file_is_reported_and_only_file_gone_deletes_it(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    path.write_bytes(b"garbage" * 200)
    shown = venus("memory", "show", "--file", str(path))
    assert shown.returncode == 1 and str(path) in shown.stderr
    wiped = venus("memory", "wipe", "--file", str(path))
    assert wiped.returncode == 1 and path.read_bytes() == b"garbage" * 200  # untouched
    gone = venus("memory", "wipe", "--file", str(path), "--file-gone")
    assert gone.returncode == 0 and not path.exists()


def test_no_file_says_where_it_looked(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite3"
    shown = venus("memory", "show", "--file", str(missing))
    assert shown.returncode == 1 and str(missing) in shown.stderr and "persist" in shown.stderr
    assert venus("memory", "wipe", "--file", str(missing)).returncode == 0
    config = tmp_path / "venus.toml"
    config.write_text(f'[harness]\njournal = "{tmp_path / "j" / "journal.sqlite3"}"\n')
    default = venus("--config", str(config), "memory", "show")
    assert default.returncode == 1 and str(tmp_path / "j" / "memory.sqlite3") in default.stderr
