"""Speech decoder: conditioning, KV-cache decoding, and the per-chunk greedy reference."""

from __future__ import annotations

import torch

from venus.export.model.config import PRESETS
from venus.export.model.init import init_component
from venus.export.model.speech import SpeechDecoder

TOL = 1e-5


def decoder(seed: int = 0) -> SpeechDecoder:
    cfg = PRESETS["tiny"]()
    sd = SpeechDecoder(cfg.speech, cfg.backbone.hidden_size).eval()
    init_component(sd, seed, "speech_decoder")
    return sd


def test_stepwise_equals_one_shot() -> None:
    sd = decoder()
    cond = sd.condition(torch.randn(2, 4, 64))
    tokens = torch.randint(0, sd.cfg.codebook, (2, 9))
    seq = torch.cat((cond, sd.embed(tokens)), dim=1)
    with torch.no_grad():
        full, _ = sd.step(seq, sd.new_cache(2))
        cache = sd.new_cache(2)
        parts = [sd.step(seq[:, :5], cache)[0]]
        parts += [sd.step(seq[:, i : i + 1], cache)[0] for i in range(5, seq.shape[1])]
    stepped = torch.cat(parts, dim=1)
    assert float((stepped - full).abs().max() / full.abs().max()) <= TOL


def test_speak_chunk_emits_codes_and_stops_at_end() -> None:
    sd = decoder()
    cache = sd.new_cache(1)
    tokens = sd.speak_chunk(torch.randn(1, 3, 64), cache, max_tokens=25)
    assert tokens.shape == (1, 25)
    assert int(tokens.max()) <= sd.cfg.end_token  # never the input-only start token
    # A decoder that prefers `end` stops at once.
    bias = torch.zeros(sd.cfg.vocab)
    bias[sd.cfg.end_token] = 1e4
    handle = sd.lm_head.register_forward_hook(lambda _m, _i, out: out + bias)
    try:
        stopped = sd.speak_chunk(torch.randn(1, 3, 64), sd.new_cache(1), max_tokens=25)
    finally:
        handle.remove()
    assert stopped.tolist() == [[sd.cfg.end_token]]


def test_chunks_of_one_reply_share_the_cache() -> None:
    sd = decoder()
    cache = sd.new_cache(1)
    hidden = torch.randn(1, 3, 64)
    first = sd.speak_chunk(hidden, cache, max_tokens=5)
    length = cache.length
    second = sd.speak_chunk(hidden, cache, max_tokens=5)
    assert cache.length > length  # the second chunk saw the first
    cache.reset()
    assert torch.equal(sd.speak_chunk(hidden, cache, max_tokens=5), first)
    assert second.shape[1] <= 5


def test_same_seed_same_weights() -> None:
    a, b, c = decoder(1), decoder(1), decoder(2)
    assert torch.equal(a.lm_head.weight, b.lm_head.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
