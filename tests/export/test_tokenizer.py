"""The checkpoint's tokenizer.json: `venus init` writes one, `venus export` copies and lists it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TinyExport
from tokenizers import Tokenizer

from venus.engines.manifest import load_manifest
from venus.engines.tokenizer import TOKENIZER_FILE
from venus.errors import ExportError
from venus.export.onnx.build import checkpoint_tokenizer

VENUS = Path(sys.executable).with_name("venus")
TEXT = 'Hello, wörld! {"name": "weather"}\n\t\x00 ∑ 🙂'


def test_init_writes_a_byte_level_tokenizer(tiny_export: TinyExport) -> None:
    tok = Tokenizer.from_file(str(tiny_export.checkpoint / TOKENIZER_FILE))
    assert tok.get_vocab_size() == 256
    ids = tok.encode(TEXT, add_special_tokens=False).ids
    assert ids == list(TEXT.encode())  # token id = byte value, for every byte class
    assert tok.decode(ids) == TEXT


def test_export_copies_and_lists_it(tiny_export: TinyExport) -> None:
    manifest = load_manifest(tiny_export.engines)
    assert manifest.tokenizer is not None
    engines, checkpoint = tiny_export.engines, tiny_export.checkpoint
    assert (engines / TOKENIZER_FILE).read_bytes() == (checkpoint / TOKENIZER_FILE).read_bytes()
    assert (engines / TOKENIZER_FILE).stat().st_mode & 0o044 == 0o044  # the service reads it


def test_export_without_a_tokenizer_says_where_one_comes_from(
    tiny_export: TinyExport, tmp_path: Path
) -> None:
    ckpt = Path(shutil.copytree(tiny_export.checkpoint, tmp_path / "ckpt"))
    (ckpt / TOKENIZER_FILE).unlink()
    run = subprocess.run(
        [str(VENUS), "export", str(ckpt), "--out", str(tmp_path / "engines")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 1
    assert f"{ckpt / TOKENIZER_FILE}: no such file" in run.stderr
    assert "`venus init` writes one, `venus convert` copies the upstream" in run.stderr
    assert not (tmp_path / "engines").exists()  # refused before anything was written


def test_a_corrupt_tokenizer_is_refused(tmp_path: Path) -> None:
    (tmp_path / TOKENIZER_FILE).write_text("{}")
    with pytest.raises(ExportError, match=r"tokenizer\.json: not a Hugging Face tokenizer\.json"):
        checkpoint_tokenizer(tmp_path)
