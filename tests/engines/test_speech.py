"""Speech decoder runner against torch ``SpeechDecoder.speak_chunk`` over several chunks."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from venus.engines.runners import Engines
from venus.engines.sampler import Constraint, Greedy, LogitBias, Sampler

TOL = 1e-4


@torch.no_grad()
def test_forward_logits_match_torch(engines: Engines, reference: Any) -> None:
    runner, model = engines.speech, reference.speech_decoder
    state, cache = runner.new_state(max_tokens=64), model.new_cache()
    hidden = np.random.default_rng(0).standard_normal((1, 4, runner.cond_dim)).astype(np.float32)
    start = np.array([[runner.start_token]], dtype=np.int64)
    ours = runner.forward(hidden, start, state)
    x = torch.cat(
        (model.condition(torch.from_numpy(hidden)), model.embed(torch.from_numpy(start))), 1
    )
    theirs, _ = model.step(x, cache)
    assert np.abs(ours - theirs.numpy()).max() < TOL
    for token in (7, 100):
        ids = np.array([[token]], dtype=np.int64)
        ours = runner.forward(np.zeros((1, 0, runner.cond_dim), np.float32), ids, state)
        theirs, _ = model.step(model.embed(torch.from_numpy(ids)), cache)
        assert np.abs(ours - theirs.numpy()).max() < TOL


@torch.no_grad()
def test_greedy_chunks_match_speak_chunk(engines: Engines, reference: Any) -> None:
    runner, model = engines.speech, reference.speech_decoder
    state, cache = runner.new_state(max_tokens=256), model.new_cache()
    rng = np.random.default_rng(1)
    per_chunk = engines.manifest.schedule.speech_tokens
    for n in (3, 5, 2):
        hidden = rng.standard_normal((1, n, runner.cond_dim)).astype(np.float32)
        ours = runner.speak(hidden, state, Sampler(choose=Greedy()), per_chunk)
        theirs = model.speak_chunk(torch.from_numpy(hidden), cache, per_chunk)[0].tolist()
        ended = theirs[-1] == runner.end_token
        assert ours.ended == ended
        assert ours.tokens.tolist() == (theirs[:-1] if ended else theirs)
        assert runner.start_token not in ours.tokens
        assert state.kv.length == cache.length


def test_end_stops_the_chunk_and_start_is_never_emitted(engines: Engines) -> None:
    runner = engines.speech
    hidden = np.ones((1, 2, runner.cond_dim), np.float32)
    state = runner.new_state(max_tokens=64)
    only_end = Sampler(constraint=Constraint.of([runner.end_token]))
    chunk = runner.speak(hidden, state, only_end, max_tokens=25)
    assert chunk.ended and chunk.tokens.size == 0
    assert state.kv.length == 3  # the condition and start; end is never fed back

    state.reset()
    push_start = Sampler(bias=LogitBias({runner.start_token: 1e6}))
    chunk = runner.speak(hidden, state, push_start, max_tokens=4)
    assert runner.start_token not in chunk.tokens.tolist()
    assert chunk.tokens.size == 4 or chunk.ended


def test_a_reply_longer_than_the_cache_keeps_going_on_its_recent_half(engines: Engines) -> None:
    """Before: a reply past the cache raised "KV cache full" (the session restarted). Now
    the state keeps its recent half and decoding goes on. With no sinks only relative
    positions matter, so renumbering (rope) and not renumbering (positions grow past the
    cache) must choose the very same tokens: the re-rotation is exact."""
    runner = engines.speech
    assert runner.rope is not None  # the tiny manifest carries rope_theta
    capacity, per_chunk = 64, 10
    renumbered = runner.new_state(max_tokens=capacity)
    growing = runner.new_state(max_tokens=capacity)
    growing.rope = None
    rng = np.random.default_rng(5)
    greedy = Sampler(choose=Greedy())
    for _ in range(12):  # 12 x (2 + 1 + 10) tokens: several times the cache
        hidden = rng.standard_normal((1, 2, runner.cond_dim)).astype(np.float32)
        a = runner.speak(hidden, renumbered, greedy, per_chunk)
        b = runner.speak(hidden, growing, greedy, per_chunk)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        assert renumbered.kv.length <= capacity
        assert renumbered.positions == renumbered.kv.length  # never past the cache
    assert growing.positions > 2 * capacity  # the same cache, positions never renumbered
