"""Precision passes on exported fp32 graphs: int4 weight-only quantisation and float16.

int4: ONNX Runtime's block-wise weight-only quantiser (``MatMulNBitsQuantizer``, RTN,
block size 32, symmetric) turns every MatMul with a constant weight into a
``com.microsoft`` ``MatMulNBits`` node; activations stay float32. ONNX Runtime runs it on
the CPU and CUDA execution providers (TensorRT takes the fp32 / fp16 graphs instead).
Only the backbone and the speech decoder are quantised (``INT4_COMPONENTS``): they hold
~90 % of the weights and run once per token; the encoders, flow decoder and vocoder
stay fp32 in an int4 export (their precision in the manifest says so).

fp16: ONNX Runtime's float16 converter (``onnxruntime.transformers.float16``, shipped
with onnxruntime, so no extra dependency) converts weights, activations, inputs and
outputs. Kept in float32, with casts around them: RMSNorm's square and mean (residual
activations of a few hundred overflow a float16 square), and every node that computes
the arguments of a Sin / Cos (rotary positions past 2048 and the flow decoder's
time embedding are not representable in float16).
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx

from venus.errors import ExportError

log = logging.getLogger(__name__)

INT4_BLOCK = 32  # weights per int4 block; one float scale each
INT4_COMPONENTS = frozenset({"backbone", "speech_decoder"})
FP16_KEEP_OPS = ("Pow", "ReduceMean")  # RMSNorm's mean of squares, in float32
QUIET_LOGGERS = ("onnxruntime.quantization", "onnxruntime.transformers")


def _quiet() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def quantize_int4(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every MatMul with a constant weight -> ``MatMulNBits`` (4 bits, block 32, symmetric)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    _quiet()
    config = DefaultWeightOnlyQuantConfig(block_size=INT4_BLOCK, is_symmetric=True)
    quantizer = MatMulNBitsQuantizer(
        model, block_size=INT4_BLOCK, is_symmetric=True, algo_config=config
    )
    quantizer.process()
    out: onnx.ModelProto = quantizer.model.model
    if not any(n.op_type == "MatMulNBits" for n in out.graph.node):
        raise ExportError(
            "int4 quantisation found no MatMul with a constant weight; this is a bug in "
            "venus.export.onnx (export with --precision fp32 meanwhile)"
        )
    return out


def _sinusoid_arguments(graph: onnx.GraphProto) -> list[str]:
    """Names of the Sin / Cos nodes and of every node their inputs are computed from.

    The climb stops at ``Shape`` nodes: a tensor's size is an integer, whatever computed it.
    """
    producer = {out: node for node in graph.node for out in node.output}
    keep: set[str] = set()
    stack = [n for n in graph.node if n.op_type in ("Sin", "Cos")]
    while stack:
        node = stack.pop()
        if node.name in keep:
            continue
        keep.add(node.name)
        if node.op_type not in ("Shape", "Size"):
            stack.extend(producer[i] for i in node.input if i in producer)
    return sorted(keep)


def _skip_fp16_round_trips(graph: onnx.GraphProto) -> None:
    """``Cast(to=float)`` of a ``Cast(to=float16)`` -> one ``Cast(to=float)``.

    The converter casts every kept-float32 node's output to float16 and back before the
    next kept node, which would round the position path to float16 after all. Skipping
    the inner cast only removes a rounding step. Casts nothing reads any more are dropped.
    """
    fp32, fp16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16

    def cast_to(node: onnx.NodeProto) -> int | None:
        if node.op_type != "Cast":
            return None
        return next((a.i for a in node.attribute if a.name == "to"), None)

    producer = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        first = producer.get(node.input[0]) if node.input else None
        if cast_to(node) == fp32 and first is not None and cast_to(first) == fp16:
            node.input[0] = first.input[0]
    used = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
    dead = [n for n in graph.node if n.op_type == "Cast" and not any(o in used for o in n.output)]
    for node in dead:
        graph.node.remove(node)


def convert_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Float32 -> float16 throughout, inputs and outputs included (see module doc)."""
    from onnxruntime.transformers.float16 import (
        DEFAULT_OP_BLOCK_LIST,
        convert_float_to_float16,
    )

    _quiet()
    for i, node in enumerate(model.graph.node):  # the block list names nodes
        if not node.name:
            node.name = f"node_{i}"
    out: onnx.ModelProto = convert_float_to_float16(
        model,
        keep_io_types=False,
        op_block_list=[*DEFAULT_OP_BLOCK_LIST, *FP16_KEEP_OPS],
        node_block_list=_sinusoid_arguments(model.graph),
    )
    _skip_fp16_round_trips(out.graph)
    return out


def save_proto(model: onnx.ModelProto, path: Path, external: str | None) -> None:
    """Save ``model`` at ``path``, its weights in ``path.parent / external`` if given."""
    if external is not None:
        (path.parent / external).unlink(missing_ok=True)  # onnx appends to an existing file
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=external,
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))
