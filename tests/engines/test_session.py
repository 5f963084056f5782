"""Sessions: provider choice, options applied, the optimised-model cache, clear load errors."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from venus.engines.manifest import ComponentEntry
from venus.engines.options import EngineOptions
from venus.engines.providers import choose_providers, provider_options
from venus.engines.session import open_component
from venus.errors import EngineError


def test_asking_for_tensorrt_cuda_cpu_on_this_machine_gets_cpu_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime offers CUDA; the test is about a CPU-only build")
    with caplog.at_level(logging.INFO, logger="venus.engines.providers"):
        chosen = choose_providers(("tensorrt", "cuda", "cpu"))
    assert chosen == ("cpu",)
    text = caplog.text
    assert "tensorrt skipped" in text and "TensorrtExecutionProvider" in text
    assert "cuda skipped" in text
    assert "execution providers: cpu" in text


def test_provider_order_follows_the_request() -> None:
    offered = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers(("tensorrt", "cuda", "cpu"), offered) == ("tensorrt", "cuda", "cpu")
    assert choose_providers(("cuda", "cpu", "cuda"), offered) == ("cuda", "cpu")
    with pytest.raises(EngineError, match=r"add cpu to engines\.providers"):
        choose_providers(("tensorrt",), ["CPUExecutionProvider"])


def test_tensorrt_and_cuda_options(tmp_path: Path) -> None:
    opts = EngineOptions(device_id=1, cache_dir=tmp_path)
    trt = provider_options("tensorrt", opts, fp16=True)
    assert trt["device_id"] == "1" and trt["trt_fp16_enable"] == "True"
    assert trt["trt_engine_cache_enable"] == "True"
    assert trt["trt_engine_cache_path"] == str(tmp_path / "tensorrt")
    assert trt["trt_timing_cache_path"] == str(tmp_path / "tensorrt")
    assert provider_options("tensorrt", opts, fp16=False)["trt_fp16_enable"] == "False"
    assert "trt_engine_cache_path" not in provider_options("tensorrt", EngineOptions(), False)
    assert provider_options("cuda", opts, fp16=False) == {"device_id": "1"}


def test_session_options_and_optimised_model_cache(
    toy: tuple[Path, ComponentEntry], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, entry = toy
    cache = tmp_path / "cache"
    opts = EngineOptions(
        providers=("cpu",), intra_op_threads=2, graph_optimization="extended", cache_dir=cache
    )
    with caplog.at_level(logging.INFO, logger="venus.engines.session"):
        first = open_component(root, "toy", entry, opts, ("cpu",))
    so = first.ort.get_session_options()
    assert so.intra_op_num_threads == 2
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    saved = sorted(p.name for p in (cache / "optimized").iterdir())
    assert len(saved) == 2 and saved[0].startswith("toy-") and saved[0].endswith(".onnx")
    assert saved[1] == saved[0] + ".data"  # the weights went to external data
    assert "saved the optimised graph" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="venus.engines.session"):
        second = open_component(root, "toy", entry, opts, ("cpu",))
    assert "loaded the optimised graph" in caplog.text
    feeds = {
        "x": np.ones((1, 1, 2, 4), np.float32),
        "past_key_values.0.key": np.zeros((1, 1, 0, 4), np.float32),
        "past_key_values.0.value": np.zeros((1, 1, 0, 4), np.float32),
    }
    np.testing.assert_array_equal(first.run(feeds)["total"], second.run(feeds)["total"])

    # Another optimisation level is another cache entry.
    open_component(root, "toy", entry, EngineOptions(providers=("cpu",), cache_dir=cache), ("cpu",))
    assert len(list((cache / "optimized").glob("*.onnx"))) == 2


def test_a_broken_optimised_model_is_rebuilt(
    toy: tuple[Path, ComponentEntry], tmp_path: Path
) -> None:
    root, entry = toy
    opts = EngineOptions(providers=("cpu",), cache_dir=tmp_path / "cache")
    open_component(root, "toy", entry, opts, ("cpu",))
    (saved,) = (tmp_path / "cache" / "optimized").glob("*.onnx")
    saved.write_bytes(b"not a model")
    open_component(root, "toy", entry, opts, ("cpu",))
    assert saved.stat().st_size > 100


def test_no_cache_dir_writes_nothing(toy: tuple[Path, ComponentEntry]) -> None:
    root, entry = toy
    before = sorted(root.iterdir())
    open_component(root, "toy", entry, EngineOptions(providers=("cpu",)), ("cpu",))
    assert sorted(root.iterdir()) == before


def test_a_truncated_graph_is_an_error_naming_the_file(toy: tuple[Path, ComponentEntry]) -> None:
    root, entry = toy
    graph = root / "toy.onnx"
    graph.write_bytes(graph.read_bytes()[:200])
    with pytest.raises(EngineError, match=r"toy\.onnx: onnxruntime cannot load") as info:
        open_component(root, "toy", entry, EngineOptions(providers=("cpu",)), ("cpu",))
    assert "venus export" in str(info.value)


def test_a_failed_run_names_the_graph_and_the_inputs(toy: tuple[Path, ComponentEntry]) -> None:
    root, entry = toy
    session = open_component(root, "toy", entry, EngineOptions(providers=("cpu",)), ("cpu",))
    bad = {
        "x": np.ones((1, 1, 2, 4), np.float32),
        "past_key_values.0.key": np.zeros((1, 1, 0, 3), np.float32),
        "past_key_values.0.value": np.zeros((1, 1, 0, 4), np.float32),
    }
    with pytest.raises(EngineError, match=r"toy\.onnx: the toy graph failed .*x \[1, 1, 2, 4\]"):
        session.run(bad)


def test_a_graph_that_does_not_fit_its_manifest_entry(toy: tuple[Path, ComponentEntry]) -> None:
    root, entry = toy
    renamed = dataclasses.replace(
        entry, inputs=(dataclasses.replace(entry.inputs[0], name="y"), *entry.inputs[1:])
    )
    with pytest.raises(EngineError, match=r"toy\.onnx: the toy graph's inputs .* differ"):
        open_component(root, "toy", renamed, EngineOptions(providers=("cpu",)), ("cpu",))
