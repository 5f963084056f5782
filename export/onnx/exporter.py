"""Export one ``GraphSpec`` to an ONNX file with ``torch.onnx.export(dynamo=True)``.

The graph is traced at ``TRACE_SIZES`` with every symbolic dimension dynamic, then the
dimension names of docs/engines.md are stamped on its inputs and outputs (torch names
derived sizes after their formula, ``sequence + past_sequence``; the spec calls it
``total_sequence``), and it is saved.

External data: the backbone's weights always go to ``backbone.onnx.data`` beside the
graph (as ONNX Runtime GenAI lays out a model, and because at real size it is far past
protobuf's 2 GB limit); any other graph whose weights exceed ``EXTERNAL_DATA_BYTES``
likewise gets a ``<component>.onnx.data``; smaller graphs are one self-contained file.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as ir_passes
import torch

from venus.errors import ExportError
from venus.export.model.config import ModelConfig
from venus.export.onnx.inputs import random_inputs, trace_sizes
from venus.export.onnx.specs import GraphSpec, TensorTemplate

log = logging.getLogger(__name__)

OPSET = 20  # the default of torch 2.x's exporter; ONNX Runtime >= 1.17, TensorRT 10 read it
EXTERNAL_DATA_BYTES = 1 << 30  # 1 GB: larger weights go to <component>.onnx.data
ALWAYS_EXTERNAL = frozenset({"backbone"})
TRACE_SEED = 0
QUIET_LOGGERS = ("torch.onnx", "torch.export", "onnxscript", "onnx_ir")
_DTYPES = {"float": ir.DataType.FLOAT, "int64": ir.DataType.INT64}


def graph_file(name: str) -> str:
    return f"{name}.onnx"


def data_file(name: str) -> str:
    return f"{name}.onnx.data"


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's own chatter (torchvision op warnings, deprecation notes)."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _dynamic_shapes(spec: GraphSpec) -> tuple[Any, ...]:
    """torch's ``dynamic_shapes``: a dict per input; ``*past`` varargs as one inner tuple.

    Plain names are passed as such; a derived size (``group + 3``) as ``Dim.DYNAMIC``,
    torch works out its relation to the others while tracing.
    """

    def axes(t: TensorTemplate) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for axis, dim in enumerate(t.shape):
            if isinstance(dim, str):
                out[axis] = dim if dim.isidentifier() else torch.export.Dim.DYNAMIC
        return out

    n = len(spec.inputs) - spec.varargs
    fixed = tuple(axes(t) for t in spec.inputs[:n])
    if not spec.varargs:
        return fixed
    return (*fixed, tuple(axes(t) for t in spec.inputs[n:]))


def _stamp(values: list[ir.Value], templates: tuple[TensorTemplate, ...], graph: str) -> None:
    """Give each graph input / output the spec's dtype check and dimension names."""
    if [v.name for v in values] != [t.name for t in templates]:
        raise ExportError(
            f"{graph}: exported tensors {[v.name for v in values]} differ from the spec "
            f"{[t.name for t in templates]}; this is a bug in venus.export.onnx"
        )
    for value, t in zip(values, templates, strict=True):
        if value.dtype != _DTYPES[t.dtype] or value.shape is None:
            raise ExportError(f"{graph}: {t.name} exported as {value.dtype}, expected {t.dtype}")
        dims: list[int | ir.SymbolicDim] = []
        for got, want in zip(value.shape, t.shape, strict=True):
            if isinstance(got, int) and got != want:  # a wrong size, or specialised by torch
                raise ExportError(
                    f"{graph}: {t.name} has shape {value.shape}, expected {t.shape}; this is "
                    "a bug in venus.export.onnx"
                )
            dims.append(want if isinstance(want, int) else ir.SymbolicDim(want))
        value.shape = ir.Shape(dims)


def fold_weight_transposes(graph: ir.Graph) -> int:
    """Replace ``Transpose(initializer)`` by a transposed initializer -> weights transposed.

    torch exports ``nn.Linear`` as ``MatMul(x, Transpose(weight))`` and the exporter's
    optimiser leaves large transposes unfolded. Folded, every MatMul reads its weight
    directly: ONNX Runtime need not fold it at each load, and the int4 quantiser (which
    only takes constant weights) can reach it.
    """
    done: dict[tuple[str, tuple[int, ...]], ir.Value] = {}
    for node in list(graph):
        src = node.inputs[0] if node.inputs else None
        if node.op_type != "Transpose" or node.domain != "" or src is None:
            continue
        if src.const_value is None or not src.is_initializer():
            continue
        array = src.const_value.numpy()
        perm_attr = node.attributes.get("perm")
        perm = tuple(perm_attr.as_ints() if perm_attr is not None else range(array.ndim)[::-1])
        key = (src.name or "", perm)
        if key not in done:
            array = np.ascontiguousarray(array.transpose(perm))
            name = f"{src.name}.transposed{len(done)}"
            done[key] = ir.Value(
                name=name,
                shape=ir.Shape(array.shape),
                type=ir.TensorType(src.dtype or ir.DataType.FLOAT),
                const_value=ir.Tensor(array, name=name),
            )
            graph.register_initializer(done[key])
        node.outputs[0].replace_all_uses_with(done[key])
        graph.remove(node, safe=True)
    for name, init in list(graph.initializers.items()):
        if not init.uses() and not init.is_graph_output():
            del graph.initializers[name]
    return len(done)


def _weight_bytes(model: ir.Model) -> int:
    return sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )


def export_graph(spec: GraphSpec, cfg: ModelConfig, out: Path) -> list[str]:
    """Trace and save ``spec`` into the directory ``out`` -> files written (graph first)."""
    example = random_inputs(spec, cfg, trace_sizes(), torch.Generator().manual_seed(TRACE_SEED))
    args = tuple(example[t.name] for t in spec.inputs)
    try:
        with _quiet_exporter(), torch.no_grad():
            program = torch.onnx.export(
                spec.module,
                args,
                dynamo=True,
                input_names=[t.name for t in spec.inputs],
                output_names=[t.name for t in spec.outputs],
                dynamic_shapes=_dynamic_shapes(spec),
                opset_version=OPSET,
                optimize=True,
                verbose=False,
            )
    except Exception as e:  # the exporter raises many kinds; name the graph and keep the cause
        lines = [line for line in str(e).splitlines() if line.strip()]
        summary = next((line for line in reversed(lines) if not line.startswith("(")), "")
        raise ExportError(
            f"{spec.name}: torch.onnx.export failed ({type(e).__name__}: {summary}); "
            "`venus --log-level DEBUG export ...` shows the trace"
        ) from e
    if program is None:
        raise ExportError(f"{spec.name}: torch.onnx.export returned no program")
    model = program.model
    _stamp(list(model.graph.inputs), spec.inputs, spec.name)
    _stamp(list(model.graph.outputs), spec.outputs, spec.name)
    fold_weight_transposes(model.graph)
    ir_passes.ClearMetadataAndDocStringPass()(model)  # torch's per-node stack traces
    files = [graph_file(spec.name)]
    if spec.name in ALWAYS_EXTERNAL or _weight_bytes(model) > EXTERNAL_DATA_BYTES:
        files.append(data_file(spec.name))
        ir.save(model, out / files[0], external_data=files[1])
    else:
        ir.save(model, out / files[0])
    return files
