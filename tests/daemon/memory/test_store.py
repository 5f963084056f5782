"""The long-session memory store: folding, tiers, last-tier merges, the budget, search."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from venus.daemon.memory.store import ENTRY_OVERHEAD_BYTES, Entry, MemorySettings, MemoryStore

D = 16  # token width in the hand-sized tests


def unit(v: NDArray[Any]) -> NDArray[np.float32]:
    v = np.asarray(v, np.float32)
    return v / np.float32(np.linalg.norm(v))


def scene(rng: np.random.Generator, rows: int = 4, dim: int = D) -> NDArray[np.float32]:
    """Tokens [rows, dim] around one random direction, so the mean is well defined."""
    centre = rng.normal(size=dim) * 3
    return (centre + rng.normal(size=(rows, dim))).astype(np.float32)


def along(direction: NDArray[Any], rows: int = 4) -> NDArray[np.float32]:
    """Tokens whose mean is exactly ``direction`` (rows differ, the mean does not)."""
    spread = np.zeros((rows, len(direction)), np.float32)
    spread[::2, 0], spread[1::2, 0] = 0.5, -0.5
    if rows % 2:
        spread[-1, 0] = 0.0
    return np.asarray(direction, np.float32) + spread


def close16(actual: Any, desired: Any) -> None:
    """Equal up to float16 storage (and the pooling of float16 rows)."""
    np.testing.assert_allclose(np.asarray(actual, np.float32), desired, rtol=2e-3, atol=2e-3)


def entry_bytes(rows: int, dim: int = D) -> int:
    return rows * dim * 2 + dim * 4 + ENTRY_OVERHEAD_BYTES


def check_budget(store: MemoryStore) -> None:
    limits = store.settings.tier_budgets
    assert store.nbytes <= store.settings.budget_bytes
    assert all(b <= lim for b, lim in zip(store.tier_bytes(), limits, strict=True))


def tiers(store: MemoryStore) -> dict[int, int]:
    return {e.id: e.tier for e in store.entries()}


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"budget_bytes": 0}, "budget_bytes"),
        ({"budget_bytes": True}, "budget_bytes"),
        ({"budget_bytes": 10.5}, "budget_bytes"),
        ({"tier_tokens": (), "tier_shares": ()}, "tier_tokens"),
        ({"tier_tokens": (0, -1, 1)}, "tier_tokens[1]"),
        ({"tier_tokens": (0, 2)}, "tier_shares"),
        ({"tier_shares": (0.5, 0.5, 0.5)}, "tier_shares"),
        ({"tier_shares": (0.0, 0.5, 0.5)}, "tier_shares[0]"),
        ({"merge_similarity": 1.5}, "merge_similarity"),
        ({"merge_similarity": float("nan")}, "merge_similarity"),
    ],
)
def test_settings_errors_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}:"):
        MemorySettings(**{"budget_bytes": 10_000, **kwargs})


def test_settings_defaults_and_tier_budgets() -> None:
    s = MemorySettings(budget_bytes=1000)
    assert (s.tier_tokens, s.tier_shares, s.merge_similarity) == (
        (0, 2, 1),
        (0.25, 0.25, 0.5),
        0.95,
    )
    assert s.tier_budgets == (250, 250, 500)


# -- folding near-duplicates ---------------------------------------------------------------


def test_consecutive_near_duplicates_fold_into_one_entry() -> None:
    rng = np.random.default_rng(1)
    store = MemoryStore(MemorySettings(budget_bytes=100_000))
    a = scene(rng)
    b = a + rng.normal(scale=0.01, size=a.shape).astype(np.float32)
    c = a + rng.normal(scale=0.01, size=a.shape).astype(np.float32)
    first = store.add("vision", 7, 7.0, 8.0, a)
    second = store.add("vision", 8, 8.0, 9.0, b)
    third = store.add("vision", 9, 9.0, 10.0, c)
    assert len(store) == 1 and first.id == second.id == third.id
    assert (third.first_chunk, third.last_chunk, third.start_s, third.end_s) == (7, 9, 7.0, 10.0)
    assert third.merged == 3 and third.tier == 0
    close16(third.tokens, (a + b + c) / 3)
    keys = [unit(t.mean(axis=0)) for t in (a, b, c)]
    np.testing.assert_allclose(third.key, unit(sum(keys)), atol=1e-6)
    assert np.linalg.norm(third.key) == pytest.approx(1.0, abs=1e-6)
    assert store.nbytes == third.nbytes == entry_bytes(4)


@pytest.mark.parametrize("case", ["gap", "other kind", "dissimilar", "other shape"])
def test_no_fold(case: str) -> None:
    rng = np.random.default_rng(2)
    store = MemoryStore(MemorySettings(budget_bytes=100_000))
    a = scene(rng)
    first = store.add("vision", 0, 0.0, 1.0, a)
    chunk, kind, tokens = 1, "vision", a.copy()
    if case == "gap":
        chunk = 2
    elif case == "other kind":
        kind = "audio"
    elif case == "dissimilar":
        tokens = along(unit(rng.normal(size=D)) * 3 - unit(a.mean(axis=0)) * 3)
    else:
        tokens = np.concatenate([a, a[:1]])
    second = store.add(kind, chunk, 1.0, 2.0, tokens)
    assert second.id != first.id and len(store) == 2 and first.merged == second.merged == 1


def test_threshold_is_inclusive_and_configurable() -> None:
    x, y = np.zeros(D, np.float32), np.zeros(D, np.float32)
    x[0], y[0], y[1] = 1.0, 1.0, 1.0  # cosine 0.7071
    cosine = float(unit(x) @ unit(y))
    for threshold, folds in ((cosine, True), (float(np.nextafter(cosine, 1.0)), False)):
        store = MemoryStore(MemorySettings(budget_bytes=100_000, merge_similarity=threshold))
        store.add("audio", 0, 0.0, 1.0, along(x * 4))
        store.add("audio", 1, 1.0, 2.0, along(y * 4))
        assert (len(store) == 1) is folds


def test_no_fold_into_an_entry_already_pooled() -> None:
    # tier 0's share is smaller than one 2-row entry: every chunk goes straight to tier 1
    settings = MemorySettings(budget_bytes=10_000, tier_shares=(0.02, 0.48, 0.5))
    store = MemoryStore(settings)
    a = scene(np.random.default_rng(3), rows=2)  # as many rows as tier 1 keeps
    first = store.add("vision", 0, 0.0, 1.0, a)
    second = store.add("vision", 1, 1.0, 2.0, a)
    assert first.tier == second.tier == 1 and first.tokens.shape == second.tokens.shape
    assert second.id != first.id and len(store) == 2


# -- tiers and the budget ------------------------------------------------------------------


def small_store(**kw: Any) -> MemoryStore:
    """Tier 0 holds two 4-row entries (288 B each), tier 1 two 2-row ones (224 B), tier 2
    four 1-row ones (192 B)."""
    return MemoryStore(MemorySettings(budget_bytes=2000, tier_shares=(0.3, 0.25, 0.45), **kw))


def test_the_oldest_entry_of_a_full_tier_moves_down_pooled() -> None:
    rng = np.random.default_rng(4)
    store = small_store()
    assert store.settings.tier_budgets == (600, 500, 900)
    chunks = [scene(rng) for _ in range(5)]
    ids = [store.add("vision", c, float(c), c + 1.0, chunks[c]).id for c in range(2)]
    assert tiers(store) == dict.fromkeys(ids, 0)
    first_key = store.entries()[0].key.copy()
    ids.append(store.add("vision", 2, 2.0, 3.0, chunks[2]).id)
    assert tiers(store) == {ids[0]: 1, ids[1]: 0, ids[2]: 0}
    pooled = store.get(ids[0])
    assert pooled is not None and pooled.tokens.shape == (2, D)
    groups = np.array_split(chunks[0], 2)
    close16(pooled.tokens, [g.mean(axis=0) for g in groups])
    np.testing.assert_array_equal(pooled.key, first_key)  # the key survives pooling
    ids += [store.add("vision", c, float(c), c + 1.0, chunks[c]).id for c in (3, 4)]
    assert tiers(store) == {ids[0]: 2, ids[1]: 1, ids[2]: 1, ids[3]: 0, ids[4]: 0}
    rows = {e.id: e.tokens.shape[0] for e in store.entries()}
    assert rows == {ids[0]: 1, ids[1]: 2, ids[2]: 2, ids[3]: 4, ids[4]: 4}
    oldest = store.get(ids[0])
    assert oldest is not None
    close16(oldest.tokens[0], chunks[0].mean(axis=0))
    assert store.tier_bytes() == [2 * entry_bytes(4), 2 * entry_bytes(2), entry_bytes(1)]
    check_budget(store)


def test_pooling_uses_array_split_groups() -> None:
    store = MemoryStore(MemorySettings(budget_bytes=10_000, tier_shares=(0.01, 0.49, 0.5)))
    tokens = np.arange(7 * D, dtype=np.float32).reshape(7, D) / 10
    entry = store.add("vision", 0, 0.0, 1.0, tokens)  # straight to tier 1: 2 rows
    expected = [g.mean(axis=0) for g in np.array_split(tokens, 2)]
    close16(entry.tokens, expected)


def directions(n: int, seed: int = 5) -> NDArray[np.float32]:
    """``n`` orthonormal directions in D dimensions."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(D, D)))
    return q[:n].astype(np.float32)


