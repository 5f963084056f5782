"""Backbone runner (embedding + backbone graphs, IO-bound KV cache) against torch ``Backbone``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from venus.engines.runners import Engines
from venus.errors import EngineError

TOL = 1e-4


def err(ours: np.ndarray, theirs: torch.Tensor) -> float:
    assert ours.shape == tuple(theirs.shape), (ours.shape, tuple(theirs.shape))
    return float(np.abs(ours - theirs.detach().numpy()).max(initial=0.0))


def test_embedding_matches(engines: Engines, reference: Any) -> None:
    ids = np.array([[1, 5, 511, engines.token_id("<|speak|>")]], dtype=np.int64)
    ours = engines.backbone.embed(ids)
    assert err(ours, reference.backbone.embed(torch.from_numpy(ids))) == 0.0


@torch.no_grad()
def test_prefill_then_five_decode_steps_match_torch_in_place(
    engines: Engines, reference: Any
) -> None:
    runner, model = engines.backbone, reference.backbone
    state = runner.new_state(max_tokens=32)
    cache = model.new_cache()
    ptrs = state.kv.data_ptrs()
    rng = np.random.default_rng(0)
    embeds = rng.standard_normal((1, 7, runner.hidden_size)).astype(np.float32)

    out = runner.prefill(embeds, state)
    logits, hidden = model.step(torch.from_numpy(embeds), cache)
    errors = [err(out.logits, logits), err(out.hidden, hidden)]
    token = int(np.argmax(out.logits[0, -1]))
    for _ in range(5):
        ids = np.array([[token]], dtype=np.int64)
        out = runner.step(ids, state)
        logits, hidden = model.step(model.embed(torch.from_numpy(ids)), cache)
        errors += [err(out.logits, logits), err(out.hidden, hidden)]
        assert state.kv.data_ptrs() == ptrs  # the cache was never reallocated
        token = int(np.argmax(out.logits[0, -1]))
    assert max(errors) < TOL, errors
    assert state.length == cache.length == 12 and state.positions == 12
    for i in range(model.shape.layers):
        keys, values = state.kv.layer(i)
        assert err(keys, cache.keys[i]) < TOL and err(values, cache.values[i]) < TOL


def test_batch_of_two_streams(engines: Engines) -> None:
    runner = engines.backbone
    rng = np.random.default_rng(1)
    embeds = rng.standard_normal((2, 3, runner.hidden_size)).astype(np.float32)
    both = runner.prefill(embeds, runner.new_state(batch=2, max_tokens=8))
    first = runner.prefill(embeds[:1], runner.new_state(batch=1, max_tokens=8))
    np.testing.assert_allclose(both.logits[:1], first.logits, atol=TOL)


def test_reset_starts_over(engines: Engines) -> None:
    runner = engines.backbone
    embeds = np.random.default_rng(2).standard_normal((1, 4, runner.hidden_size)).astype(np.float32)
    state = runner.new_state(max_tokens=16)
    first = runner.prefill(embeds, state)
    runner.step(np.array([[3]]), state)
    state.reset()
    again = runner.prefill(embeds, state)
    np.testing.assert_array_equal(first.logits, again.logits)
    assert state.positions == 4


def test_a_full_cache_says_so(engines: Engines) -> None:
    runner = engines.backbone
    state = runner.new_state(max_tokens=8)
    runner.prefill(np.zeros((1, 6, runner.hidden_size), np.float32), state)
    with pytest.raises(EngineError, match=r"KV cache full \(6 tokens held \+ 3 new > capacity 8\)"):
        runner.step(np.array([[1, 2, 3]]), state)
    assert state.length == 6 and state.positions == 6
    runner.step(np.array([[1, 2]]), state)
    assert state.length == 8


def test_wrong_shapes_are_clear(engines: Engines) -> None:
    runner = engines.backbone
    with pytest.raises(EngineError, match="expected \\[1, tokens, 64\\]"):
        runner.prefill(np.zeros((1, 2, 3), np.float32), runner.new_state(max_tokens=4))
    with pytest.raises(EngineError, match="pass \\[batch, sequence\\]"):
        runner.embed(np.array([1, 2]))


@torch.no_grad()
def test_steps_after_eviction_match_torch_with_the_same_slices(
    engines: Engines, reference: Any
) -> None:
    runner, model = engines.backbone, reference.backbone
    state = runner.new_state(max_tokens=32)
    state.rope = None  # the torch reference below slices without re-rotating
    cache, untouched = model.new_cache(), model.new_cache()
    embeds = np.random.default_rng(3).standard_normal((1, 12, runner.hidden_size))
    embeds = embeds.astype(np.float32)
    runner.prefill(embeds, state)
    model.step(torch.from_numpy(embeds), cache)
    model.step(torch.from_numpy(embeds), untouched)
    before = [state.kv.layer(i) for i in range(model.shape.layers)]

    assert state.evict(2, 4) == 6
    assert state.length == 6 and state.positions == 12  # positions are not renumbered
    for i, (keys, values) in enumerate(before):
        got_keys, got_values = state.kv.layer(i)
        np.testing.assert_array_equal(got_keys, np.concatenate((keys[:, :, :2], keys[:, :, 8:]), 2))
        np.testing.assert_array_equal(
            got_values, np.concatenate((values[:, :, :2], values[:, :, 8:]), 2)
        )
    # The reference, sliced the same way; its next position stays 12 too.
    for i in range(model.shape.layers):
        cache.keys[i] = torch.cat((cache.keys[i][:, :, :2], cache.keys[i][:, :, 8:]), dim=2)
        cache.values[i] = torch.cat((cache.values[i][:, :, :2], cache.values[i][:, :, 8:]), 2)
    cache.mask = cache.mask[:, :6]

    errors, gaps = [], []
    token = 5
    for _ in range(3):
        ids = np.array([[token]], dtype=np.int64)
        out = runner.step(ids, state)
        logits, hidden = model.step(model.embed(torch.from_numpy(ids)), cache)
        full, _ = model.step(model.embed(torch.from_numpy(ids)), untouched)
        errors += [err(out.logits, logits), err(out.hidden, hidden)]
        gaps.append(err(out.logits, full))
        token = int(np.argmax(out.logits[0, -1]))
    assert max(errors) < TOL, errors
    assert max(gaps) > 100 * TOL, gaps  # the eviction did change what the model sees
    assert state.length == cache.length == 9 and state.positions == cache.positions == 15
