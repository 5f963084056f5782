"""Host-side RoPE and eviction that renumbers positions (re-rotating the kept keys)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from venus.engines.kvcache import KVCache, run_cached
from venus.engines.manifest import ComponentEntry, load_manifest
from venus.engines.options import EngineOptions
from venus.engines.rope import Rope, rope_of
from venus.engines.runners import Engines
from venus.engines.session import open_component
from venus.errors import EngineError
from venus.export.model.layers import apply_rope, rope_cos_sin

TOL = 1e-4


def keys(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def embeds(engines: Engines, tokens: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, tokens, engines.backbone.hidden_size)).astype(np.float32)


@pytest.mark.parametrize("theta", [1e6, 1e4, 10.0])
def test_rotations_invert_and_compose(theta: float) -> None:
    rope = Rope(head_dim=16, theta=theta)
    k = keys((1, 2, 5, 16))
    np.testing.assert_allclose(rope.rotate(rope.rotate(k, 37), -37), k, atol=1e-5)
    np.testing.assert_allclose(rope.rotate(rope.rotate(k, 3000), -3000), k, atol=1e-5)
    np.testing.assert_allclose(
        rope.rotate(k, 11 + 250), rope.rotate(rope.rotate(k, 11), 250), atol=1e-5
    )
    np.testing.assert_allclose(rope.rotate(k, -9), rope.rotate(rope.rotate(k, -20), 11), atol=1e-5)
    assert not np.allclose(rope.rotate(k, 5), k, atol=1e-2)  # it does rotate
    # A rotation: every (i, i + head_dim / 2) pair keeps its length.
    r = rope.rotate(k, 123)
    np.testing.assert_allclose(
        np.hypot(r[..., :8], r[..., 8:]), np.hypot(k[..., :8], k[..., 8:]), rtol=1e-6
    )
    np.testing.assert_array_equal(rope.rotate(k, 0), k)


def test_rotation_is_the_exporters_rope() -> None:
    """Rotating an un-rotated key by p equals apply_rope at position p (export layers)."""
    rope = Rope(head_dim=16, theta=1e6)
    k = keys((1, 2, 4, 16), seed=1)
    positions = torch.tensor([[7, 7, 7, 7]])
    cos, sin = rope_cos_sin(positions, 16, 1e6)
    theirs = apply_rope(torch.from_numpy(k), cos, sin).numpy()
    np.testing.assert_allclose(rope.rotate(k, 7), theirs, atol=1e-6)
    # Per token positions: rotate each by its own offset.
    positions = torch.tensor([[0, 3, 100, 4000]])
    cos, sin = rope_cos_sin(positions, 16, 1e6)
    theirs = apply_rope(torch.from_numpy(k), cos, sin).numpy()
    ours = np.concatenate(
        [rope.rotate(k[:, :, i : i + 1], p) for i, p in enumerate([0, 3, 100, 4000])], 2
    )
    # (torch rounds position x inv_freq to float32: ~3e-5 rad at position 4000)
    np.testing.assert_allclose(ours, theirs, atol=TOL)


def test_fp16_keys_stay_fp16() -> None:
    rope = Rope(head_dim=16, theta=1e6)
    k = keys((1, 2, 3, 16)).astype(np.float16)
    out = rope.rotate(k, -40)
    assert out.dtype == np.float16 and out.shape == k.shape
    np.testing.assert_allclose(rope.rotate(out, 40), k, atol=5e-3)


def test_bad_shapes_and_parameters_are_clear() -> None:
    with pytest.raises(EngineError, match="head_dim 16"):
        Rope(head_dim=16, theta=1e6).rotate(keys((1, 2, 3, 8)), 1)
    with pytest.raises(EngineError, match="even"):
        Rope(head_dim=15, theta=1e6)
    with pytest.raises(EngineError, match="theta"):
        Rope(head_dim=16, theta=0.0)


def test_the_manifest_gives_the_backbones_rope(engines: Engines) -> None:
    assert rope_of(engines.manifest) == Rope(head_dim=16, theta=1e6)
    assert engines.backbone.rope == Rope(head_dim=16, theta=1e6)
    assert engines.backbone.new_state(max_tokens=4).rope == engines.backbone.rope
    m = engines.manifest
    assert rope_of(dataclasses.replace(m, model_config={})) is None
    no_head_dim = dataclasses.replace(m.components["backbone"], head_dim=None)
    components = {**m.components, "backbone": no_head_dim}
    assert rope_of(dataclasses.replace(m, components=components)) is None


def test_graph_keys_at_two_offsets_differ_by_the_rotation(engines: Engines) -> None:
    """The exported graph's cached keys at positions p.. rotated by q - p are its keys at q..
    (post q/k-norm, post-RoPE: what it caches); values do not depend on position."""
    runner = engines.backbone
    x = embeds(engines, 6, seed=4)
    for p, q in ((137, 5), (2, 300)):
        a, b = runner.new_state(max_tokens=8), runner.new_state(max_tokens=8)
        a.positions, b.positions = p, q
        runner.prefill(x, a)
        runner.prefill(x, b)
        assert (a.positions, b.positions) == (p + 6, q + 6)
        rope = runner.rope
        assert rope is not None and runner.entry.layers == 2
        for i in range(runner.entry.layers):
            (ka, va), (kb, vb) = a.kv.layer(i), b.kv.layer(i)
            assert not np.allclose(ka, kb, atol=1e-2)  # the positions did matter
            np.testing.assert_allclose(rope.rotate(ka, q - p), kb, atol=TOL)
            np.testing.assert_allclose(va, vb, atol=1e-6)


def test_rebased_eviction_without_sinks_leaves_the_models_view_unchanged(
    engines: Engines,
) -> None:
    """keep_first = 0: only relative positions matter, so renumbering (A) must give the
    same logits as the old gap (B); renumbering without re-rotating (C) does not."""
    runner = engines.backbone
    n, last = 12, 5
    x = embeds(engines, n, seed=5)
    a, b, c = (runner.new_state(max_tokens=16) for _ in range(3))
    b.rope = c.rope = None
    for s in (a, b, c):
        runner.prefill(x, s)
        assert s.evict(0, last) == n - last
        assert s.length == last
    assert a.positions == last and b.positions == c.positions == n
    c.positions = last  # renumbered, keys left where they were: wrong
    token = 7
    for k in range(3):
        ids = np.array([[token]], dtype=np.int64)
        out_a, out_b, out_c = (runner.step(ids, s) for s in (a, b, c))
        np.testing.assert_allclose(out_a.logits, out_b.logits, atol=TOL)
        np.testing.assert_allclose(out_a.hidden, out_b.hidden, atol=TOL)
        assert np.abs(out_a.logits - out_c.logits).max() > 100 * TOL
        assert a.positions == last + 1 + k and b.positions == n + 1 + k
        token = int(np.argmax(out_a.logits[0, -1]))
    ka, va = a.kv.layer(1)
    kb, vb = b.kv.layer(1)
    rope = runner.rope
    assert rope is not None
    np.testing.assert_allclose(ka, rope.rotate(kb, last - n), atol=TOL)
    np.testing.assert_allclose(va, vb, atol=TOL)


def test_positions_stay_within_the_capacity_over_many_evictions_with_sinks(
    engines: Engines,
) -> None:
    runner = engines.backbone
    capacity, sinks, recent, chunk = 32, 4, 8, 10
    state = runner.new_state(max_tokens=capacity)
    held: list[np.ndarray] = []  # the embeddings of the tokens in the cache, in order
    evictions = 0
    for i in range(20):
        x = embeds(engines, chunk, seed=100 + i)
        if state.length + chunk > capacity:
            dropped = state.evict(sinks, recent)
            assert dropped == len(held) - sinks - recent
            held = held[:sinks] + held[-recent:]
            evictions += 1
            assert state.positions == state.length == sinks + recent
        runner.prefill(x, state)
        held += list(x[0])
        assert state.positions == state.length == len(held) <= capacity
    assert evictions >= 8
    # Layer 0's keys depend only on each token and its position, so after all those
    # rotations they must be those of a fresh stream fed the kept tokens from position 0.
    fresh = runner.new_state(max_tokens=capacity)
    runner.prefill(np.stack(held)[None], fresh)
    (k, v), (k0, v0) = state.kv.layer(0), fresh.kv.layer(0)
    np.testing.assert_allclose(k, k0, atol=TOL)
    np.testing.assert_allclose(v, v0, atol=1e-6)


def test_a_manifest_without_rope_theta_keeps_the_old_eviction(
    engine_copy: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = engine_copy / "manifest.json"
    data = json.loads(path.read_text())
    del data["model_config"]["model"]["backbone"]["rope_theta"]
    path.write_text(json.dumps(data))
    assert rope_of(load_manifest(engine_copy)) is None
    options = EngineOptions(providers=("cpu",), cache_dir=tmp_path / "cache")
    engines = Engines.open(engine_copy, options)
    runner = engines.backbone
    assert runner.rope is None
    state = runner.new_state(max_tokens=32)
    assert state.rope is None
    runner.prefill(embeds(engines, 12, seed=6), state)
    before = [state.kv.layer(i) for i in range(2)]
    with caplog.at_level(logging.WARNING, logger="venus.engines.backbone"):
        assert state.evict(2, 4) == 6
        assert state.length == 6 and state.positions == 12  # positions keep growing
        runner.step(np.array([[3]]), state)
        assert state.evict(2, 4) == 1 and state.positions == 13
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per engine directory
    assert str(path) in warnings[0] and "re-run `venus export`" in warnings[0]
    keys0, values0 = before[0]
    got_keys, got_values = state.kv.layer(0)
    np.testing.assert_array_equal(got_keys[:, :, :2], keys0[:, :, :2])  # not re-rotated
    np.testing.assert_array_equal(got_keys[:, :, 2:5], keys0[:, :, 9:])
    np.testing.assert_array_equal(got_values[:, :, 2:5], values0[:, :, 9:])


def test_keep_shifts_only_the_kept_last_keys(toy: tuple[Path, ComponentEntry]) -> None:
    root, entry = toy
    session = open_component(root, "toy", entry, EngineOptions(providers=("cpu",)), ("cpu",))
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=2, capacity=16)
    x = keys((2, 1, 10, 4), seed=7)
    run_cached(session, kv, {"x": x}, {"total": (2, 1, 4), "side": x.shape}, new_tokens=10)
    seen: list[tuple[int, ...]] = []

    def shift(k: np.ndarray) -> np.ndarray:
        seen.append(k.shape)
        with pytest.raises(ValueError):
            k[...] = 0  # a read-only view of the cache
        return k * 10

    assert kv.keep(3, 4, shift) == 3
    assert seen == [(2, 1, 4, 4)]  # the key buffer only, the last 4 tokens
    got_keys, got_values = kv.layer(0)
    np.testing.assert_array_equal(got_keys[:, :, :3], x[:, :, :3])
    np.testing.assert_array_equal(got_keys[:, :, 3:], 10 * x[:, :, 6:])
    np.testing.assert_array_equal(got_values, 2 * np.concatenate((x[:, :, :3], x[:, :, 6:]), 2))
    assert kv.keep(3, 4, shift) == 0 and len(seen) == 1  # nothing to drop, nothing shifted
    with pytest.raises(EngineError, match="shift_keys returned shape"):
        kv.keep(1, 2, lambda k: k[:, :, :1])
