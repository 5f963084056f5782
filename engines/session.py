"""ONNX Runtime sessions: session options, the optimised-model cache, errors naming the file.

Session options: ``intra_op_threads`` and ``graph_optimization`` from ``EngineOptions``;
providers and their options come from ``providers``. Caches under ``cache_dir``:

- ``tensorrt/``: TensorRT engine and timing caches (see ``providers``).
- ``optimized/<component>-<key>.onnx`` (+ ``.data``): the graph after ONNX Runtime's
  optimisations, saved on the first start and loaded (optimisation off) afterwards. ``key``
  digests the component's file hashes, the optimisation level, the providers, the
  onnxruntime version and the machine type, so any change makes a new entry. Not used
  with TensorRT, whose compiled nodes cannot be saved as ONNX. The first save of a graph
  optimised at level ``all`` makes onnxruntime warn that it may hold hardware-specific
  kernels: expected, the key includes the machine type.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from venus.engines.manifest import ComponentEntry, TensorSpec
from venus.engines.options import EngineOptions, Provider
from venus.engines.providers import ORT_PROVIDERS, provider_options
from venus.errors import EngineError

log = logging.getLogger(__name__)

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# Initialisers above this size go to the optimised model's .data file (protobuf caps at 2 GB).
EXTERNAL_MIN_BYTES = 1 << 20
ORT_ERRORS: tuple[type[Exception], ...] = tuple(
    getattr(ort.capi.onnxruntime_pybind11_state, n)
    for n in (
        "Fail",
        "InvalidArgument",
        "NoSuchFile",
        "NoModel",
        "EngineError",
        "RuntimeException",
        "InvalidProtobuf",
        "ModelLoaded",
        "NotImplemented",
        "InvalidGraph",
        "EPFail",
    )
    if hasattr(ort.capi.onnxruntime_pybind11_state, n)
)


@dataclass(frozen=True)
class Device:
    """Where a session keeps its tensors: ``cpu`` or ``cuda`` (IO binding's device type)."""

    type: str
    id: int


@dataclass(frozen=True)
class Session:
    """One graph's ONNX Runtime session with its manifest specs (numpy in and out)."""

    name: str
    path: Path
    ort: Any  # onnxruntime.InferenceSession
    providers: tuple[str, ...]  # what onnxruntime actually runs, first is preferred
    device: Device
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]

    def dtype(self, name: str) -> np.dtype[Any]:
        """numpy dtype of input or output ``name`` as the manifest lists it."""
        spec = self.inputs.get(name) or self.outputs.get(name)
        if spec is None:
            raise EngineError(f"{self.path}: the {self.name} graph has no tensor {name!r}")
        return np.dtype(spec.dtype)

    def dim(self, name: str, axis: int) -> int:
        """A fixed size of tensor ``name`` from the manifest (an error if it is symbolic)."""
        spec = self.inputs.get(name) or self.outputs.get(name)
        size = spec.shape[axis] if spec is not None else None
        if not isinstance(size, int):
            raise EngineError(
                f"{self.path}: the manifest gives no fixed size for axis {axis} of {self.name} "
                f"tensor {name!r}; re-run `venus export`"
            )
        return size

    def feed(self, name: str, value: NDArray[Any]) -> NDArray[Any]:
        """``value`` as the contiguous array of the dtype input ``name`` takes."""
        return np.ascontiguousarray(value, dtype=self.dtype(name))

    def run(self, feeds: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """Run with numpy feeds (cast to the manifest dtypes) -> every output by name."""
        cast = {k: self.feed(k, v) for k, v in feeds.items()}
        names = list(self.outputs)
        try:
            values = self.ort.run(names, cast)
        except ORT_ERRORS as e:
            raise self.error(e, cast) from e
        return dict(zip(names, values, strict=True))

    def run_binding(self, binding: Any) -> None:
        try:
            self.ort.run_with_iobinding(binding)
        except ORT_ERRORS as e:
            raise self.error(e, {}) from e

    def error(self, e: Exception, feeds: Mapping[str, NDArray[Any]]) -> EngineError:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())
        given = f"; inputs {shapes}" if shapes else ""
        return EngineError(
            f"{self.path}: the {self.name} graph failed ({_one_line(e)}){given}; check the inputs "
            "against docs/engines.md, or re-export the engine"
        )