def test_last_tier_merges_the_most_similar_adjacent_pair_of_a_kind() -> None:
    # one tier of 1-row entries (192 B): five fit in 1000 bytes
    store = MemoryStore(MemorySettings(budget_bytes=1000, tier_tokens=(1,), tier_shares=(1.0,)))
    a, b, c, e = directions(4)
    b_like = unit(b * 0.9 + c * 0.3)  # 0.95 to b
    a_like = unit(a * 0.99 + e * 0.1)  # 0.995 to a, but not adjacent to it
    v1 = store.add("vision", 0, 0.0, 1.0, along(a * 3))
    v2 = store.add("vision", 2, 2.0, 3.0, along(b * 3))
    store.add("audio", 3, 3.0, 4.0, along(b * 3))  # as like b, but another kind
    v3 = store.add("vision", 4, 4.0, 5.0, along(b_like * 3))
    v4 = store.add("vision", 6, 6.0, 7.0, along(a_like * 3))
    assert len(store) == 5
    v5 = store.add("vision", 8, 8.0, 9.0, along(c * 3))
    vision = [x for x in store.entries() if x.kind == "vision"]
    assert [x.id for x in vision] == [v1.id, v2.id, v4.id, v5.id]
    kept = store.get(v2.id)
    assert kept is not None and store.get(v3.id) is None
    assert (kept.first_chunk, kept.last_chunk, kept.start_s, kept.end_s) == (2, 4, 2.0, 5.0)
    assert kept.merged == 2
    assert store.absorbed == {v3.id: v2.id}  # what the last add merged away, and into what
    np.testing.assert_allclose(kept.key, unit(unit(b) + b_like), atol=1e-6)
    close16(kept.tokens[0], (b * 3 + b_like * 3) / 2)
    check_budget(store)


