"""The CUDA paths: KV-cache buffers allocated on the GPU, bound in place; GPU engines = CPU.

Marked ``gpu``: left out of the default run; run with ``pytest -m gpu`` on a machine whose
onnxruntime offers CUDA (onnxruntime-gpu).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from venus.engines.kvcache import KVCache, run_cached
from venus.engines.manifest import ComponentEntry
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.session import open_component

pytestmark = pytest.mark.gpu


def need(provider: str) -> None:
    if provider not in ort.get_available_providers():
        pytest.skip(f"this onnxruntime does not offer {provider}")


def test_kv_cache_lives_on_the_gpu(toy: tuple[Path, ComponentEntry]) -> None:
    need("CUDAExecutionProvider")
    root, entry = toy
    session = open_component(root, "toy", entry, EngineOptions(providers=("cuda",)), ("cuda",))
    assert session.device.type == "cuda"
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=1, capacity=16)
    assert all(b.host is None and b.device is not None for s in kv.buffers for b in s)
    ptrs = kv.data_ptrs()
    rng = np.random.default_rng(0)
    seen = []
    for t in (3, 1, 1, 1, 1, 1):
        x = rng.standard_normal((1, 1, t, 4)).astype(np.float32)
        seen.append(x)
        out = run_cached(session, kv, {"x": x}, {"total": (1, 1, 4), "side": x.shape}, t)
        everything = np.concatenate(seen, axis=2)
        np.testing.assert_allclose(out["total"], everything.sum(axis=2), rtol=1e-5, atol=1e-5)
        assert kv.data_ptrs() == ptrs
    keys, values = kv.layer(0)
    np.testing.assert_array_equal(keys, everything)
    np.testing.assert_array_equal(values, 2 * everything)


def test_tensorrt_builds_into_the_engine_cache(
    toy: tuple[Path, ComponentEntry], tmp_path: Path
) -> None:
    need("TensorrtExecutionProvider")
    root, entry = toy
    opts = EngineOptions(providers=("tensorrt", "cuda"), cache_dir=tmp_path)
    session = open_component(root, "toy", entry, opts, ("tensorrt", "cuda"))
    x = np.ones((1, 1, 2, 4), np.float32)
    kv = KVCache(session, layers=1, kv_heads=1, head_dim=4, batch=1, capacity=8)
    out = run_cached(session, kv, {"x": x}, {"total": (1, 1, 4), "side": x.shape}, 2)
    np.testing.assert_allclose(out["total"], np.full((1, 1, 4), 2.0), atol=1e-3)
    assert any((tmp_path / "tensorrt").iterdir())


def test_tiny_engines_on_cuda_match_cpu(tiny_engine_dir: Path, tmp_path: Path) -> None:
    need("CUDAExecutionProvider")
    gpu = Engines.open(tiny_engine_dir, EngineOptions(providers=("cuda",), cache_dir=tmp_path))
    cpu = Engines.open(tiny_engine_dir, EngineOptions(providers=("cpu",)))
    assert gpu.sessions["backbone"].device.type == "cuda"
    rng = np.random.default_rng(0)
    embeds = rng.standard_normal((1, 7, gpu.backbone.hidden_size)).astype(np.float32)
    states = [e.backbone.new_state(max_tokens=32) for e in (gpu, cpu)]
    outs = [e.backbone.prefill(embeds, s) for e, s in zip((gpu, cpu), states, strict=True)]
    for _ in range(5):
        ids = np.array([[int(np.argmax(outs[1].logits[0, -1]))]])
        outs = [e.backbone.step(ids, s) for e, s in zip((gpu, cpu), states, strict=True)]
        np.testing.assert_allclose(outs[0].logits, outs[1].logits, atol=1e-3)
        np.testing.assert_allclose(outs[0].hidden, outs[1].hidden, atol=1e-3)
    flow = [e.flow.new_state(max_tokens=128) for e in (gpu, cpu)]
    c = gpu.flow.chunk_tokens
    for i in range(3):
        tokens = rng.integers(0, 6561, (1, c))
        noise = rng.standard_normal((1, gpu.flow.mel_bins, 2 * c)).astype(np.float32)
        mels = [
            e.flow.step(tokens, s, final=i == 2, noise=noise)
            for e, s in zip((gpu, cpu), flow, strict=True)
        ]
        np.testing.assert_allclose(mels[0], mels[1], atol=1e-3)
