"""The key index: rows reused, search order, and cached neighbour similarities that agree
with computing every pair afresh."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from venus.daemon.memory.keys import FIRST_ROWS, KeyIndex

D = 8


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def brute_force(keys: dict[int, tuple[np.ndarray, int]], tier: int) -> tuple[float, int, int]:
    ids = sorted(i for i, (_, t) in keys.items() if t == tier)
    pairs = [(float(keys[a][0] @ keys[b][0]), a, b) for a, b in pairwise(ids)]
    return max(pairs)


def test_neighbour_similarities_follow_every_change() -> None:
    rng = np.random.default_rng(1)
    index = KeyIndex(D)
    held: dict[int, tuple[np.ndarray, int]] = {}  # id -> (key, tier)
    next_id = 1
    for _ in range(3000):
        action = rng.random()
        if action < 0.45 or len(held) < 3:
            entry_id, next_id = next_id, next_id + 1
        elif action < 0.75:
            entry_id = int(rng.choice(list(held)))  # a changed key or tier
        else:
            gone = int(rng.choice(list(held)))
            index.remove(gone)
            del held[gone]
            continue
        key, tier = unit(rng.normal(size=D)), int(rng.integers(2))
        index.put(entry_id, key, entry_id, tier)
        held[entry_id] = (key, tier)
        for t in (0, 1):
            got = index.closest_neighbours(t)
            if sum(1 for _, tt in held.values() if tt == t) < 2:
                assert got is None
                continue
            assert got is not None
            similarity, older, newer = got
            expected = brute_force(held, t)
            assert similarity == pytest.approx(expected[0], abs=1e-5)
            assert (older, newer) == expected[1:]
    assert len(index) == len(held) and index.newest() == max(held)
    assert len(index.ids) > FIRST_ROWS  # it grew


def test_removed_rows_are_reused() -> None:
    index = KeyIndex(D)
    for i in range(FIRST_ROWS):
        index.put(i, unit(np.ones(D)), i, 0)
    index.remove(3)
    index.put(100, unit(np.ones(D)), 100, 0)
    assert index.used == FIRST_ROWS and len(index.ids) == FIRST_ROWS and index.ids[3] == 100


def test_search_is_best_first_with_ties_to_the_older() -> None:
    index = KeyIndex(2)
    keys = {1: [0.0, 1.0], 2: [0.6, 0.8], 3: [1.0, 0.0], 4: [1.0, 0.0], 5: [0.8, 0.6]}
    for entry_id, key in keys.items():
        index.put(entry_id, np.array(key, np.float32), entry_id, 0)
    query = np.array([1.0, 0.0], np.float32)
    assert [i for i, _ in index.search(query, 5, None, (), -1.0)] == [3, 4, 5, 2, 1]
    assert [i for i, _ in index.search(query, 2, None, (), -1.0)] == [3, 4]
    assert [i for i, _ in index.search(query, 5, 4, {3}, 0.5)] == [2]
