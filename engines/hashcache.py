"""Verify an engine directory against its manifest without re-hashing gigabytes every start.

Sizes are always checked. A file's sha256 is computed once and remembered in
``<cache_dir>/file-hashes.json`` keyed on (absolute path, size, mtime_ns); the next start
reuses it while all three are unchanged and re-hashes the file when any changes. Files
modified in the two seconds before they were hashed are not remembered (their mtime
could hide a later write), so a freshly exported directory is hashed on its first two
starts. The cache trusts the filesystem: a file rewritten in place with its size and
mtime restored would pass, so ``verify_engines(..., cache=None)`` (or deleting the cache
file) forces a full check. A missing, unreadable or corrupt cache file is rebuilt, never
an error.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from venus.engines.manifest import Manifest, sha256_file, verify

log = logging.getLogger(__name__)

CACHE_FILE = "file-hashes.json"
CACHE_VERSION = 1
# A file modified within this long before it was hashed is not remembered: mtimes are
# kernel-tick coarse, so a write just after hashing could keep the same mtime (git calls
# such entries "racily clean"). Such a file is simply hashed again at the next start.
RACY_NS = 2_000_000_000


@dataclass
class HashCache:
    """Remembered sha256 digests, keyed on (path, size, mtime_ns); ``hash_file`` does the work."""

    path: Path | None  # the JSON file; None keeps the cache in memory only
    hash_file: Callable[[Path], str] = sha256_file
    entries: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    dirty: bool = False

    @classmethod
    def load(
        cls, cache_dir: Path | None, hash_file: Callable[[Path], str] = sha256_file
    ) -> HashCache:
        """The cache stored in ``cache_dir`` (empty when absent or unreadable)."""
        if cache_dir is None:
            return cls(path=None, hash_file=hash_file)
        path = cache_dir / CACHE_FILE
        cache = cls(path=path, hash_file=hash_file)
        try:
            data = json.loads(path.read_text())
            if data.get("version") != CACHE_VERSION:
                raise ValueError(f"version {data.get('version')!r}")
            for key, (size, mtime_ns, digest) in data["files"].items():
                cache.entries[str(key)] = (int(size), int(mtime_ns), str(digest))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s: unusable hash cache (%s); re-hashing engine files", path, e)
            cache.entries.clear()
        return cache

    def sha256(self, path: Path) -> str:
        """sha256 of ``path``: remembered while its size and mtime_ns are unchanged."""
        st = path.stat()
        key = str(path.resolve())
        hit = self.entries.get(key)
        if hit is not None and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        log.info("hashing %s (%.1f MB)", path, st.st_size / 1e6)
        started_ns = time.time_ns()
        digest = self.hash_file(path)
        if st.st_mtime_ns < started_ns - RACY_NS:
            self.entries[key] = (st.st_size, st.st_mtime_ns, digest)
            self.dirty = True
        else:
            log.debug("%s: modified just now; its hash is not remembered", path)
        return digest

    def save(self) -> None:
        """Write the cache atomically; a failure is logged (the next start re-hashes)."""
        if self.path is None or not self.dirty:
            return
        data = {"version": CACHE_VERSION, "files": {k: list(v) for k, v in self.entries.items()}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".file-hashes.")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError as e:
            log.warning(
                "%s: cannot write the hash cache (%s); the next start re-hashes", self.path, e
            )


def verify_engines(root: Path, manifest: Manifest, cache: HashCache | None) -> None:
    """Every file of ``manifest`` exists under ``root`` with its size and sha256.

    ``cache`` None hashes every file. Raises EngineError naming the first bad file.
    """
    hashes = cache if cache is not None else HashCache(path=None)
    try:
        verify(root, manifest, hashes.sha256)
    finally:
        hashes.save()
