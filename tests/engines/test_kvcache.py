"""The IO-bound KV cache on a hand-built graph: contents, no reallocation, overflow, reset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from venus.engines.kvcache import KVCache, run_cached
from venus.engines.manifest import ComponentEntry
from venus.engines.options import EngineOptions
from venus.engines.session import Session, open_component
from venus.errors import EngineError


@pytest.fixture
def session(toy: tuple[Path, ComponentEntry]) -> Session:
    root, entry = toy
    return open_component(root, "toy", entry, EngineOptions(providers=("cpu",)), ("cpu",))


def step(session: Session, kv: KVCache, x: np.ndarray) -> np.ndarray:
    t = x.shape[2]
    out = run_cached(
        session, kv, {"x": x}, {"total": (kv.batch, 1, 4), "side": x.shape}, new_tokens=t
    )
    return out["total"]


def test_steps_grow_the_cache_in_place(session: Session) -> None:
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=2, capacity=16)
    ptrs = kv.data_ptrs()
    rng = np.random.default_rng(0)
    seen = []
    for t in (3, 1, 1, 2, 1):
        x = rng.standard_normal((2, 1, t, 4)).astype(np.float32)
        seen.append(x)
        total = step(session, kv, x)
        everything = np.concatenate(seen, axis=2)
        np.testing.assert_allclose(total, everything.sum(axis=2), rtol=1e-6, atol=1e-6)
        keys, values = kv.layer(0)
        np.testing.assert_array_equal(keys, everything)
        np.testing.assert_array_equal(values, 2 * everything)
        # The graph wrote its presents straight into our buffers: nothing was reallocated.
        assert kv.data_ptrs() == ptrs
        bound = {v.data_ptr() for v in kv.binding.get_outputs()}
        assert {b.ptr for b in kv.buffers[kv.current]} <= bound
    assert kv.length == 8


def test_overflow_is_a_clear_error_and_keeps_the_cache(session: Session) -> None:
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=1, capacity=4)
    step(session, kv, np.ones((1, 1, 3, 4), np.float32))
    with pytest.raises(EngineError, match=r"KV cache full \(3 tokens held \+ 2 new > capacity 4\)"):
        step(session, kv, np.ones((1, 1, 2, 4), np.float32))
    assert kv.length == 3
    step(session, kv, np.full((1, 1, 1, 4), 5.0, np.float32))
    np.testing.assert_array_equal(kv.layer(0)[0][0, 0, :, 0], [1, 1, 1, 5])


def test_reset_in_one_call(session: Session) -> None:
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=1, capacity=8)
    step(session, kv, np.ones((1, 1, 5, 4), np.float32))
    kv.reset()
    total = step(session, kv, np.full((1, 1, 1, 4), 2.0, np.float32))
    np.testing.assert_array_equal(total, np.full((1, 1, 4), 2.0))
    assert kv.length == 1


def test_keep_drops_the_middle_in_place(session: Session) -> None:
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=2, capacity=16)
    ptrs = kv.data_ptrs()
    x = np.random.default_rng(1).standard_normal((2, 1, 10, 4)).astype(np.float32)
    step(session, kv, x)
    keys, values = kv.layer(0)
    assert kv.keep(3, 2) == 5
    assert kv.length == 5 and kv.data_ptrs() == ptrs
    got_keys, got_values = kv.layer(0)
    np.testing.assert_array_equal(got_keys, np.concatenate((keys[:, :, :3], keys[:, :, -2:]), 2))
    np.testing.assert_array_equal(
        got_values, np.concatenate((values[:, :, :3], values[:, :, -2:]), 2)
    )
    # The next step sees exactly the kept tokens, then the new one.
    new = np.full((2, 1, 1, 4), 7.0, np.float32)
    total = step(session, kv, new)
    kept = np.concatenate((x[:, :, :3], x[:, :, -2:], new), axis=2)
    np.testing.assert_allclose(total, kept.sum(axis=2), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(kv.layer(0)[0], kept)


def test_keep_of_everything_or_more_drops_nothing(session: Session) -> None:
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=1, capacity=8)
    x = np.arange(20, dtype=np.float32).reshape(1, 1, 5, 4)
    step(session, kv, x)
    current = kv.current
    assert kv.keep(2, 3) == 0 and kv.keep(9, 0) == 0
    assert kv.length == 5 and kv.current == current
    np.testing.assert_array_equal(kv.layer(0)[0], x)
    assert kv.keep(0, 1) == 4  # the last token only
    np.testing.assert_array_equal(kv.layer(0)[0], x[:, :, 4:])
    assert kv.keep(0, 0) == 1 and kv.length == 0
    with pytest.raises(EngineError, match="must be >= 0"):
        kv.keep(-1, 2)
