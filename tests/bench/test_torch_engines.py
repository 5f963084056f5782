"""``TorchEngines`` against ``Engines`` on the tiny checkpoint and its fp32 engines: the same
inputs, the same streaming state rules, the same outputs (to float32 rounding)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import TinyExport

from venus.bench.torch_engines import TorchEngines
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.sampler import Greedy, Sampler
from venus.errors import BenchError, EngineError

TOL = 1e-4  # relative to the largest reference magnitude


def close(ours: Any, ref: Any) -> None:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    assert ours.dtype == np.float32
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-6)
    assert float(np.abs(ours - ref).max(initial=0.0)) / scale < TOL


@pytest.fixture(scope="module")
def engines(tiny_export: TinyExport, tmp_path_factory: pytest.TempPathFactory) -> Engines:
    cache = tmp_path_factory.mktemp("engine-cache")
    return Engines.open(tiny_export.engines, EngineOptions(providers=("cpu",), cache_dir=cache))


@pytest.fixture(scope="module")
def torch_engines(tiny_export: TinyExport, engines: Engines) -> TorchEngines:
    return TorchEngines.open(tiny_export.checkpoint, engines)


def test_shares_the_engines_manifest_and_tokenizer(
    engines: Engines, torch_engines: TorchEngines, tiny_export: TinyExport
) -> None:
    assert torch_engines.manifest is engines.manifest
    assert torch_engines.tokenizer is engines.tokenizer
    assert torch_engines.root == tiny_export.checkpoint
    assert torch_engines.token_id("<|listen|>") == engines.token_id("<|listen|>")
    assert torch_engines.backbone.hidden_size == engines.backbone.hidden_size
    with pytest.raises(EngineError, match="no special token"):
        torch_engines.token_id("<|nope|>")
    import torch

    assert torch.is_grad_enabled()  # opening the reference leaves the process's grad mode


def test_audio_three_chunks_with_state(engines: Engines, torch_engines: TorchEngines) -> None:
    s = engines.manifest.schedule
    rng = np.random.default_rng(0)
    ours, ref = torch_engines.audio.new_state(), engines.audio.new_state()
    for _ in range(3):
        mel = rng.standard_normal((1, s.n_mels, s.mel_frames)).astype(np.float32)
        close(torch_engines.audio.step(mel, ours), engines.audio.step(mel, ref))
    assert ours.chunks == ref.chunks == 3
    ours.reset()
    assert ours.chunks == 0 and ours.context.shape[1] == 0


def test_vision(engines: Engines, torch_engines: TorchEngines) -> None:
    assert engines.vision is not None and torch_engines.vision is not None
    size = engines.manifest.schedule.image_size
    pixels = np.random.default_rng(1).random((1, 3, size, size), dtype=np.float32)
    close(torch_engines.vision.encode(pixels), engines.vision.encode(pixels))


def test_backbone_prefill_steps_eviction_step(
    engines: Engines, torch_engines: TorchEngines
) -> None:
    e, t = engines.backbone, torch_engines.backbone
    ids = np.array([[1, 5, 200, engines.token_id("<|speak|>")]], dtype=np.int64)
    close(t.embed(ids), e.embed(ids))
    ours, ref = t.new_state(max_tokens=32), e.new_state(max_tokens=32)
    embeds = np.random.default_rng(2).standard_normal((1, 12, e.hidden_size)).astype(np.float32)
    a, b = t.prefill(embeds, ours), e.prefill(embeds, ref)
    close(a.logits, b.logits)
    close(a.hidden, b.hidden)
    token = 5
    for _ in range(2):
        step = np.array([[token]], dtype=np.int64)
        a, b = t.step(step, ours), e.step(step, ref)
        close(a.logits, b.logits)
        close(a.hidden, b.hidden)
        token = int(np.argmax(b.logits[0, -1]))
    assert ours.evict(2, 4) == ref.evict(2, 4) == 8
    assert ours.length == ref.length == 6 and ours.positions == ref.positions == 6  # rebased
    assert ours.evict(4, 4) == 0
    a, b = t.step(np.array([[token]]), ours), e.step(np.array([[token]]), ref)
    close(a.logits, b.logits)
    close(a.hidden, b.hidden)
    assert ours.length == 7 and ours.positions == 7
    with pytest.raises(EngineError, match=r"KV cache full \(7 tokens held \+ 26 new"):
        t.prefill(np.zeros((1, 26, e.hidden_size), np.float32), ours)
    ours.reset()
    assert ours.length == 0 and ours.positions == 0


def test_speech_greedy_tokens_are_identical(engines: Engines, torch_engines: TorchEngines) -> None:
    e, t = engines.speech, torch_engines.speech
    rng = np.random.default_rng(3)
    ours, ref = t.new_state(), e.new_state()
    budget = engines.manifest.schedule.speech_tokens
    for n in (3, 2):  # two chunks of one reply: the second sees the first
        hidden = rng.standard_normal((1, n, e.cond_dim)).astype(np.float32)
        a = t.speak(hidden, ours, Sampler(choose=Greedy()), budget)
        b = e.speak(hidden, ref, Sampler(choose=Greedy()), budget)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        assert a.ended == b.ended
        assert engines.manifest.schedule.speech_start_token not in a.tokens
        assert ours.positions == ref.positions
    ours.reset()
    assert ours.positions == 0


def test_flow_two_chunks_and_final_draw_the_same_noise(
    engines: Engines, torch_engines: TorchEngines
) -> None:
    e, t = engines.flow, torch_engines.flow
    s = engines.manifest.schedule
    codes = np.random.default_rng(4).integers(0, s.speech_codebook, (1, 2 * s.speech_tokens + 7))
    ours, ref = t.new_state(seed=7), e.new_state(seed=7)
    for final, part in ((False, codes[:, :25]), (False, codes[:, 25:50]), (True, codes[:, 50:])):
        close(t.step(part, ours, final=final), e.step(part, ref, final=final))
    assert ours.emitted_tokens == ref.emitted_tokens == codes.shape[1]
    with pytest.raises(EngineError, match="already ended"):
        t.step(codes[:, :1], ours, final=True)
    ours.reset(8)
    ref.reset(8)
    close(t.step(codes[:, :25], ours), e.step(codes[:, :25], ref))


def test_flow_past_its_cache_makes_room_like_the_engines(
    engines: Engines, torch_engines: TorchEngines
) -> None:
    e, t = engines.flow, torch_engines.flow
    s = engines.manifest.schedule
    capacity = 2 * s.speech_tokens + 5
    codes = np.random.default_rng(6).integers(0, s.speech_codebook, (1, 6 * s.speech_tokens))
    ours, ref = t.new_state(seed=3, max_tokens=capacity), e.new_state(seed=3, max_tokens=capacity)
    for i in range(6):
        part = codes[:, i * s.speech_tokens : (i + 1) * s.speech_tokens]
        close(t.step(part, ours), e.step(part, ref))
        assert ours.emitted_tokens == ref.emitted_tokens <= capacity


def test_vocoder_two_chunks(engines: Engines, torch_engines: TorchEngines) -> None:
    bins = engines.flow.mel_bins
    rng = np.random.default_rng(5)
    ours, ref = torch_engines.vocoder.new_state(), engines.vocoder.new_state()
    for frames in (44, 50):
        mel = rng.standard_normal((1, bins, frames)).astype(np.float32)
        close(torch_engines.vocoder.step(mel, ours), engines.vocoder.step(mel, ref))


def test_another_checkpoint_is_refused(
    engines: Engines, tiny_export: TinyExport, tmp_path: Path
) -> None:
    other = Path(shutil.copytree(tiny_export.checkpoint, tmp_path / "other"))
    with (other / "config.json").open("a") as f:
        f.write("\n")  # another file, another checkpoint hash
    with pytest.raises(BenchError, match="is not the checkpoint"):
        TorchEngines.open(other, engines)