def open_component(
    root: Path,
    name: str,
    entry: ComponentEntry,
    options: EngineOptions,
    providers: Sequence[Provider],
) -> Session:
    """Open component ``name`` of an engine directory (its files already verified)."""
    path = root / entry.graph
    digest = hashlib.sha256("".join(f.sha256 for f in entry.files).encode()).hexdigest()
    fp16 = entry.precision == "fp16"
    cached_kv = entry.layers is not None  # the manifest gives it a KV-cache layout
    ort_session = _create(path, name, digest, fp16, options, providers, cached_kv)
    active = tuple(ort_session.get_providers())
    dropped = [p for p in providers if ORT_PROVIDERS[p] not in active]
    if dropped:
        log.warning(
            "%s: onnxruntime did not enable %s (it runs %s); see its log above",
            name,
            ", ".join(dropped),
            ", ".join(active),
        )
    _check_names(path, name, entry, ort_session)
    gpu = active[0] in (ORT_PROVIDERS["tensorrt"], ORT_PROVIDERS["cuda"])
    return Session(
        name=name,
        path=path,
        ort=ort_session,
        providers=active,
        device=Device("cuda", options.device_id) if gpu else Device("cpu", 0),
        inputs={s.name: s for s in entry.inputs},
        outputs={s.name: s for s in entry.outputs},
    )


def _check_names(path: Path, name: str, entry: ComponentEntry, session: Any) -> None:
    """The graph has exactly the inputs and outputs the manifest lists."""
    for kind, listed, actual in (
        ("inputs", entry.inputs, session.get_inputs()),
        ("outputs", entry.outputs, session.get_outputs()),
    ):
        want, got = sorted(s.name for s in listed), sorted(a.name for a in actual)
        if want != got:
            raise EngineError(
                f"{path}: the {name} graph's {kind} {got} differ from the manifest's {want}; "
                "the directory mixes two exports: re-run `venus export`"
            )


def _session_options(options: EngineOptions, level: str, cached_kv: bool) -> Any:
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.intra_op_threads
    so.graph_optimization_level = OPT_LEVELS[level]
    # A KV-cached graph sees a new past length nearly every call; ONNX Runtime's memory
    # patterns are cached per set of input shapes, so with them on such a session's memory
    # grows with the session (docs/benchmarks.md, long sessions). Off for those graphs only.
    so.enable_mem_pattern = not cached_kv
    return so


def _create(
    path: Path,
    name: str,
    digest: str,
    fp16: bool,
    options: EngineOptions,
    providers: Sequence[Provider],
    cached_kv: bool = False,
) -> Any:
    ort_providers = [(ORT_PROVIDERS[p], provider_options(p, options, fp16)) for p in providers]
    cached = _optimized_path(name, digest, options, providers)
    if cached is not None and cached.is_file():
        try:
            so = _session_options(options, "disable", cached_kv)
            session = _load(cached, so, ort_providers)
            log.info("%s: loaded the optimised graph %s", name, cached)
            return session
        except EngineError as e:
            log.warning("%s: dropping the unusable optimised graph (%s)", name, e)
            cached.unlink(missing_ok=True)
    so = _session_options(options, options.graph_optimization, cached_kv)
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            writable = os.access(cached.parent, os.W_OK)
        except OSError:
            writable = False
        if not writable:
            log.warning(
                "%s: cannot write %s; graphs are optimised at every start", name, cached.parent
            )
            cached = None
    if cached is None:
        return _load(path, so, ort_providers)
    tmp = cached.with_suffix(".tmp")
    so.optimized_model_filepath = str(tmp)
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", cached.name + ".data"
    )
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(EXTERNAL_MIN_BYTES)
    )
    session = _load(path, so, ort_providers)
    if tmp.is_file():
        os.replace(tmp, cached)
        log.info("%s: saved the optimised graph to %s", name, cached)
    return session


def _optimized_path(
    name: str, digest: str, options: EngineOptions, providers: Sequence[Provider]
) -> Path | None:
    if options.cache_dir is None or options.graph_optimization == "disable":
        return None
    if "tensorrt" in providers:
        return None
    parts = (
        digest,
        options.graph_optimization,
        ",".join(providers),
        ort.__version__,
        platform.machine(),  # level "all" bakes in CPU-specific kernels (NCHWc)
    )
    key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]
    return options.cache_dir / "optimized" / f"{name}-{key}.onnx"


def _load(path: Path, so: Any, providers: list[tuple[str, dict[str, str]]]) -> Any:
    try:
        return ort.InferenceSession(str(path), sess_options=so, providers=providers)
    except ORT_ERRORS as e:
        raise EngineError(
            f"{path}: onnxruntime cannot load this graph ({_one_line(e)}); re-run `venus export`"
        ) from e


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())
