"""TensorRT plans from the exported ONNX graphs (``venus export --backend tensorrt``).

Per component: TensorRT's ONNX parser reads the graph, one optimisation profile covers
every symbolic dimension (the table: ``dim_ranges``), and the engine is written as
``<component>.plan``, listed in the manifest after the component's ONNX files. Builds
share a timing cache file (a rebuild on the same GPU skips most kernel timing).

Empty dimensions (``past_sequence`` at a stream's first prefill, ``context_frames`` at its
first chunk, ``condition_length`` on speech decode steps) get min 0, with no dummy slot, so
TensorRT and ONNX Runtime see the same shapes. TensorRT 7 refused 0 in a profile
(NVIDIA/TensorRT#337, ``setDimensions`` checked ``x > 0``); empty tensors are supported
since TensorRT 8 ("Working with Empty Tensors", developer guide, cited by
pytorch/TensorRT#3891; NVIDIA/TensorRT#2857: "we support input tensor as zero dimension like
0x128x3"); TensorRT 10 takes them as engine inputs (NVIDIA/TensorRT#4344: a null address
is "allowed only for an empty input tensor"), and ONNX Runtime GenAI's TensorRT-RTX
profiles start the past KV cache at 0 (microsoft/onnxruntime-genai src/models/model.cpp).
An empty binding still wants a real address ("at least one byte", same guide section;
microsoft/onnxruntime#19575), so the runner never allocates 0 bytes. opt is never 0:
TensorRT tunes its kernels for opt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from venus.engines.manifest import (
    ComponentEntry,
    Dim,
    Manifest,
    Schedule,
    file_entry,
    write_manifest,
)
from venus.engines.tensorrt import PLAN_SUFFIX, import_tensorrt, plan_name, trt_logger
from venus.errors import EngineError, ExportError
from venus.export.model.config import FORMAT, FORMAT_VERSION, config_from_dict

log = logging.getLogger(__name__)

TIMING_CACHE = "tensorrt.timing-cache"  # in the engine directory; not listed in the manifest
MAX_BATCH = 4  # streams batched into one call
MAX_NEW_TOKENS = 512  # tokens one decoder call takes at once (a chunk's prefill is ~80)
MAX_CONTEXT = 8192  # KV-cache tokens: twice the 4,096 of the per-chunk figures (docs/model.md)
OPT_CONTEXT = 4096  # the context those figures assume
CHUNK_MARKERS = 6  # chunk start / end, audio start / end, image start / end
TEXT_TOKENS_PER_CHUNK = 4  # backbone hidden states handed to the speech decoder (docs/model.md)


@dataclass(frozen=True)
class DimRange:  # one dimension's range in an optimisation profile
    min: int
    opt: int
    max: int

    def __add__(self, other: DimRange) -> DimRange:
        return DimRange(self.min + other.min, self.opt + other.opt, self.max + other.max)

    def __mul__(self, other: DimRange) -> DimRange:  # sizes are >= 0: bounds multiply
        return DimRange(self.min * other.min, self.opt * other.opt, self.max * other.max)


def fixed(n: int) -> DimRange:
    return DimRange(n, n, n)


@dataclass(frozen=True)
class ShapeRange:  # one input's min / opt / max shapes
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class ProfileLimits:
    """The largest calls the engines accept; larger ones fail with a clear error."""

    max_batch: int = MAX_BATCH
    max_new_tokens: int = MAX_NEW_TOKENS
    max_context: int = MAX_CONTEXT  # past tokens in a KV cache
    left_context_chunks: int = 2  # audio encoder: previous chunks kept as context


def dim_ranges(component: str, s: Schedule, lim: ProfileLimits) -> dict[str, DimRange]:
    """min / opt / max of every symbolic dimension of a component's graph inputs.

    opt is one chunk's steady state. Dimensions that add up (total = past + new) add up at
    min, opt and max alike: TensorRT checks the graph's shape constraints at all three.
    """
    batch = DimRange(1, 1, lim.max_batch)
    ctx = lim.max_context
    if component in ("embedding", "backbone"):
        # one chunk's prefill: its audio tokens, a frame's tokens and the markers
        seq = DimRange(1, s.audio_tokens + s.vision_tokens + CHUNK_MARKERS, lim.max_new_tokens)
        if component == "embedding":
            return {"batch": batch, "sequence": seq}
        past = DimRange(0, min(OPT_CONTEXT, ctx), ctx)
        return {
            "batch": batch,
            "sequence": seq,
            "past_sequence": past,
            "total_sequence": past + seq,
        }
    if component == "speech_decoder":
        seq = DimRange(1, 1, lim.max_new_tokens)  # decode steps (25 a chunk) dominate
        cond = DimRange(0, TEXT_TOKENS_PER_CHUNK, lim.max_new_tokens)  # 0 on decode steps
        past = DimRange(0, min(4 * s.speech_tokens, ctx), ctx)  # a few chunks into a reply
        return {
            "batch": batch,
            "sequence": seq,
            "condition_length": cond,
            "past_sequence": past,
            "total_sequence": past + cond + seq,
        }
    if component == "audio_encoder":
        full = lim.left_context_chunks * (s.mel_frames // 2)  # conv2 has stride 2
        return {
            "batch": batch,
            "mel_frames": fixed(s.mel_frames),  # whole chunks only
            "context_frames": DimRange(0, full, full),  # 0 at stream start
        }
    if component == "vision_encoder":
        return {"batch": batch}
    if component == "flow_decoder":  # inputs: group + lookahead tokens, 2 * group frames
        group = DimRange(1, s.speech_tokens, 2 * s.speech_tokens)  # tokens a step emits
        past = DimRange(0, min(4 * s.speech_tokens, ctx), ctx)  # the utterance's tokens so far
        return {"batch": batch, "group": group, "past_sequence": past}
    if component == "vocoder":
        most = 2 * (s.speech_tokens + s.lookahead_tokens) * s.mel_frames_out
        return {"batch": batch, "frames": DimRange(1, s.speech_tokens * s.mel_frames_out, most)}
    raise ExportError(f"no TensorRT profile for component {component!r}; add it to dim_ranges")


def resolve_dim(dim: Dim, ranges: Mapping[str, DimRange], where: str) -> DimRange:
    """A size, a symbolic name, or sums of products of them (``"2 * group + 3"``), the
    manifest's dimension expressions (export/onnx/specs.py)."""
    if isinstance(dim, int):
        return fixed(dim)
    total = fixed(0)
    for term in dim.split("+"):
        product = fixed(1)
        for factor in (f.strip() for f in term.split("*")):
            if factor.isdigit():
                product = product * fixed(int(factor))
            elif factor in ranges:
                product = product * ranges[factor]
            else:
                raise ExportError(
                    f"{where}: no TensorRT profile range for dimension {factor!r} (known: "
                    f"{', '.join(sorted(ranges))}); add it to dim_ranges in export/tensorrt.py"
                )
        total = total + product
    return total


