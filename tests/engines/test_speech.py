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
