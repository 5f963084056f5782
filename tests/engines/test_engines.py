"""``Engines.open`` on real exported tiny engines: verification, hash cache, clear errors."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from venus.engines.hashcache import HashCache
from venus.engines.manifest import sha256_file
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.errors import EngineError

CPU = EngineOptions(providers=("cpu",))


def counting() -> tuple[list[Path], Callable[[Path], str]]:
    hashed: list[Path] = []

    def hash_file(path: Path) -> str:
        hashed.append(path)
        return sha256_file(path)

    return hashed, hash_file


def test_every_component_opens(engines: Engines) -> None:
    assert engines.providers == ("cpu",)
    assert engines.vision is not None
    assert set(engines.sessions) >= {"embedding", "backbone", "flow_decoder", "vocoder"}
    names = engines.manifest.control_tokens
    assert len(engines.control_token_ids) == len(names) == 3
    with pytest.raises(EngineError, match="no special token"):
        engines.token_id("<|nope|>")


def test_second_open_does_not_rehash(engine_copy: Path, tmp_path: Path) -> None:
    old = time.time() - 3600
    for p in engine_copy.iterdir():
        os.utime(p, (old, old))
    hashed, hash_file = counting()
    options = EngineOptions(providers=("cpu",), cache_dir=tmp_path / "cache")
    Engines.open(engine_copy, options, HashCache.load(options.cache_dir, hash_file))
    assert len(hashed) > 5
    hashed.clear()
    Engines.open(engine_copy, options, HashCache.load(options.cache_dir, hash_file))
    assert hashed == []


def test_a_missing_graph_is_named(engine_copy: Path) -> None:
    (engine_copy / "vocoder.onnx").unlink()
    with pytest.raises(EngineError, match=r"vocoder\.onnx: missing \(vocoder engine\)"):
        Engines.open(engine_copy, CPU)


def test_a_truncated_graph_is_named(engine_copy: Path) -> None:
    graph = engine_copy / "flow_decoder.onnx"
    graph.write_bytes(graph.read_bytes()[:1000])
    with pytest.raises(EngineError, match=r"flow_decoder\.onnx: 1000 bytes, .*truncated"):
        Engines.open(engine_copy, CPU)


def test_a_changed_byte_is_named(engine_copy: Path) -> None:
    data = engine_copy / "backbone.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    with pytest.raises(EngineError, match=r"backbone\.onnx\.data: sha256 does not match"):
        Engines.open(engine_copy, CPU)


def test_not_an_engine_directory(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not an engine directory"):
        Engines.open(tmp_path, CPU)