def shape_ranges(
    component: str, entry: ComponentEntry, schedule: Schedule, limits: ProfileLimits
) -> dict[str, ShapeRange]:
    """Every input's min / opt / max shape, from the manifest's (symbolic) shapes."""
    ranges = dim_ranges(component, schedule, limits)
    out = {}
    for spec in entry.inputs:
        dims = [resolve_dim(d, ranges, f"{component} input {spec.name}") for d in spec.shape]
        out[spec.name] = ShapeRange(
            tuple(d.min for d in dims), tuple(d.opt for d in dims), tuple(d.max for d in dims)
        )
    return out


def profile_limits(manifest: Manifest) -> ProfileLimits:
    """The defaults, bounded by the model: positions stay below ``max_positions``."""
    data = manifest.model_config
    if not data:
        log.warning("manifest has no model config; TensorRT profiles use the default limits")
        return ProfileLimits()
    if "format" not in data:  # the model section alone
        data = {"format": FORMAT, "version": FORMAT_VERSION, "model": data}
    cfg = config_from_dict(data, "manifest.json model_config")
    ctx = min(MAX_CONTEXT, cfg.backbone.max_positions - MAX_NEW_TOKENS)
    if ctx < 1:
        raise ExportError(
            f"backbone.max_positions {cfg.backbone.max_positions} leaves no room for a KV "
            f"cache beside {MAX_NEW_TOKENS} new tokens; pass ProfileLimits explicitly"
        )
    return ProfileLimits(max_context=ctx, left_context_chunks=cfg.audio.left_context_chunks)


