"""Audio, vision, flow and vocoder runners against the torch streaming reference."""

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


@torch.no_grad()
def test_audio_encoder_over_several_chunks(engines: Engines, reference: Any) -> None:
    runner, model = engines.audio, reference.audio_encoder
    state, ref_state = runner.new_state(), model.new_state()
    rng = np.random.default_rng(0)
    errors = []
    for _ in range(5):  # past left_context_chunks, so the context is trimmed
        mel = rng.standard_normal((1, runner.n_mels, runner.mel_frames)).astype(np.float32)
        errors.append(err(runner.step(mel, state), model.step(torch.from_numpy(mel), ref_state)))
        assert err(state.context, ref_state.context) < TOL
    assert max(errors) < TOL, errors
    assert state.chunks == 5
    state.reset()
    assert state.context.shape[1] == 0 and state.chunks == 0


def test_audio_chunk_of_the_wrong_length(engines: Engines) -> None:
    with pytest.raises(EngineError, match="pad the last chunk with silence"):
        engines.audio.step(np.zeros((1, 80, 99), np.float32), engines.audio.new_state())


@torch.no_grad()
def test_vision_encoder(engines: Engines, reference: Any) -> None:
    assert engines.vision is not None
    size = engines.vision.image_size
    pixels = np.random.default_rng(1).random((2, 3, size, size), dtype=np.float32)
    theirs = reference.vision_encoder(torch.from_numpy(pixels))
    assert err(engines.vision.encode(pixels), theirs) < TOL


@torch.no_grad()
@pytest.mark.parametrize("last", [10, 0], ids=["short-final", "empty-flush"])
def test_flow_over_several_chunks(engines: Engines, reference: Any, last: int) -> None:
    from venus.export.model.flow import chunk_noise

    runner, model = engines.flow, reference.flow_decoder
    c = runner.chunk_tokens
    state, ref_state = runner.new_state(max_tokens=256), model.new_state(chunk_tokens=c)
    ptrs = state.kv.data_ptrs()
    rng = np.random.default_rng(2)
    errors, frames = [], 0
    sizes = [c, c, c, last]
    for i, m in enumerate(sizes):
        final = i == len(sizes) - 1
        tokens = rng.integers(0, model.cfg.codebook, (1, m))
        noise = chunk_noise(model.cfg, 1, m, seed=7, chunk_index=i)
        ours = runner.step(tokens, state, final=final, noise=noise.numpy(), temperature=0.8)
        theirs = model.step(torch.from_numpy(tokens), noise, ref_state, final, temperature=0.8)
        errors.append(err(ours, theirs))
        frames += ours.shape[2]
        assert err(state.prompt, ref_state.prompt) < TOL
        assert state.kv.data_ptrs() == ptrs
    assert max(errors) < TOL, errors
    assert frames == sum(sizes) * runner.frames_per_token
    assert state.finished
    with pytest.raises(EngineError, match=r"call state\.reset"):
        runner.step(np.zeros((1, c), np.int64), state)
    state.reset()
    assert state.emitted_tokens == 0 and not state.finished


def test_flow_draws_its_own_noise_reproducibly(engines: Engines) -> None:
    runner = engines.flow
    tokens = np.arange(runner.chunk_tokens)[None] % 100

    def run() -> np.ndarray:
        state = runner.new_state(seed=3, max_tokens=64)
        return runner.step(tokens, state, final=True)

    np.testing.assert_array_equal(run(), run())


@torch.no_grad()
def test_vocoder_over_uneven_chunks(engines: Engines, reference: Any) -> None:
    runner, model = engines.vocoder, reference.vocoder
    state, ref_state = runner.new_state(), model.new_state()
    rng = np.random.default_rng(3)
    errors, pieces = [], []
    chunks = [
        rng.standard_normal((1, runner.mel_bins, n)).astype(np.float32) for n in (7, 1, 50, 13)
    ]
    for mel in chunks:
        pcm = runner.step(mel, state)
        errors.append(err(pcm, model.step(torch.from_numpy(mel), ref_state)))
        pieces.append(pcm)
    assert max(errors) < TOL, errors
    one_shot = model(torch.from_numpy(np.concatenate(chunks, axis=2)))
    assert err(np.concatenate(pieces, axis=1), one_shot) < TOL
    state.reset()
    assert all(not c.any() for c in state.caches)


@torch.no_grad()
def test_a_flow_utterance_longer_than_its_cache_matches_torch_cut_the_same_way(
    engines: Engines, reference: Any
) -> None:
    """Past its cache the flow keeps the recent half, re-rotated to start at 0. The torch
    reference, cut by hand with its own RoPE (``apply_rope``, not ``engines.rope``), gives
    the same mel: the numpy re-rotation is the graph's own rotation, inverted."""
    from venus.engines.flow import FLOW_ROPE_THETA
    from venus.export.model.flow import ROPE_THETA, chunk_noise
    from venus.export.model.layers import apply_rope, rope_cos_sin

    assert FLOW_ROPE_THETA == ROPE_THETA
    runner, model = engines.flow, reference.flow_decoder
    c = runner.chunk_tokens
    capacity = 2 * c + 5
    state, ref_state = runner.new_state(max_tokens=capacity), model.new_state(chunk_tokens=c)
    rng = np.random.default_rng(4)
    errors, cuts = [], 0
    for i in range(8):  # 8 chunks: several times the cache
        tokens = rng.integers(0, model.cfg.codebook, (1, c))
        noise = chunk_noise(model.cfg, 1, c, seed=3, chunk_index=i)
        held = state.kv.length
        ours = runner.step(tokens, state, noise=noise.numpy(), temperature=0.8)
        emitted = ours.shape[2] // runner.frames_per_token
        if state.kv.length < held + emitted:  # it made room for this group: cut torch alike
            cuts += 1
            keep = state.kv.length - emitted
            delta = torch.full((1, keep), keep - held)
            cos, sin = rope_cos_sin(delta, ref_state.keys[0].shape[3], ROPE_THETA)
            for j in range(len(ref_state.keys)):
                ref_state.keys[j] = apply_rope(ref_state.keys[j][:, :, held - keep :], cos, sin)
                ref_state.values[j] = ref_state.values[j][:, :, held - keep :]
        theirs = model.step(torch.from_numpy(tokens), noise, ref_state, False, temperature=0.8)
        errors.append(err(ours, theirs))
        assert state.kv.length <= capacity
    assert cuts >= 2
    assert max(errors) < 1e-3, errors
