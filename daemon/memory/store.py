"""The long-session memory store: past chunks' embeddings within a fixed byte budget, and
the ones most like the current input, for the frontend to put back into the context.

Training-free. Each entry is one chunk's tokens of one kind (vision, audio) plus a key,
the unit-length mean of the tokens as first stored. Entries age through tiers
(``MemorySettings.tier_tokens``): tier 0 keeps every token; when a tier holds more than
its share of the budget, its oldest entry moves down a tier, its tokens mean-pooled to
that tier's row count. The key is never pooled, so an old entry is found as readily as a
new one. When the last tier is over its share, the most similar pair of neighbouring
entries of one kind there is merged (distinctive old scenes outlive redundant ones); the
oldest is dropped only when nothing can merge. A chunk nearly identical to the one just
before it (a still camera, steady noise) is folded into that entry instead of stored again.

Search is one matrix-vector product per kind: the keys live in a preallocated float32
matrix (``keys.KeyIndex``: grown by doubling, freed rows reused). Entries are frozen and
their arrays read-only; the store replaces an entry rather than changing it, so one handed
out (by ``take_changes`` to a saver, say) stays a consistent snapshot. A store is not
thread-safe: one owner (the frontend loop) calls it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from venus.daemon.memory.keys import KeyIndex

# Bytes counted per entry besides its arrays: ids, chunk span, times, tier, count and its
# key-index slot; a stand-in for the Python objects and the SQLite row, so that a budget
# also bounds how many tiny entries there can be.
ENTRY_OVERHEAD_BYTES = 96
FLOAT16_MAX = 65504.0  # tokens are stored as float16
_KEY_BYTES = 4  # float32 key elements
_TOKEN_BYTES = 2  # float16 token elements

F32 = NDArray[np.float32]
_Array = TypeVar("_Array", bound="np.ndarray[Any, Any]")


@dataclass(frozen=True)
class MemorySettings:
    """How much memory to keep and how it ages.

    ``tier_tokens[t]`` is how many tokens an entry keeps in tier ``t`` (0: as encoded;
    pooling never adds rows); ``tier_shares[t]`` the fraction of ``budget_bytes`` tier ``t``
    may hold. ``merge_similarity`` is the cosine similarity at or above which a chunk is
    folded into the entry of the chunk just before it.
    """

    budget_bytes: int
    tier_tokens: tuple[int, ...] = (0, 2, 1)
    tier_shares: tuple[float, ...] = (0.25, 0.25, 0.5)
    merge_similarity: float = 0.95

    def __post_init__(self) -> None:
        if not _is_int(self.budget_bytes) or self.budget_bytes <= 0:
            raise ValueError(f"budget_bytes: a positive number of bytes, not {self.budget_bytes!r}")
        if not self.tier_tokens:
            raise ValueError("tier_tokens: needs at least one tier, e.g. (0, 2, 1)")
        for t, n in enumerate(self.tier_tokens):
            if not _is_int(n) or n < 0:
                raise ValueError(f"tier_tokens[{t}]: a token count >= 0 (0: as encoded), not {n!r}")
        if len(self.tier_shares) != len(self.tier_tokens):
            raise ValueError(
                f"tier_shares: one share per tier ({len(self.tier_tokens)} in tier_tokens), "
                f"not {len(self.tier_shares)}"
            )
        for t, share in enumerate(self.tier_shares):
            if not isinstance(share, (int, float)) or not 0.0 < share <= 1.0:
                raise ValueError(f"tier_shares[{t}]: a fraction in (0, 1], not {share!r}")
        if not math.isclose(sum(self.tier_shares), 1.0, abs_tol=1e-6):
            raise ValueError(f"tier_shares: must sum to 1, not {sum(self.tier_shares):g}")
        similarity = self.merge_similarity
        if not isinstance(similarity, (int, float)) or not -1.0 <= similarity <= 1.0:
            raise ValueError(
                f"merge_similarity: a cosine similarity in [-1, 1], not {similarity!r}"
            )

    @property
    def tier_budgets(self) -> tuple[int, ...]:
        """Bytes each tier may hold (their sum is at most ``budget_bytes``)."""
        return tuple(int(self.budget_bytes * share) for share in self.tier_shares)


@dataclass(frozen=True, eq=False)
class Entry:
    """One or more chunks of one kind: their tokens (pooled in tiers > 0) and their key.

    Compared by identity (arrays have no single truth value); compare fields to compare
    contents. ``merged`` is how many chunks the entry stands for.
    """

    id: int  # unique in its store, increasing with age
    kind: str  # "vision", "audio", ...
    first_chunk: int
    last_chunk: int
    start_s: float  # session time
    end_s: float
    tier: int
    merged: int
    key: F32  # [d], unit length (zero when the tokens' mean was zero)
    tokens: NDArray[np.float16]  # [rows, d]

    @property
    def nbytes(self) -> int:
        """Bytes counted against the budget: tokens, key and ``ENTRY_OVERHEAD_BYTES``."""
        return int(self.tokens.nbytes + self.key.nbytes) + ENTRY_OVERHEAD_BYTES


class MemoryStore:
    """Past chunks' embeddings within ``settings.budget_bytes``; see the module docstring."""

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings
        self._limits = settings.tier_budgets
        self._last = len(settings.tier_tokens) - 1
        self._next_id = 1
        self._changed: dict[int, None] = {}  # ids added or changed since take_changes
        self._removed: dict[int, None] = {}
        self._absorbed: dict[int, int] = {}  # id merged away -> id it went into, in add()
        self._entries: dict[int, Entry] = {}  # oldest (lowest id) first
        self._tiers: list[dict[int, None]] = [{} for _ in self._limits]  # ids, oldest first
        self._tier_bytes = [0] * len(self._limits)
        self._index: dict[str, KeyIndex] = {}

    # -- adding ----------------------------------------------------------------------------

    def add(self, kind: str, chunk: int, start_s: float, end_s: float, tokens: ArrayLike) -> Entry:
        """Store chunk ``chunk``'s tokens [n, d] of ``kind`` and return the entry holding them.

        That is the previous entry when the chunk was folded into it (near-duplicate of
        the chunk just before), else a new entry. Then moves, merges or drops old entries
        until every tier is within its share of the budget. Raises ValueError on tokens
        that are not a finite float [n, d] within float16's range, of another width than
        this kind's entries, or too big for the budget even in the last tier's form.
        """
        if not kind or not isinstance(kind, str):
            raise ValueError(f"memory tokens of chunk {chunk}: kind must be a name, not {kind!r}")
        x = _as_tokens(tokens, f"memory {kind} tokens of chunk {chunk}")
        index = self._index.get(kind)
        if index is not None and index.dim != x.shape[1]:
            raise ValueError(
                f"memory {kind} tokens of chunk {chunk}: width {x.shape[1]}, but this store "
                f"holds {kind} entries of width {index.dim}; one encoder per kind"
            )
        key = _readonly(chunk_key(x))
        folded = self._fold(kind, chunk, end_s, x, key)
        if folded is not None:
            return folded
        tier = self._tier_for(x.shape[0], x.shape[1], 0)
        if tier is None:
            raise ValueError(
                f"memory {kind} tokens of chunk {chunk} ({x.shape[0]} x {x.shape[1]}) do not "
                f"fit budget_bytes={self.settings.budget_bytes} even in the last tier's form "
                f"({self._limits[-1]} bytes): raise the memory budget"
            )
        rows = self._rows(tier, x.shape[0])
        tokens16 = _half(_pool(x, rows))
        entry = Entry(self._next_id, kind, chunk, chunk, start_s, end_s, tier, 1, key, tokens16)
        self._next_id += 1
        self._absorbed.clear()
        self._put(entry, mark=True)
        self._enforce()
        held = entry.id
        while held in self._absorbed:
            held = self._absorbed[held]
        return self._entries[held]

    @property
    def absorbed(self) -> dict[int, int]:
        """The ids the last ``add`` merged away -> the id each went into (a copy)."""
        return dict(self._absorbed)

    def _fold(self, kind: str, chunk: int, end_s: float, x: F32, key: F32) -> Entry | None:
        """Fold the chunk into the newest entry of its kind when that is its near-duplicate
        predecessor still in tier 0; the folded entry, or None."""
        index = self._index.get(kind)
        newest = index.newest() if index is not None else None
        if newest is None:
            return None
        prev = self._entries[newest]
        x = _pool(x, self._rows(0, x.shape[0]))  # as tier 0 would keep it
        if prev.tier != 0 or prev.last_chunk != chunk - 1 or prev.tokens.shape != x.shape:
            return None
        if float(prev.key @ key) < self.settings.merge_similarity:
            return None
        n = prev.merged
        tokens = _half((prev.tokens.astype(np.float32) * n + x) / (n + 1))
        key = _readonly(_unit(prev.key * n + key))
        folded = replace(prev, last_chunk=chunk, end_s=end_s, merged=n + 1, key=key, tokens=tokens)
        self._put(folded, mark=True)  # same size: the budget still holds
        return folded

    # -- the budget ------------------------------------------------------------------------

    def _enforce(self) -> None:
        """Bring every tier within its share: move tiers' oldest entries down, then merge
        (or drop) in the last tier."""
        for t in range(self._last):
            while self._tier_bytes[t] > self._limits[t]:
                self._demote(self._entries[next(iter(self._tiers[t]))])
        while self._tier_bytes[self._last] > self._limits[self._last]:
            if not self._merge_closest_pair():
                self._remove(next(iter(self._tiers[self._last])))

    def _demote(self, entry: Entry) -> None:
        """Move ``entry`` to the next tier its pooled form fits alone, or drop it."""
        tier = self._tier_for(entry.tokens.shape[0], entry.tokens.shape[1], entry.tier + 1)
        if tier is None:
            self._remove(entry.id)
            return
        self._put(replace(entry, tier=tier, tokens=self._pooled(entry.tokens, tier)), mark=True)

    def _merge_closest_pair(self) -> bool:
        """Merge the most similar neighbours of one kind in the last tier; False if none."""
        pairs = [index.closest_neighbours(self._last) for index in self._index.values()]
        best = max((pair for pair in pairs if pair is not None), default=None)
        if best is None:
            return False
        older, newer = self._entries[best[1]], self._entries[best[2]]
        a, b = older.merged, newer.merged
        rows = min(older.tokens.shape[0], newer.tokens.shape[0])
        old, new = (_pool(e.tokens.astype(np.float32), rows) for e in (older, newer))
        key = _readonly(_unit(older.key * a + newer.key * b))
        tokens = _half((old * a + new * b) / (a + b))
        merged = replace(  # the older's id and start
            older,
            last_chunk=newer.last_chunk,
            end_s=newer.end_s,
            merged=a + b,
            key=key,
            tokens=tokens,
        )
        self._remove(newer.id)
        self._put(merged, mark=True)
        self._absorbed[newer.id] = older.id
        return True

    def _pooled(self, tokens: NDArray[np.float16], tier: int) -> NDArray[np.float16]:
        """``tokens`` pooled to the rows ``tier`` keeps (themselves when as many)."""
        rows = self._rows(tier, tokens.shape[0])
        return tokens if rows == tokens.shape[0] else _half(_pool(tokens.astype(np.float32), rows))

    def _rows(self, tier: int, rows: int) -> int:
        """Rows an entry of ``rows`` rows keeps in ``tier``."""
        target = self.settings.tier_tokens[tier]
        return rows if target == 0 else min(rows, target)

    def _tier_for(self, rows: int, dim: int, first: int) -> int | None:
        """The first tier from ``first`` whose form of a [rows, dim] entry fits its share
        alone; None when none does."""
        for tier in range(first, self._last + 1):
            size = self._rows(tier, rows) * dim * _TOKEN_BYTES + dim * _KEY_BYTES
            if size + ENTRY_OVERHEAD_BYTES <= self._limits[tier]:
                return tier
        return None

    # -- searching -------------------------------------------------------------------------

    def search(
        self,
        kind: str,
        query: ArrayLike,
        k: int,
        before_chunk: int | None = None,
        exclude: Collection[int] = (),
        min_similarity: float = -1.0,
    ) -> list[tuple[Entry, float]]:
        """The ``k`` entries of ``kind`` most similar to ``query``, best first, with their
        cosine similarity.

        ``query`` is a key [d] or tokens [n, d] (their mean is the key). Only entries that
        ended before ``before_chunk`` (when given), whose id is not in ``exclude`` and that
        score at least ``min_similarity`` count.
        """
        index = self._index.get(kind)
        if index is None or k <= 0 or not index:
            return []
        q = np.asarray(query, dtype=np.float32)
        if q.ndim == 2 and q.shape[0] > 0:
            q = q.mean(axis=0)
        if q.ndim != 1 or q.shape[0] != index.dim or not np.isfinite(q).all():
            raise ValueError(
                f"memory search of {kind}: the query must be a finite key [{index.dim}] or "
                f"tokens [n, {index.dim}], not shape {np.shape(query)}"
            )
        found = index.search(_unit(q), k, before_chunk, exclude, min_similarity)
        return [(self._entries[entry_id], score) for entry_id, score in found]

    # -- looking ---------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes held, counted as ``Entry.nbytes`` (not the key index's spare rows)."""
        return sum(self._tier_bytes)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Entry]:
        """Every entry, oldest first."""
        return list(self._entries.values())

    def tier_bytes(self) -> list[int]:
        """Bytes held in each tier."""
        return list(self._tier_bytes)

    def get(self, entry_id: int) -> Entry | None:
        return self._entries.get(entry_id)

    # -- persistence -----------------------------------------------------------------------

    def take_changes(self) -> tuple[list[Entry], list[int]]:
        """The entries added or changed and the ids removed since the last call (which
        may include ids added and removed in between, never saved); resets both."""
        changed = [self._entries[i] for i in self._changed]
        removed = list(self._removed)
        self._changed.clear()
        self._removed.clear()
        return changed, removed

    def restore(self, entries: Iterable[Entry]) -> None:
        """Load ``entries`` (from ``MemoryFile.load``) into this empty store, unmarked.

        New ids continue after the highest restored one. Entries whose tier these settings
        lack, or with more rows than their tier keeps, are moved, and the budget is then
        enforced; those changes are marked, so that the next save writes them.
        """
        if self._entries:
            raise ValueError("memory restore: the store is not empty; clear() it first")
        for entry in sorted(entries, key=lambda e: e.id):
            if entry.id in self._entries:
                raise ValueError(f"memory restore: entry id {entry.id} appears twice")
            tokens, key = np.asarray(entry.tokens), np.asarray(entry.key)
            index = self._index.get(entry.kind)
            dim = index.dim if index is not None else tokens.shape[-1] if tokens.ndim else 0
            if tokens.ndim != 2 or len(tokens) < 1 or (tokens.shape[1], *key.shape) != (dim, dim):
                raise ValueError(
                    f"memory restore: entry {entry.id} ({entry.kind}) has tokens {tokens.shape} "
                    f"and key {key.shape}; expected [rows, {dim}] and [{dim}]"
                )
            if entry.merged < 1 or not entry.kind:
                raise ValueError(f"memory restore: entry {entry.id} needs a kind and merged >= 1")
            tier = min(max(entry.tier, 0), self._last)
            key, tokens = _readonly(key.astype(np.float32)), _half(tokens.astype(np.float32))
            fixed = replace(entry, tier=tier, key=key, tokens=self._pooled(tokens, tier))
            self._put(fixed, mark=tier != entry.tier or fixed.tokens.shape != tokens.shape)
            self._next_id = max(self._next_id, entry.id + 1)
        self._enforce()

    def clear(self) -> None:
        """Forget every entry (marked removed for the next save). Ids are never reused."""
        self._removed.update(dict.fromkeys(self._entries))
        self._changed.clear()
        self._entries = {}
        self._tiers = [{} for _ in self._limits]
        self._tier_bytes = [0] * len(self._limits)
        self._index = {}

    # -- bookkeeping -----------------------------------------------------------------------

    def _put(self, entry: Entry, *, mark: bool) -> None:
        """Add ``entry``, or replace the entry with its id (moving tiers as needed)."""
        old = self._entries.get(entry.id)
        if old is not None:
            self._tier_bytes[old.tier] -= old.nbytes
            if old.tier != entry.tier:
                del self._tiers[old.tier][old.id]
        if old is None or old.tier != entry.tier:
            tier = self._tiers[entry.tier]
            if tier and next(reversed(tier)) > entry.id:  # out of age order: rare, re-sort
                self._tiers[entry.tier] = dict.fromkeys(sorted([*tier, entry.id]))
            else:
                tier[entry.id] = None
        self._tier_bytes[entry.tier] += entry.nbytes
        self._entries[entry.id] = entry
        if entry.kind not in self._index:
            self._index[entry.kind] = KeyIndex(entry.key.shape[0])
        self._index[entry.kind].put(entry.id, entry.key, entry.last_chunk, entry.tier)
        if mark:
            self._changed[entry.id] = None

    def _remove(self, entry_id: int) -> None:
        entry = self._entries.pop(entry_id)
        del self._tiers[entry.tier][entry_id]
        self._tier_bytes[entry.tier] -= entry.nbytes
        self._index[entry.kind].remove(entry_id)
        self._changed.pop(entry_id, None)
        self._removed[entry_id] = None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_tokens(tokens: ArrayLike, what: str) -> F32:
    """``tokens`` as float32 [n, d], checked."""
    x = np.asarray(tokens)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{what}: expected [n, d] with n, d >= 1, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"{what}: expected floats, got {x.dtype}")
    x32 = x.astype(np.float32, copy=False)
    if not np.isfinite(x32).all() or float(np.abs(x32).max()) > FLOAT16_MAX:
        raise ValueError(
            f"{what}: NaN, infinite or beyond float16's range (±{FLOAT16_MAX:g}); "
            "check the encoder's output or scale it"
        )
    return x32