def build_tensorrt(
    engines_dir: Path, manifest: Manifest, fp16: bool, limits: ProfileLimits | None = None
) -> None:
    """Build ``<component>.plan`` for every graph of ``manifest``; rewrite the manifest
    (backend ``tensorrt``, each plan listed after its component's ONNX files)."""
    try:
        trt = import_tensorrt()
    except EngineError as e:
        raise ExportError(f"--backend tensorrt: {e}") from None
    limits = limits or profile_limits(manifest)
    logger = trt_logger(trt)
    trt.init_libnvinfer_plugins(logger, "")  # ops the parser maps onto TensorRT's plugins
    builder = trt.Builder(logger)
    cache_path = engines_dir / TIMING_CACHE
    cache: Any = None
    components = dict(manifest.components)
    started = time.monotonic()
    for i, (name, entry) in enumerate(manifest.components.items(), 1):
        t0, logger.errors = time.monotonic(), []
        log.info("TensorRT: building %s (%d/%d) from %s", name, i, len(components), entry.graph)
        network, parser = _parse(trt, builder, engines_dir / entry.graph, name)
        config = builder.create_builder_config()
        cache = _use_timing_cache(config, cache, cache_path)
        _set_precision(trt, config, fp16 and not fp32_only(name, manifest), manifest.precision)
        ranges = shape_ranges(name, entry, manifest.schedule, limits)
        _add_profile(builder, config, network, ranges, name)
        plan = builder.build_serialized_network(network, config)
        del parser  # the network borrows the parser's weights until the build is done
        if plan is None:
            raise ExportError(
                f"TensorRT could not build {name}: {' | '.join(logger.errors) or 'see the log'}"
            )
        rel = plan_name(name)
        with (engines_dir / rel).open("wb") as f:
            f.write(plan)
        cache_path.write_bytes(memoryview(cache.serialize()))  # an interrupted build keeps it
        onnx_files = tuple(f for f in entry.files if not f.path.endswith(PLAN_SUFFIX))
        components[name] = replace(entry, files=(*onnx_files, file_entry(engines_dir, rel)))
        size_mb = components[name].files[-1].bytes / 1e6
        log.info("TensorRT: built %s in %.1f s (%.1f MB)", name, time.monotonic() - t0, size_mb)
    tools = {**manifest.tools, "tensorrt": str(trt.__version__)}
    write_manifest(
        engines_dir, replace(manifest, backend="tensorrt", components=components, tools=tools)
    )
    log.info("TensorRT: %d engines in %.1f s", len(components), time.monotonic() - started)


def _parse(trt: Any, builder: Any, graph: Path, name: str) -> tuple[Any, Any]:
    network = builder.create_network(0)  # explicit batch: the only mode since TensorRT 10
    parser = trt.OnnxParser(network, trt_logger(trt))
    if not parser.parse_from_file(str(graph)):  # reads external data beside the graph
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise ExportError(f"{graph}: TensorRT cannot parse the {name} graph: {'; '.join(errors)}")
    return network, parser


def _use_timing_cache(config: Any, cache: Any, path: Path) -> Any:
    """One timing cache for all builds: loaded from ``path`` if there, saved after each."""
    if cache is None:
        data = path.read_bytes() if path.is_file() else b""
        cache = config.create_timing_cache(data)
        log.info("TensorRT: timing cache %s (%d bytes loaded)", path, len(data))
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        log.warning("TensorRT: %s is from another GPU or TensorRT; starting a new one", path)
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def fp32_only(component: str, manifest: Manifest) -> bool:
    """Whether ``component`` must run in float32 whatever the export's precision: a
    Griffin-Lim vocoder's phase search divides by magnitudes float16 cannot hold."""
    config = manifest.model_config.get("model", manifest.model_config)
    vocoder = config.get("vocoder") if isinstance(config, dict) else None
    return (
        component == "vocoder"
        and isinstance(vocoder, dict)
        and vocoder.get("kind") == "griffin_lim"
    )


def _set_precision(trt: Any, config: Any, fp16: bool, precision: str) -> None:
    if not fp16:
        # fp32 stays fp32: TF32 (on by default) would cost ~1e-3 relative error
        if hasattr(trt.BuilderFlag, "TF32"):
            config.clear_flag(trt.BuilderFlag.TF32)
        return
    if hasattr(trt.BuilderFlag, "FP16"):  # TensorRT 10: weak typing may pick fp16 kernels
        config.set_flag(trt.BuilderFlag.FP16)
    elif precision != "fp16":
        raise ExportError(
            f"TensorRT {trt.__version__} builds only strongly typed networks (no fp16 flag): "
            "export with --precision fp16 so the graphs themselves are fp16, or install "
            "tensorrt>=10,<11"
        )


def _add_profile(
    builder: Any, config: Any, network: Any, ranges: Mapping[str, ShapeRange], name: str
) -> None:
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = tuple(int(d) for d in tensor.shape)
        if all(d >= 0 for d in dims):
            continue
        r = ranges.get(tensor.name)
        if r is None or len(r.min) != len(dims) or tensor.is_shape_tensor:
            raise ExportError(
                f"{name}: graph input {tensor.name} {dims} does not match the manifest's "
                f"{r.opt if r else 'nothing'} (or is a shape tensor); re-export the graphs"
            )
        lo, opt, hi = (
            tuple(d if d >= 0 else s[k] for k, d in enumerate(dims)) for s in (r.min, r.opt, r.max)
        )
        log.debug("%s: profile %s min %s opt %s max %s", name, tensor.name, lo, opt, hi)
        profile.set_shape(tensor.name, lo, opt, hi)
    if config.add_optimization_profile(profile) < 0:
        raise ExportError(f"{name}: TensorRT rejected the optimisation profile (see the log)")