def one_tier(entries: int, **kw: Any) -> MemoryStore:
    """One tier of 1-row entries (192 B each), room for ``entries`` of them."""
    budget = entries * entry_bytes(1) + 100
    return MemoryStore(MemorySettings(budget, tier_tokens=(1,), tier_shares=(1.0,), **kw))


def test_the_most_similar_pair_of_any_kind_merges() -> None:
    a, b, c, e = directions(4, seed=16)
    for first, second in (("vision", "audio"), ("audio", "vision")):
        store = one_tier(4)
        x = store.add(first, 0, 0.0, 1.0, along(a))
        store.add(first, 2, 2.0, 3.0, along(unit(a + b * 0.5)))  # 0.89 to a
        y = store.add(second, 0, 0.0, 1.0, along(c))
        y2 = store.add(second, 2, 2.0, 3.0, along(unit(c + e * 0.1)))  # 0.995 to c
        store.add(first, 4, 4.0, 5.0, along(e))
        assert len(store) == 4 and store.get(y2.id) is None and store.get(x.id) is not None
        merged = store.get(y.id)
        assert merged is not None and merged.merged == 2


def test_neighbours_are_neighbours_in_time_not_in_storage() -> None:
    a, b, c, d, e = directions(5, seed=17)
    store = one_tier(4)
    ea, eb = store.add("vision", 0, 0.0, 1.0, along(a)), store.add("vision", 2, 2.0, 3.0, along(b))
    eb2 = store.add("vision", 4, 4.0, 5.0, along(unit(b + c * 0.2)))
    ec = store.add("vision", 6, 6.0, 7.0, along(c))
    ed = store.add("vision", 8, 8.0, 9.0, along(unit(c + d)))  # 0.71 to c; b' merges into b
    assert [x.id for x in store.entries()] == [ea.id, eb.id, ec.id, ed.id]
    # e reuses b''s key-index slot, so in storage it sits between b and c; b ~ e, but in
    # time c and d are the most similar neighbours
    ee = store.add("vision", 10, 10.0, 11.0, along(unit(b + e * 0.05)))
    assert [x.id for x in store.entries()] == [ea.id, eb.id, ec.id, ee.id]
    merged = store.get(ec.id)
    assert merged is not None and merged.last_chunk == 8 and store.get(eb2.id) is None


