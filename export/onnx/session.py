"""Open an exported graph with ONNX Runtime and run it on torch tensors (for checks).

Inputs are cast to the dtypes the graph declares (float16 graphs take float16), so one
set of float32 inputs feeds a graph at any precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from torch import Tensor

from venus.errors import ExportError

PROVIDERS = ("CPUExecutionProvider",)
ORT_ERROR = 3  # session log severity: errors only (not its constant-folding warnings)
_NP_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
}


def open_session(path: Path, providers: tuple[str, ...] = PROVIDERS) -> Any:
    """An ``onnxruntime.InferenceSession`` on ``path`` (raises ExportError naming it)."""
    options = ort.SessionOptions()
    options.log_severity_level = ORT_ERROR
    try:
        return ort.InferenceSession(str(path), options, providers=list(providers))
    except Exception as e:  # onnxruntime raises its own untyped exceptions
        raise ExportError(f"{path}: ONNX Runtime cannot load it ({e})") from e


def run_session(session: Any, inputs: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """Feed ``inputs`` by name (cast to the graph's dtypes) -> {output name: array}."""
    feeds = {}
    for meta in session.get_inputs():
        if meta.name not in inputs:
            raise ExportError(f"no value for graph input {meta.name}")
        dtype = _NP_DTYPES.get(meta.type)
        if dtype is None:
            raise ExportError(f"graph input {meta.name} has unsupported type {meta.type}")
        feeds[meta.name] = inputs[meta.name].detach().cpu().numpy().astype(dtype)
    try:
        outputs = session.run(None, feeds)
    except Exception as e:  # onnxruntime raises its own untyped exceptions
        raise ExportError(f"ONNX Runtime failed to run the graph ({e})") from e
    return {meta.name: out for meta, out in zip(session.get_outputs(), outputs, strict=True)}
