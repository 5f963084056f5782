"""Manifest verification names the bad file; the sha256 cache spares re-hashing at start."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from venus.engines.hashcache import CACHE_FILE, HashCache, verify_engines
from venus.engines.manifest import Manifest, load_manifest, sha256_file
from venus.errors import EngineError


@pytest.fixture
def engine(toy_engine: tuple[Path, Manifest]) -> tuple[Path, Manifest]:
    root, _ = toy_engine
    return root, load_manifest(root)


def counting() -> tuple[list[Path], Callable[[Path], str]]:
    hashed: list[Path] = []

    def hash_file(path: Path) -> str:
        hashed.append(path)
        return sha256_file(path)

    return hashed, hash_file


def flip_byte(path: Path, offset: int = 100) -> None:
    """Change one byte in place: same size, a new (still old) mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_a_good_directory_verifies(engine: tuple[Path, Manifest]) -> None:
    verify_engines(*engine, cache=None)


def test_a_missing_file_is_named(engine: tuple[Path, Manifest]) -> None:
    root, manifest = engine
    (root / "toy.onnx.data").unlink()
    with pytest.raises(EngineError, match=r"toy\.onnx\.data: missing \(toy engine\)"):
        verify_engines(root, manifest, cache=None)


def test_a_truncated_file_is_named(engine: tuple[Path, Manifest]) -> None:
    root, manifest = engine
    graph = root / "toy.onnx"
    graph.write_bytes(graph.read_bytes()[:-10])
    with pytest.raises(EngineError, match=r"toy\.onnx: \d+ bytes, the manifest says .*truncated"):
        verify_engines(root, manifest, cache=HashCache(path=None))


def test_a_changed_byte_is_named(engine: tuple[Path, Manifest]) -> None:
    root, manifest = engine
    flip_byte(root / "toy.onnx.data")
    with pytest.raises(EngineError, match=r"toy\.onnx\.data: sha256 does not match .*corrupt"):
        verify_engines(root, manifest, cache=None)


def test_the_second_start_does_not_rehash(engine: tuple[Path, Manifest], tmp_path: Path) -> None:
    root, manifest = engine
    cache_dir = tmp_path / "cache"
    hashed, hash_file = counting()
    verify_engines(root, manifest, HashCache.load(cache_dir, hash_file))
    assert sorted(p.name for p in hashed) == ["toy.onnx", "toy.onnx.data"]
    assert (cache_dir / CACHE_FILE).is_file()

    hashed.clear()
    verify_engines(root, manifest, HashCache.load(cache_dir, hash_file))
    assert hashed == []


def test_a_changed_file_is_rehashed_and_caught(
    engine: tuple[Path, Manifest], tmp_path: Path
) -> None:
    root, manifest = engine
    hashed, hash_file = counting()
    verify_engines(root, manifest, HashCache.load(tmp_path, hash_file))
    flip_byte(root / "toy.onnx.data")
    hashed.clear()
    with pytest.raises(EngineError, match=r"toy\.onnx\.data: sha256 does not match"):
        verify_engines(root, manifest, HashCache.load(tmp_path, hash_file))
    assert [p.name for p in hashed] == ["toy.onnx.data"]


def test_a_file_written_just_now_is_not_remembered(
    fresh_toy_engine: tuple[Path, Manifest], tmp_path: Path
) -> None:
    root, manifest = fresh_toy_engine  # fresh mtimes: a write could still race the hash
    hashed, hash_file = counting()
    for _ in range(2):
        verify_engines(root, manifest, HashCache.load(tmp_path, hash_file))
    assert len(hashed) == 4


def test_a_corrupt_cache_is_rebuilt(
    engine: tuple[Path, Manifest], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, manifest = engine
    (tmp_path / CACHE_FILE).write_text("{not json")
    hashed, hash_file = counting()
    with caplog.at_level(logging.WARNING):
        verify_engines(root, manifest, HashCache.load(tmp_path, hash_file))
    assert "unusable hash cache" in caplog.text
    assert len(hashed) == 2
    assert json.loads((tmp_path / CACHE_FILE).read_text())["version"] == 1