def test_merges_weigh_by_chunk_count() -> None:
    store = MemoryStore(
        MemorySettings(budget_bytes=500, tier_tokens=(1,), tier_shares=(1.0,), merge_similarity=0.9)
    )
    a, b = directions(2, seed=6)
    near_a = unit(a * 0.95 + b * 0.3)
    for chunk in range(3):  # three chunks folded into one entry
        store.add("vision", chunk, float(chunk), chunk + 1.0, along(a * 2))
    store.add("vision", 9, 9.0, 10.0, along(near_a * 2))
    store.add("vision", 11, 11.0, 12.0, along(b * 2))
    merged = store.entries()[0]
    assert len(store) == 2 and merged.merged == 4 and merged.last_chunk == 9
    np.testing.assert_allclose(merged.key, unit(3 * unit(a) + near_a), atol=1e-6)
    close16(merged.tokens[0], (3 * a * 2 + near_a * 2) / 4)


def test_the_oldest_is_dropped_only_when_nothing_can_merge() -> None:
    store = MemoryStore(MemorySettings(budget_bytes=400, tier_tokens=(1,), tier_shares=(1.0,)))
    a, b, c = directions(3, seed=7)
    first = store.add("vision", 0, 0.0, 1.0, along(a))
    second = store.add("audio", 0, 0.0, 1.0, along(b))
    third = store.add("sensor", 1, 1.0, 2.0, along(c))  # one entry per kind: none can merge
    assert [x.id for x in store.entries()] == [second.id, third.id]
    assert store.get(first.id) is None
    check_budget(store)


def test_an_entry_too_big_for_tier_0_goes_straight_down_and_one_too_big_fails() -> None:
    store = MemoryStore(MemorySettings(budget_bytes=2000))  # 500 bytes for tier 0
    entry = store.add("vision", 0, 0.0, 1.0, scene(np.random.default_rng(8), rows=16))
    assert entry.tier == 1 and entry.tokens.shape == (2, D)
    with pytest.raises(ValueError, match=r"budget_bytes=2000"):
        store.add("wide", 1, 1.0, 2.0, np.ones((1, 1000), np.float32))
    assert len(store) == 1


def test_budget_holds_after_every_add_of_thousands() -> None:
    rng = np.random.default_rng(9)
    store = MemoryStore(MemorySettings(budget_bytes=60_000))
    scenes = [scene(rng, rows=8, dim=32) for _ in range(12)]
    current = scenes[0]
    for chunk in range(2500):
        if rng.random() < 0.1:
            current = scenes[rng.integers(len(scenes))] if rng.random() < 0.7 else scene(rng, 8, 32)
        seen = current + rng.normal(scale=0.05, size=current.shape).astype(np.float32)
        store.add("vision", chunk, float(chunk), chunk + 1.0, seen)
        check_budget(store)
        rows = int(rng.integers(1, 6))
        store.add("audio", chunk, float(chunk), chunk + 1.0, scene(rng, rows, 32))
        check_budget(store)
    entries = store.entries()
    assert store.nbytes == sum(e.nbytes for e in entries)
    assert store.tier_bytes() == [sum(e.nbytes for e in entries if e.tier == t) for t in range(3)]
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert any(e.merged > 1 for e in entries) and {e.tier for e in entries} == {0, 1, 2}
    for e in entries:  # rows follow tier_tokens; the key index agrees with the entries
        assert e.tokens.shape[0] <= (8, 2, 1)[e.tier]
        assert e.kind == "audio" or e.tokens.shape[0] == (8, 2, 1)[e.tier]
        best, score = store.search(e.kind, e.key, 1)[0]
        assert score == pytest.approx(1.0, abs=1e-5)
        assert np.dot(best.key, e.key) == pytest.approx(1.0, abs=1e-5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokens=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    weights=st.lists(st.integers(1, 5), min_size=4, max_size=4),
    budget=st.integers(3000, 20_000),
    seed=st.integers(0, 2**16),
)
def test_budget_holds_for_any_tiers(
    tokens: list[int], weights: list[int], budget: int, seed: int
) -> None:
    shares = tuple(w / sum(weights[: len(tokens)]) for w in weights[: len(tokens)])
    store = MemoryStore(MemorySettings(budget, tuple(tokens), shares, merge_similarity=0.9))
    rng = np.random.default_rng(seed)
    base = scene(rng, 6)
    for chunk in range(150):
        rows = int(rng.integers(1, 7))
        x = base[:rows] if rng.random() < 0.3 else scene(rng, rows)
        kind = ("vision", "audio", "other")[int(rng.integers(3))]
        try:
            store.add(kind, chunk, float(chunk), chunk + 1.0, x)
        except ValueError as e:  # only an entry no tier can take
            assert "budget_bytes" in str(e)
        check_budget(store)
        assert store.nbytes == sum(e.nbytes for e in store.entries())


