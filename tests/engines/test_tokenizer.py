"""Text <-> ids through the engine directory's tokenizer.json, and its place in the manifest."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from venus.engines.manifest import MANIFEST, load_manifest, verify
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines, text_vocab
from venus.engines.tokenizer import TOKENIZER_FILE, Tokenizer
from venus.errors import EngineError

CPU = EngineOptions(providers=("cpu",))
TEXT = 'Hello, wörld! {"name": "weather"}'


def test_round_trip_through_the_init_tokenizer(engines: Engines) -> None:
    tok = engines.tokenizer
    assert tok.text_vocab == 512  # tiny's upstream vocabulary; special tokens from 512
    ids = tok.encode(TEXT)
    assert ids == list(TEXT.encode())  # byte-level, no merges: one id per UTF-8 byte
    assert tok.decode(ids) == TEXT


def test_special_and_unknown_ids_are_skipped(engines: Engines) -> None:
    tok = engines.tokenizer
    ids = tok.encode(TEXT)
    speak, end = engines.token_id("<|speak|>"), engines.token_id("<|chunk_end|>")
    assert tok.decode([speak, *ids[:5], end, 300, *ids[5:], 511, 10**6, -1]) == TEXT
    assert tok.decode([speak]) == ""
    # Every id the backbone can emit decodes without error.
    assert tok.decode(range(engines.backbone.vocab)) == tok.decode(range(256))
    # Special-token names in text stay text: they never become control tokens.
    assert max(tok.encode("<|speak|> hi")) < 256


def test_an_id_outside_the_text_vocabulary_is_an_error(tiny_engine_dir: Path) -> None:
    tok = Tokenizer.open(tiny_engine_dir / TOKENIZER_FILE, text_vocab=100)
    assert tok.encode("H!") == [72, 33]
    with pytest.raises(EngineError, match=r"encoding gave id 111, outside .* of 100"):
        tok.encode("Hello")


def test_missing_or_corrupt_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"nope\.json: no such file; re-run `venus export`"):
        Tokenizer.open(tmp_path / "nope.json", 512)
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": 3}')
    with pytest.raises(EngineError, match=r"tokenizer\.json: not a Hugging Face tokenizer"):
        Tokenizer.open(bad, 512)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(EngineError, match=r"tokenizer\.json: unreadable tokenizer"):
        Tokenizer.open(bad, 512)


def test_the_manifest_lists_the_tokenizer(tiny_engine_dir: Path, tiny_checkpoint: Path) -> None:
    manifest = load_manifest(tiny_engine_dir)
    assert manifest.tokenizer is not None and manifest.tokenizer.path == TOKENIZER_FILE
    copied = (tiny_engine_dir / TOKENIZER_FILE).read_bytes()
    assert copied == (tiny_checkpoint / TOKENIZER_FILE).read_bytes()
    assert manifest.tokenizer.bytes == len(copied)
    assert ("tokenizer", manifest.tokenizer) in manifest.files()
    assert text_vocab(tiny_engine_dir, manifest) == 512


def test_a_changed_tokenizer_is_caught_by_its_sha256(engine_copy: Path) -> None:
    path = engine_copy / TOKENIZER_FILE
    raw = bytearray(path.read_bytes())
    at = raw.index(b'"H": 72')
    raw[at + 6] = ord("3")  # "H" -> id 73: same size, valid JSON; only the hash tells
    path.write_bytes(bytes(raw))
    with pytest.raises(
        EngineError, match=r"tokenizer\.json: sha256 does not match the manifest \(the tokenizer"
    ):
        verify(engine_copy, load_manifest(engine_copy))
    with pytest.raises(EngineError, match=r"tokenizer\.json: sha256 does not match"):
        Engines.open(engine_copy, CPU)


def test_a_missing_tokenizer_file_is_named(engine_copy: Path) -> None:
    (engine_copy / TOKENIZER_FILE).unlink()
    with pytest.raises(EngineError, match=r"tokenizer\.json: missing \(the tokenizer\)"):
        Engines.open(engine_copy, CPU)


def test_an_older_manifest_loads_but_engines_want_a_re_export(engine_copy: Path) -> None:
    data = json.loads((engine_copy / MANIFEST).read_text())
    del data["tokenizer"]  # as written before the tokenizer was exported
    (engine_copy / MANIFEST).write_text(json.dumps(data))
    assert load_manifest(engine_copy).tokenizer is None
    with pytest.raises(EngineError, match=r"lists no tokenizer .* re-run `venus export`"):
        Engines.open(engine_copy, CPU)


def test_text_vocab_without_a_model_config_is_the_first_special_id(
    tiny_engine_dir: Path,
) -> None:
    manifest = dataclasses.replace(load_manifest(tiny_engine_dir), model_config={})
    assert text_vocab(tiny_engine_dir, manifest) == min(manifest.special_tokens.values()) == 512
    with pytest.raises(EngineError, match="cannot be told apart"):
        text_vocab(tiny_engine_dir, dataclasses.replace(manifest, special_tokens={}))
