"""``venus export``: a checkpoint -> one ONNX graph per component plus ``manifest.json``.

Order: load the checkpoint (float32), trace and save each graph (exporter.py), apply the
precision pass (precision.py), describe it (manifest.py), copy the checkpoint's
``tokenizer.json``; ``manifest.json`` is written last, so a directory without one is an
unfinished export. One log line per component.

Precision per component: fp32 exports everything at float32; fp16 converts every graph
but a Griffin-Lim vocoder's (kept fp32, ``component_precision``); int4 quantises the
backbone's and speech decoder's weights and leaves the other graphs at fp32 (their
manifest entries say ``fp32``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import onnx
from tokenizers import Tokenizer

from venus.engines.manifest import (
    MANIFEST,
    Manifest,
    Precision,
    Sampling,
    file_entry,
    write_manifest,
)
from venus.engines.tokenizer import TOKENIZER_FILE
from venus.errors import ExportError
from venus.export.model.config import ModelConfig
from venus.export.model.venus import VenusModel
from venus.export.onnx.exporter import export_graph
from venus.export.onnx.manifest import build_manifest, component_entry
from venus.export.onnx.precision import INT4_COMPONENTS, convert_fp16, quantize_int4, save_proto
from venus.export.onnx.specs import graph_specs

log = logging.getLogger(__name__)


def component_precision(component: str, precision: Precision, cfg: ModelConfig) -> Precision:
    if precision == "int4" and component not in INT4_COMPONENTS:
        return "fp32"
    if component == "vocoder" and cfg.vocoder.kind == "griffin_lim":
        return "fp32"  # its phase search divides by magnitudes float16 cannot hold
    return precision


def prepare_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(
            f"{out}: exists and is not an empty directory; remove it or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)


def checkpoint_tokenizer(checkpoint: Path) -> Path:
    """The checkpoint's ``tokenizer.json``, checked to load; ExportError if absent or bad."""
    path = checkpoint / TOKENIZER_FILE
    if not path.is_file():
        raise ExportError(
            f"{path}: no such file; the engines need the checkpoint's tokenizer (`venus init` "
            "writes one, `venus convert` copies the upstream Qwen3 one: copy it into "
            f"{checkpoint} or re-create the checkpoint)"
        )
    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exception for a bad file
        raise ExportError(f"{path}: not a Hugging Face tokenizer.json ({e})") from e
    return path


def _apply_precision(out: Path, files: list[str], precision: Precision) -> None:
    model = onnx.load(str(out / files[0]))  # external data too
    model = quantize_int4(model) if precision == "int4" else convert_fp16(model)
    save_proto(model, out / files[0], files[1] if len(files) > 1 else None)


def _share(out: Path, files: list[str]) -> None:
    """onnx writes external data 0600; engines are read by the service user."""
    mask = os.umask(0)
    os.umask(mask)
    for f in files:
        (out / f).chmod(0o666 & ~mask)


def export_engines(
    model: VenusModel,
    checkpoint: Path,
    out: Path,
    precision: Precision = "fp32",
    sampling: Sampling | None = None,
) -> Manifest:
    """Export every graph of ``model`` (loaded from ``checkpoint``) into ``out``, with
    ``sampling`` as the manifest's sampling recommendation."""
    start = time.monotonic()
    tokenizer = checkpoint_tokenizer(checkpoint)
    prepare_out(out)
    cfg = model.cfg
    specs = graph_specs(model)
    log.info(
        "exporting %s (%s frontend) to %s: %d graphs at %s",
        cfg.name,
        cfg.frontend,
        out,
        len(specs),
        precision,
    )
    components = {}
    for spec in specs:
        began = time.monotonic()
        files = export_graph(spec, cfg, out)
        graph_precision = component_precision(spec.name, precision, cfg)
        if graph_precision != "fp32":
            _apply_precision(out, files, graph_precision)
        _share(out, files)
        entry = component_entry(out, files, graph_precision, spec.kv)
        components[spec.name] = entry
        size = sum(f.bytes for f in entry.files)
        log.info(
            "%-15s %-4s %9.1f MB %7.1f s",
            spec.name,
            graph_precision,
            size / 1e6,
            time.monotonic() - began,
        )
    shutil.copyfile(tokenizer, out / TOKENIZER_FILE)
    _share(out, [TOKENIZER_FILE])
    log.info("hashing %s", checkpoint)
    manifest = build_manifest(
        cfg,
        checkpoint,
        components,
        precision,
        tokenizer=file_entry(out, TOKENIZER_FILE),
        sampling=sampling,
    )
    write_manifest(out, manifest)
    _share(out, [MANIFEST])
    log.info("wrote %s in %.1f s", out / MANIFEST, time.monotonic() - start)
    return manifest
