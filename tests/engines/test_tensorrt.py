"""Native TensorRT: profiles, the build's bookkeeping, clear errors without TensorRT, and
(marked ``gpu``) real builds and runs checked against ONNX Runtime."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from venus.engines.manifest import (
    ComponentEntry,
    Manifest,
    Schedule,
    TensorSpec,
    load_manifest,
    verify,
)
from venus.engines.tensorrt import TENSORRT_MISSING, TensorRTGraph, plan_entry
from venus.errors import EngineError, ExportError
from venus.export.model.config import PRESETS, config_to_dict
from venus.export.tensorrt import ProfileLimits, build_tensorrt, profile_limits, shape_ranges

REPO = Path(__file__).resolve().parents[2]
GPU_CHECK = REPO / "scripts" / "gpu-check"


def entry(inputs: dict[str, tuple[int | str, ...]]) -> ComponentEntry:
    return ComponentEntry(
        files=(),
        inputs=tuple(TensorSpec(name=n, dtype="float32", shape=s) for n, s in inputs.items()),
        outputs=(),
        precision="fp32",
    )


def assert_ordered(ranges: dict[str, Any]) -> None:
    for name, r in ranges.items():
        for lo, opt, hi in zip(r.min, r.opt, r.max, strict=True):
            assert 0 <= lo <= opt <= hi, (name, r)
            assert opt > 0, (name, r)  # TensorRT tunes its kernels for opt


@pytest.fixture
def schedule(fresh_toy_engine: tuple[Path, Manifest]) -> Schedule:
    """A 1 s chunk schedule: 10 audio tokens, no vision, 25 speech tokens."""
    return fresh_toy_engine[1].schedule


def test_hand_made_backbone_profile_keeps_min_opt_max_and_totals(schedule: Schedule) -> None:
    kv = ("batch", 8, "past_sequence", 128)
    backbone = entry(
        {
            "inputs_embeds": ("batch", "sequence", 4096),
            "attention_mask": ("batch", "total_sequence"),
            "position_ids": ("batch", "sequence"),
            "past_key_values.0.key": kv,
        }
    )
    ranges = shape_ranges("backbone", backbone, schedule, ProfileLimits())
    assert_ordered(ranges)
    prefill = schedule.audio_tokens + schedule.vision_tokens + 6
    assert ranges["inputs_embeds"].min == (1, 1, 4096)
    assert ranges["inputs_embeds"].opt == (1, prefill, 4096)
    assert ranges["inputs_embeds"].max == (4, 512, 4096)
    past = ranges["past_key_values.0.key"]
    assert (past.min[2], past.opt[2], past.max[2]) == (0, 4096, 8192)  # empty at stream start
    mask, seq = ranges["attention_mask"], ranges["position_ids"]
    for pick in ("min", "opt", "max"):  # total = past + new at all three points
        assert getattr(mask, pick)[1] == getattr(past, pick)[2] + getattr(seq, pick)[1]


@pytest.mark.parametrize("preset", ["tiny", "tiny-audio", "venus-9b"])
def test_every_exported_graph_input_has_an_ordered_profile(preset: str, schedule: Schedule) -> None:
    import torch

    from venus.export.model.venus import VenusModel
    from venus.export.onnx.specs import graph_specs

    cfg = PRESETS[preset]()
    with torch.device("meta"):
        model = VenusModel(cfg)
    limits = ProfileLimits(left_context_chunks=cfg.audio.left_context_chunks)
    for spec in graph_specs(model):
        inputs = {t.name: t.shape for t in spec.inputs}
        ranges = shape_ranges(spec.name, entry(inputs), schedule, limits)
        assert set(ranges) == set(inputs)
        assert_ordered(ranges)


def test_an_unknown_dimension_is_an_error_naming_it(schedule: Schedule) -> None:
    odd = entry({"x": ("batch", "wobble")})
    with pytest.raises(ExportError, match=r"'wobble'.*dim_ranges"):
        shape_ranges("backbone", odd, schedule, ProfileLimits())


def test_limits_follow_the_model_config(fresh_toy_engine: tuple[Path, Manifest]) -> None:
    _, manifest = fresh_toy_engine
    assert profile_limits(manifest) == ProfileLimits()  # no model config: the defaults
    cfg = PRESETS["tiny"]()
    for data in (config_to_dict(cfg), config_to_dict(cfg)["model"]):
        limits = profile_limits(dataclasses.replace(manifest, model_config=data))
        assert limits.max_context == cfg.backbone.max_positions - limits.max_new_tokens
        assert limits.left_context_chunks == cfg.audio.left_context_chunks


def block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def test_build_without_tensorrt_says_how_to_install(
    fresh_toy_engine: tuple[Path, Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    block(monkeypatch, "tensorrt")
    root, manifest = fresh_toy_engine
    with pytest.raises(ExportError, match=r"pip install 'realtime-venus\[gpu\]'"):
        build_tensorrt(root, manifest, fp16=False)
    assert load_manifest(root).backend == "onnx"  # nothing written


@pytest.mark.parametrize("missing", [("tensorrt",), ("pycuda", "pycuda.driver")])
def test_graph_without_tensorrt_or_pycuda_says_how_to_install(
    missing: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
    block(monkeypatch, *missing)
    with pytest.raises(EngineError, match=r"pip install 'realtime-venus\[gpu\]'") as e:
        TensorRTGraph(tmp_path / "backbone.plan", entry({}))
    assert missing[0] in str(e.value)
    assert str(e.value).startswith(TENSORRT_MISSING)


def test_plan_entry_finds_only_plans(fresh_toy_engine: tuple[Path, Manifest]) -> None:
    _, manifest = fresh_toy_engine
    assert plan_entry(manifest.components["toy"]) is None


class FakeNetwork:
    def parse(self, path: str) -> bool:  # the graph's inputs, -1 for a symbolic dimension
        graph = onnx.load(path, load_external_data=False).graph
        dims = [
            [d.dim_value if d.HasField("dim_value") else -1 for d in i.type.tensor_type.shape.dim]
            for i in graph.input
        ]
        self.inputs = [
            types.SimpleNamespace(name=i.name, shape=d, is_shape_tensor=False)
            for i, d in zip(graph.input, dims, strict=True)
        ]
        self.num_inputs, self.get_input = len(self.inputs), self.inputs.__getitem__
        return True


class FakeTensorRT(types.ModuleType):
    """Stands in for tensorrt, which cannot run here; plays builder, config, profile and
    timing cache at once, recording what the build asks for."""

    __version__ = "10.0-fake"
    BuilderFlag = types.SimpleNamespace(FP16="FP16", TF32="TF32")

    class ILogger:
        Severity = types.SimpleNamespace(INTERNAL_ERROR=0, ERROR=1, WARNING=2, INFO=3, VERBOSE=4)

        def __init__(self) -> None:
            pass

    def __init__(self) -> None:
        super().__init__("tensorrt")
        self.flags: dict[str, bool] = {}
        self.shapes: dict[str, tuple[Any, ...]] = {}
        self.cache_loaded: list[bytes] = []
        self.Builder = lambda logger: self
        self.OnnxParser = lambda net, logger: types.SimpleNamespace(parse_from_file=net.parse)
        self.create_network = lambda flags: FakeNetwork()
        self.create_builder_config = self.create_optimization_profile = lambda: self
        self.init_libnvinfer_plugins = self.set_timing_cache = lambda *args, **kw: True
        self.add_optimization_profile = lambda profile: 0
        self.serialize = lambda: b"timings"
        self.build_serialized_network = lambda network, config: b"a serialized engine"

    def set_flag(self, flag: str) -> None:
        self.flags[flag] = True

    def clear_flag(self, flag: str) -> None:
        self.flags[flag] = False

    def create_timing_cache(self, data: bytes) -> FakeTensorRT:
        self.cache_loaded.append(data)
        return self

    def set_shape(self, name: str, *shapes: tuple[int, ...]) -> None:
        self.shapes[name] = shapes


def test_build_writes_plans_profiles_cache_and_manifest(
    fresh_toy_engine: tuple[Path, Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, toy = fresh_toy_engine
    # the toy graph speaks the backbone's dimensions (batch, sequence, past_sequence)
    manifest = dataclasses.replace(toy, components={"backbone": toy.components["toy"]})
    trt = FakeTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)

    build_tensorrt(root, manifest, fp16=False, limits=ProfileLimits(max_context=100))

    built = load_manifest(root)
    verify(root, built)  # every listed file, the plan too, with its size and hash
    files = [f.path for f in built.components["backbone"].files]
    assert files == ["toy.onnx", "toy.onnx.data", "backbone.plan"]
    assert (root / "backbone.plan").read_bytes() == b"a serialized engine"
    assert (built.backend, built.tools["tensorrt"]) == ("tensorrt", "10.0-fake")
    assert (root / "tensorrt.timing-cache").read_bytes() == b"timings"
    assert trt.flags == {"TF32": False}  # fp32 stays fp32
    prefill = toy.schedule.audio_tokens + toy.schedule.vision_tokens + 6
    assert trt.shapes["x"] == ((1, 1, 1, 4), (1, 1, prefill, 4), (4, 1, 512, 4))
    assert trt.shapes["past_key_values.0.key"] == ((1, 1, 0, 4), (1, 1, 100, 4), (4, 1, 100, 4))

    trt.flags.clear()  # again, at fp16: the cache is reused and the plan not listed twice
    build_tensorrt(root, built, fp16=True, limits=ProfileLimits(max_context=100))
    assert trt.cache_loaded == [b"", b"timings"]
    assert trt.flags == {"FP16": True}
    assert [f.path for f in load_manifest(root).components["backbone"].files] == files


def gpu_check(tmp_path: Path, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    cmd = [sys.executable, str(GPU_CHECK), "--out", str(tmp_path / "out"), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_gpu_check_without_a_gpu_exits_2_saying_why(tmp_path: Path) -> None:
    done = gpu_check(tmp_path, str(tmp_path))  # no nvidia-smi on PATH
    assert done.returncode == 2, done.stderr
    assert "no NVIDIA GPU here: nvidia-smi is not on PATH" in done.stderr


def test_gpu_check_with_a_broken_driver_exits_2_saying_why(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver' >&2\nexit 9\n")
    smi.chmod(0o755)
    done = gpu_check(tmp_path, f"{tmp_path}:/usr/bin:/bin")
    assert done.returncode == 2, done.stderr
    assert "no usable NVIDIA GPU" in done.stderr and "no driver" in done.stderr


def test_gpu_check_help_explains_the_exit_status(tmp_path: Path) -> None:
    done = gpu_check(tmp_path, str(tmp_path), "--help")
    assert done.returncode == 0
    assert "2 it could not run" in done.stdout and "--precision" in done.stdout


class TestOnGpu:
    """Real TensorRT on a real GPU: `pytest -m gpu` (or `scripts/gpu-check`) on one."""

    pytestmark = pytest.mark.gpu

    def test_toy_engine_runs_like_numpy_with_an_empty_and_a_growing_cache(
        self, fresh_toy_engine: tuple[Path, Manifest]
    ) -> None:
        root, toy = fresh_toy_engine
        manifest = dataclasses.replace(toy, components={"backbone": toy.components["toy"]})
        build_tensorrt(root, manifest, fp16=False)
        component = load_manifest(root).components["backbone"]
        plan = plan_entry(component)
        assert plan is not None
        graph = TensorRTGraph(root / plan.path, component)
        rng = np.random.default_rng(0)
        for past in (0, 1, 7, 300):  # 0: a stream's first call; then the buffers grow
            x = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
            kv = rng.standard_normal((1, 1, past, 4)).astype(np.float32)
            out = graph.run({"x": x, "past_key_values.0.key": kv, "past_key_values.0.value": kv})
            key = np.concatenate([kv, x], axis=2)
            np.testing.assert_allclose(out["present.0.key"], key, rtol=1e-6)
            np.testing.assert_allclose(out["present.0.value"], np.concatenate([kv, 2 * x], 2))
            np.testing.assert_allclose(out["total"], key.sum(axis=2), rtol=1e-5, atol=1e-5)
        too_many = {n: np.zeros((9, 1, 0, 4), np.float32) for n in graph.input_names}
        with pytest.raises(EngineError, match="outside the engine's range"):  # batch 9 > 4
            graph.run(too_many)
        graph.close()

    def test_gpu_check_passes_on_the_tiny_engines(self, tmp_path: Path) -> None:
        assert shutil.which("nvidia-smi"), "needs an NVIDIA GPU"
        cmd = [sys.executable, str(GPU_CHECK), "--venv", sys.prefix, "--no-install"]
        cmd += ["--out", str(tmp_path)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        assert "| backbone | start |" in done.stdout
