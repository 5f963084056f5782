"""Native TensorRT: run one serialized engine (``<component>.plan``) with numpy in and out.

``TensorRTGraph`` has the shape of the ONNX Runtime graph session (``input_names``,
``output_names``, ``run(feeds) -> outputs``), so the runners can use either. The plans are
built offline by ``venus export --backend tensorrt`` (``venus.export.tensorrt``) and listed
in the manifest after each component's ONNX files.

TensorRT and pycuda are imported when a graph is opened, never at import time: this
module loads on machines without them, and opening a graph there raises ``EngineError``
with the install command.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from venus.engines.manifest import ComponentEntry, FileEntry
from venus.errors import EngineError

log = logging.getLogger(__name__)

PLAN_SUFFIX = ".plan"
TENSORRT_MISSING = (
    "native TensorRT needs the tensorrt and pycuda packages and an NVIDIA GPU: "
    "pip install 'realtime-venus[gpu]' (see README, GPU install; on a Jetson use the "
    "TensorRT that ships with JetPack)"
)
# Device buffers are reused across calls and grow by half when a call needs more: a KV
# cache grows a token per decode step, and this reallocates O(log n) times, not n times.
GROWTH = 1.5

Array = npt.NDArray[Any]
# TensorRT DataType names -> numpy (spelled out: older trt.nptype lacked some of them)
NUMPY_DTYPES = {
    "FLOAT": np.dtype("float32"),
    "HALF": np.dtype("float16"),
    "INT64": np.dtype("int64"),
    "INT32": np.dtype("int32"),
    "INT8": np.dtype("int8"),
    "UINT8": np.dtype("uint8"),
    "BOOL": np.dtype("bool"),
}


def plan_name(component: str) -> str:
    """The plan's file name in the engine directory: ``backbone`` -> ``backbone.plan``."""
    return component + PLAN_SUFFIX


def plan_entry(component: ComponentEntry) -> FileEntry | None:
    """The component's TensorRT plan in the manifest, if it was built."""
    return next((f for f in component.files if f.path.endswith(PLAN_SUFFIX)), None)


def import_tensorrt() -> Any:
    try:
        import tensorrt
    except ImportError as e:
        raise EngineError(f"{TENSORRT_MISSING} ({e})") from None
    return tensorrt


@functools.cache
def trt_logger(trt: Any) -> Any:
    """TensorRT's logger for module ``trt``, forwarding to ``logging``: one per process, as
    TensorRT wants. Errors are also kept (``.errors``) so a failed build can say why."""
    severity = trt.ILogger.Severity
    levels = {
        severity.INTERNAL_ERROR: logging.CRITICAL,
        severity.ERROR: logging.ERROR,
        severity.WARNING: logging.WARNING,
        severity.INFO: logging.DEBUG,
        severity.VERBOSE: logging.DEBUG,
    }

    class _Logger(trt.ILogger):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, level: Any, msg: str) -> None:
            py_level = levels.get(level, logging.DEBUG)
            if py_level >= logging.ERROR:
                self.errors = [*self.errors[-9:], msg]
            log.log(py_level, "TensorRT: %s", msg)

    return _Logger()


@dataclass
class _DeviceBuffer:
    allocation: Any  # pycuda.driver.DeviceAllocation
    capacity: int  # bytes


