"""One kind's memory keys in preallocated arrays: search in one matrix-vector product, and
the most similar pair of time neighbours in a tier without rereading every key.

A row per entry holds its unit key, id, last chunk and tier. Rows are grown by doubling
and reused after removals, so nothing is stacked or rebuilt per call. Each row also
caches its key's similarity to the entry before it in time (within its tier), stamped
with both rows' versions; a merge step recomputes only the pairs that changed since the
last one: integer work over the entries and a few dot products, instead of reading every
key (at d = 4096 that read is most of a chunk's memory upkeep).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from numpy.typing import NDArray

FIRST_ROWS = 16  # rows allocated for a new kind, doubled when full


class KeyIndex:
    """The keys of one kind's entries (by the store's entry ids), one row each."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.keys = np.zeros((FIRST_ROWS, dim), np.float32)
        self.ids = np.full(FIRST_ROWS, -1, np.int64)  # -1: a free row
        self.last_chunk = np.zeros(FIRST_ROWS, np.int64)
        self.tier = np.zeros(FIRST_ROWS, np.int64)
        self.version = np.zeros(FIRST_ROWS, np.int64)  # bumped whenever a row changes
        self.similarity = np.zeros(FIRST_ROWS, np.float32)  # to the row before it, cached
        self.cached_for = np.full((FIRST_ROWS, 3), -1, np.int64)  # row before, its, own version
        self.used = 0  # rows [0, used) have been handed out
        self._free: list[int] = []
        self._row: dict[int, int] = {}  # entry id -> row

    def __len__(self) -> int:
        return len(self._row)

    def put(self, entry_id: int, key: NDArray[np.float32], last_chunk: int, tier: int) -> None:
        """Add an entry's key, or update the row of one already here."""
        row = self._row.get(entry_id)
        if row is None:
            if self._free:
                row = self._free.pop()
            else:
                if self.used == len(self.ids):
                    self._grow()
                row, self.used = self.used, self.used + 1
            self._row[entry_id] = row
        self.keys[row] = key
        self.ids[row] = entry_id
        self.last_chunk[row] = last_chunk
        self.tier[row] = tier
        self.version[row] += 1

    def remove(self, entry_id: int) -> None:
        row = self._row.pop(entry_id)
        self.ids[row] = -1
        self.version[row] += 1
        self._free.append(row)

    def newest(self) -> int | None:
        """The highest entry id here, or None."""
        return int(self.ids[: self.used].max()) if self._row else None

    def search(
        self,
        query: NDArray[np.float32],
        k: int,
        before_chunk: int | None,
        exclude: Collection[int],
        min_similarity: float,
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (entry id, similarity to the unit ``query``), best first (ties: the
        older first); see ``MemoryStore.search``."""
        n = self.used
        ids = self.ids[:n]
        scores: NDArray[np.float32] = self.keys[:n] @ query
        ok = (ids >= 0) & (scores >= min_similarity)
        if before_chunk is not None:
            ok &= self.last_chunk[:n] < before_chunk
        if exclude:
            ok &= ~np.isin(ids, np.fromiter(exclude, np.int64, len(exclude)))
        found = np.flatnonzero(ok)
        if len(found) > k:
            found = found[np.argpartition(-scores[found], k - 1)[:k]]
        found = found[np.lexsort((ids[found], -scores[found]))]
        return [(int(ids[r]), float(scores[r])) for r in found]

    def closest_neighbours(self, tier: int) -> tuple[float, int, int] | None:
        """The most similar pair of time neighbours in ``tier`` as (similarity, older id,
        newer id); None with fewer than two entries there."""
        n = self.used
        rows = np.flatnonzero((self.ids[:n] >= 0) & (self.tier[:n] == tier))
        if len(rows) < 2:
            return None
        rows = rows[np.argsort(self.ids[rows])]  # oldest first: ids grow with age
        before, after = rows[:-1], rows[1:]
        stamp = np.stack([before, self.version[before], self.version[after]], axis=1)
        stale = np.flatnonzero((self.cached_for[after] != stamp).any(axis=1))
        if len(stale):
            b, a = before[stale], after[stale]
            self.similarity[a] = np.einsum("ij,ij->i", self.keys[a], self.keys[b])
            self.cached_for[a] = stamp[stale]
        similarity = self.similarity[after]
        i = int(np.argmax(similarity))
        return float(similarity[i]), int(self.ids[before[i]]), int(self.ids[after[i]])

    def _grow(self) -> None:
        self.keys = np.concatenate([self.keys, np.zeros_like(self.keys)])
        self.ids = np.concatenate([self.ids, np.full_like(self.ids, -1)])
        self.last_chunk = np.concatenate([self.last_chunk, np.zeros_like(self.last_chunk)])
        self.tier = np.concatenate([self.tier, np.zeros_like(self.tier)])
        self.version = np.concatenate([self.version, np.zeros_like(self.version)])
        self.similarity = np.concatenate([self.similarity, np.zeros_like(self.similarity)])
        self.cached_for = np.concatenate([self.cached_for, np.full_like(self.cached_for, -1)])