def _pool(x: F32, rows: int) -> F32:
    """Means over ``rows`` contiguous groups of ``x``'s rows (``np.array_split``'s groups)."""
    n = x.shape[0]
    if rows <= 0 or rows >= n:
        return x
    sizes = np.full(rows, n // rows, np.int64)
    sizes[: n % rows] += 1
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    sums: F32 = np.add.reduceat(x, starts, axis=0)
    means: F32 = (sums / sizes[:, None]).astype(np.float32)
    return means


def chunk_key(tokens: NDArray[np.floating[Any]]) -> F32:
    """A chunk's key: the unit-length mean of its tokens [n, d] (what ``add`` stores and
    ``search`` compares)."""
    return _unit(np.asarray(tokens, np.float32).mean(axis=0))


def _unit(v: F32) -> F32:
    """``v`` scaled to length 1 (zeros stay zeros)."""
    v = v.astype(np.float32, copy=False)
    norm = float(np.linalg.norm(v))
    return v / np.float32(norm) if norm > 0.0 else np.zeros_like(v)


def _half(x: NDArray[np.floating[Any]]) -> NDArray[np.float16]:
    """``x`` as read-only float16, the form tokens are stored in."""
    return _readonly(x.astype(np.float16))


def _readonly(a: _Array) -> _Array:
    a.flags.writeable = False
    return a