# -- search --------------------------------------------------------------------------------


def test_search_ranks_filters_and_limits() -> None:
    store = MemoryStore(MemorySettings(budget_bytes=100_000))
    a, b, c = directions(3, seed=10)
    ea = store.add("vision", 0, 0.0, 1.0, along(a))
    eb = store.add("vision", 2, 2.0, 3.0, along(unit(a + b)))
    ec = store.add("vision", 4, 4.0, 5.0, along(c))
    store.add("audio", 5, 5.0, 6.0, along(a))
    found = store.search("vision", a, 3)
    assert [e.id for e, _ in found] == [ea.id, eb.id, ec.id]
    assert [s for _, s in found] == pytest.approx([1.0, 0.7071, 0.0], abs=1e-4)
    assert [e.id for e, _ in store.search("vision", along(a * 5, rows=3), 1)] == [ea.id]
    assert [e.id for e, _ in store.search("vision", a, 3, min_similarity=0.5)] == [ea.id, eb.id]
    assert [e.id for e, _ in store.search("vision", a, 3, before_chunk=2)] == [ea.id]
    assert [e.id for e, _ in store.search("vision", a, 2, exclude={ea.id})] == [eb.id, ec.id]
    assert store.search("vision", a, 0) == [] and store.search("smell", a, 3) == []
    with pytest.raises(ValueError, match="key"):
        store.search("vision", np.ones(D + 1), 1)


def test_a_distinctive_old_scene_is_found_after_thousands_of_chunks() -> None:
    # A camera wandering between 20 rooms, its view drifting a little each second (so
    # neighbouring entries are alike), and one distinctive sight at chunk 20.
    rng = np.random.default_rng(11)
    dim = 64
    store = MemoryStore(MemorySettings(budget_bytes=150_000))
    rooms = [scene(rng, rows=8, dim=dim) for _ in range(20)]
    distinctive = scene(rng, rows=8, dim=dim)
    view = rooms[0]
    for chunk in range(3000):
        if chunk == 20:
            kept = store.add("vision", chunk, float(chunk), chunk + 1.0, distinctive)
            continue
        if rng.random() < 0.03:
            view = rooms[rng.integers(len(rooms))]
        view = view + rng.normal(scale=1.0, size=(1, dim)).astype(np.float32)
        seen = view + rng.normal(scale=0.3, size=view.shape).astype(np.float32)
        store.add("vision", chunk, float(chunk), chunk + 1.0, seen)
    entry = store.get(kept.id)
    assert entry is not None and entry.tier == 2 and entry.tokens.shape == (1, dim)
    assert entry.merged == 1  # it outlived the redundant entries around it
    assert np.mean([e.merged for e in store.entries() if e.tier == 2]) > 5
    query = distinctive + rng.normal(scale=1.0, size=distinctive.shape).astype(np.float32)
    query[::2] = 0.0  # half the tokens masked
    assert kept.id in [e.id for e, _ in store.search("vision", query, 3)]
    assert kept.id not in [e.id for e, _ in store.search("vision", query, 3, before_chunk=20)]
    assert kept.id not in [e.id for e, _ in store.search("vision", query, 3, exclude={kept.id})]


# -- change tracking, restore, odds and ends -----------------------------------------------