class TensorRTGraph:
    """One TensorRT engine on one CUDA stream, with the ONNX Runtime ``Session``'s interface
    (``name``, ``path``, ``inputs`` / ``outputs`` specs, ``dtype``, ``dim``, ``feed``, ``run``).

    ``run`` is thread-safe (one call at a time): the CUDA context is the device's primary
    context (the one TensorRT and the CUDA runtime use), made current around each call.
    """

    def __init__(self, plan: Path, component: ComponentEntry, device_id: int = 0) -> None:
        trt = import_tensorrt()
        try:
            import pycuda.driver as cuda
        except ImportError as e:
            raise EngineError(f"{TENSORRT_MISSING} ({e})") from None
        if not plan.is_file():
            raise EngineError(f"{plan}: missing; build it with `venus export --backend tensorrt`")
        self.name, self.path = plan.name.removesuffix(PLAN_SUFFIX), plan
        self.inputs = {s.name: s for s in component.inputs}
        self.outputs = {s.name: s for s in component.outputs}
        self.input_names, self.output_names = tuple(self.inputs), tuple(self.outputs)
        self._cuda = cuda
        cuda.init()
        self._ctx = cuda.Device(device_id).retain_primary_context()
        self._lock = threading.Lock()
        self._buffers: dict[str, _DeviceBuffer] = {}
        with self._current():
            self._runtime = trt.Runtime(trt_logger(trt))
            self._engine = self._runtime.deserialize_cuda_engine(plan.read_bytes())
            if self._engine is None:
                raise EngineError(
                    f"{plan}: TensorRT could not load this engine (built by another TensorRT "
                    "version or for another GPU?); rebuild it on this machine with "
                    "`venus export CHECKPOINT --out DIR --backend tensorrt`"
                )
            self._context = self._engine.create_execution_context()
            self._stream = cuda.Stream()
        engine = self._engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        found = {
            n: (
                engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT,
                NUMPY_DTYPES.get(engine.get_tensor_dtype(n).name),
            )
            for n in names
        }
        want = {n: (True, self.dtype(n)) for n in self.inputs}
        want |= {n: (False, self.dtype(n)) for n in self.outputs}
        differ = {
            n: (found.get(n), want.get(n)) for n in found | want if found.get(n) != want.get(n)
        }
        if differ:
            raise EngineError(
                f"{plan}: engine tensors differ from the manifest's, (is input, dtype) engine vs "
                f"manifest: {differ}; rebuild with `venus export --backend tensorrt`"
            )
        log.info("opened TensorRT engine %s (%d inputs)", plan, len(self.inputs))

    def dtype(self, name: str) -> np.dtype[Any]:
        """numpy dtype of input or output ``name`` as the manifest lists it."""
        spec = self.inputs.get(name) or self.outputs.get(name)
        if spec is None:
            raise EngineError(f"{self.path}: the {self.name} engine has no tensor {name!r}")
        return np.dtype(spec.dtype)

    def dim(self, name: str, axis: int) -> int:
        """A fixed size of tensor ``name`` from the manifest (an error if it is symbolic)."""
        spec = self.inputs.get(name) or self.outputs.get(name)
        size = spec.shape[axis] if spec is not None else None
        if not isinstance(size, int):
            raise EngineError(f"{self.path}: axis {axis} of {self.name} {name!r} is not fixed")
        return size

    def feed(self, name: str, value: Array) -> Array:
        """``value`` as the contiguous array of the dtype input ``name`` takes."""
        return np.ascontiguousarray(value, dtype=self.dtype(name))

    @contextmanager
    def _current(self) -> Iterator[None]:
        self._ctx.push()
        try:
            yield
        finally:
            self._cuda.Context.pop()

    def run(self, feeds: Mapping[str, Array]) -> dict[str, Array]:
        """Run once: every input by name (cast to the manifest dtypes) -> every output."""
        missing = [n for n in self.inputs if n not in feeds]
        unknown = [n for n in feeds if n not in self.inputs]
        if missing or unknown:
            raise EngineError(
                f"{self.path}: inputs missing {missing}, unknown {unknown}; "
                f"the {self.name} engine takes {list(self.inputs)}"
            )
        inputs = {n: self.feed(n, feeds[n]) for n in self.inputs}
        with self._lock, self._current():
            context, stream = self._context, self._stream
            for name, array in inputs.items():
                if not context.set_input_shape(name, array.shape):
                    raise EngineError(self._outside_profile(name, array.shape))
            outputs = {n: np.empty(self._output_shape(n), self.dtype(n)) for n in self.outputs}
            for name, array in inputs.items():
                device = self._buffer(name, array.nbytes)
                if array.nbytes:
                    self._cuda.memcpy_htod_async(device, array, stream)
                context.set_tensor_address(name, int(device))
            for name, array in outputs.items():
                context.set_tensor_address(name, int(self._buffer(name, array.nbytes)))
            if not context.execute_async_v3(stream.handle):
                raise EngineError(f"{self.path}: TensorRT execution failed (see the log)")
            for name, array in outputs.items():
                if array.nbytes:
                    self._cuda.memcpy_dtoh_async(array, self._buffers[name].allocation, stream)
            stream.synchronize()
        return outputs

    def close(self) -> None:
        """Free the device buffers and the engine; the graph cannot run afterwards."""
        with self._lock, self._current():
            for buffer in self._buffers.values():
                buffer.allocation.free()
            self._buffers.clear()
            self._context = self._engine = self._runtime = None
        self._ctx.detach()

    def _output_shape(self, name: str) -> tuple[int, ...]:
        shape = tuple(int(d) for d in self._context.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            raise EngineError(
                f"{self.path}: output {name} has shape {shape} after the inputs were set "
                "(a data-dependent shape, which this runner does not support)"
            )
        return shape

    def _buffer(self, name: str, nbytes: int) -> Any:
        """The tensor's device buffer, grown when too small. Never 0 bytes: TensorRT wants a
        real address even for an empty tensor (see ``venus.export.tensorrt``)."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.capacity < nbytes:
            capacity = max(nbytes, 1, int(buffer.capacity * GROWTH) if buffer else 0)
            if buffer is not None:
                buffer.allocation.free()
            buffer = _DeviceBuffer(self._cuda.mem_alloc(capacity), capacity)
            self._buffers[name] = buffer
        return buffer.allocation

    def _outside_profile(self, name: str, shape: tuple[int, ...]) -> str:
        lo, _, hi = (tuple(s) for s in self._engine.get_tensor_profile_shape(name, 0))
        return (
            f"{self.path}: input {name} has shape {shape}, outside the engine's range "
            f"{lo} .. {hi}; feed less at once, or rebuild with larger limits "
            "(venus.export.tensorrt.ProfileLimits)"
        )
