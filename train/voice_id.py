"""What a run records of its voice, and how it knows the voice again: the voice's
place, its step and its codebook's hash (a voice trained further, or its codes fitted
again, is another voice).

The hash is of the codebook's content (``units_sha``: its metadata and tensors in a fixed
order), not of the file's bytes: the safetensors writer orders a file's metadata at
random (a Rust hash map), so two fits of one codebook, equal tensor for tensor, differ
by a byte (a run of ``scripts/make-venus-tiny`` from a fresh clone did). Runs before
2026-12-05 recorded the bytes' hash (``units_file_sha``); both are known (``known_units``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from venus.train.voice import UNITS_FILE

if TYPE_CHECKING:
    from venus.train.voice import Voice

__all__ = ["known_units", "same_voice", "units_file_sha", "units_sha", "voice_identity"]


def units_sha(path: Path) -> str:
    """The first 16 hex digits of a sha256 of the voice ``path``'s codebook content."""
    from safetensors import safe_open

    digest = hashlib.sha256()
    with safe_open(str(path / UNITS_FILE), framework="np") as f:
        digest.update(json.dumps(f.metadata() or {}, sort_keys=True).encode())
        for name in sorted(f.keys()):
            t = np.ascontiguousarray(f.get_tensor(name))
            digest.update(f"{name} {t.dtype.str} {list(t.shape)}".encode())
            digest.update(t.tobytes())
    return digest.hexdigest()[:16]


def units_file_sha(path: Path) -> str:
    """The first 16 hex digits of the sha256 of the codebook file's bytes (the old hash)."""
    return hashlib.sha256((path / UNITS_FILE).read_bytes()).hexdigest()[:16]


def known_units(path: Path) -> tuple[str, str]:
    """The hashes a record of this voice's codebook may hold: the content's, the bytes'."""
    return units_sha(path), units_file_sha(path)


def voice_identity(path: Path | None, voice: Voice | None, units: str | None = None) -> str | None:
    """What a resumed run must find again (``units``: the codebook's hash, by default
    ``units_sha``)."""
    if path is None or voice is None:
        return None
    return f"{path.resolve()} (step {voice.step}, units {units or units_sha(path)})"


def same_voice(recorded: object, path: Path | None, voice: Voice | None) -> bool:
    """Whether ``recorded`` (a state's ``voice_identity``) names this voice."""
    if path is None or voice is None:
        return recorded is None
    return recorded in [voice_identity(path, voice, u) for u in known_units(path)]