def test_take_changes_reports_adds_folds_moves_and_removals() -> None:
    store = MemoryStore(MemorySettings(budget_bytes=1000, tier_tokens=(1,), tier_shares=(1.0,)))
    a, b, c, d, e = directions(5, seed=12)
    first = store.add("vision", 0, 0.0, 1.0, along(a))
    changed, removed = store.take_changes()
    assert [x.id for x in changed] == [first.id] and removed == []
    assert store.take_changes() == ([], [])
    folded = store.add("vision", 1, 1.0, 2.0, along(a))
    changed, _ = store.take_changes()
    assert [(x.id, x.merged) for x in changed] == [(first.id, 2)] and folded.id == first.id
    for chunk, v in enumerate((b, unit(b + c * 0.1), d, e, c), start=3):
        store.add("vision", chunk * 2, 0.0, 1.0, along(v))  # the sixth merges b with b'
    changed, removed = store.take_changes()
    assert len(removed) == 1 and store.get(removed[0]) is None
    assert removed[0] not in {x.id for x in changed}
    store.clear()
    assert len(store) == 0 and store.nbytes == 0
    _, removed = store.take_changes()
    assert len(removed) == 5


def test_restore_loads_without_marking_and_ids_continue() -> None:
    rng = np.random.default_rng(13)
    source = MemoryStore(MemorySettings(budget_bytes=20_000))
    for chunk in range(40):
        source.add("vision", chunk, float(chunk), chunk + 1.0, scene(rng))
    saved = source.entries()
    store = MemoryStore(MemorySettings(budget_bytes=20_000))
    store.restore(reversed(saved))
    assert store.take_changes() == ([], [])
    assert [e.id for e in store.entries()] == [e.id for e in saved]
    assert store.tier_bytes() == source.tier_bytes()
    query = saved[0].key
    assert [e.id for e, _ in store.search("vision", query, 5)] == [
        e.id for e, _ in source.search("vision", query, 5)
    ]
    new = store.add("vision", 100, 100.0, 101.0, scene(rng))
    assert new.id == max(e.id for e in saved) + 1
    with pytest.raises(ValueError, match="not empty"):
        store.restore(saved)


def test_restore_into_a_smaller_budget_moves_entries_and_marks_them() -> None:
    rng = np.random.default_rng(14)
    source = MemoryStore(MemorySettings(budget_bytes=20_000))
    for chunk in range(40):
        source.add("vision", chunk, float(chunk), chunk + 1.0, scene(rng))
    store = MemoryStore(
        MemorySettings(budget_bytes=5_000, tier_tokens=(0, 1), tier_shares=(0.5, 0.5))
    )
    store.restore(source.entries())
    check_budget(store)
    changed, removed = store.take_changes()
    assert changed and removed
    assert all(e.tokens.shape[0] == 1 for e in store.entries() if e.tier == 1)


@pytest.mark.parametrize(
    ("tokens", "match"),
    [
        (np.ones(D, np.float32), "shape"),
        (np.ones((0, D), np.float32), "shape"),
        (np.ones((2, D), np.int32), "floats"),
        (np.full((2, D), np.nan, np.float32), "NaN"),
        (np.full((2, D), 1e6, np.float32), "float16"),
        (np.ones((2, D + 1), np.float32), "width 17"),
    ],
)
def test_bad_tokens_are_refused(tokens: NDArray[Any], match: str) -> None:
    store = MemoryStore(MemorySettings(budget_bytes=10_000))
    store.add("vision", 0, 0.0, 1.0, np.ones((2, D), np.float32))
    with pytest.raises(ValueError, match=match):
        store.add("vision", 1, 1.0, 2.0, tokens)
    assert len(store) == 1


def test_entries_are_read_only_snapshots() -> None:
    store = MemoryStore(MemorySettings(budget_bytes=10_000))
    tokens = scene(np.random.default_rng(15))
    entry = store.add("vision", 0, 0.0, 1.0, tokens)
    tokens[:] = 0.0  # the caller's array is not kept
    assert np.abs(entry.tokens).sum() > 0
    with pytest.raises(ValueError):
        entry.tokens[0, 0] = 1.0
    with pytest.raises(ValueError):
        entry.key[0] = 1.0
    later = store.add("vision", 1, 1.0, 2.0, entry.tokens.astype(np.float32))  # folds
    assert later.id == entry.id and later.merged == 2 and entry.merged == 1
    assert isinstance(later, Entry) and store.get(entry.id) is later
