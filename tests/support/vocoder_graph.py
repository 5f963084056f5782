"""A model's vocoder exported alone, through the export's verify check, and opened in the
engines' runner: what the vocoder tests compare torch against."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from venus.engines.manifest import ComponentEntry, load_manifest
from venus.engines.options import EngineOptions
from venus.engines.session import open_component
from venus.engines.vocoder import VocoderRunner
from venus.export.model.venus import VenusModel
from venus.export.onnx.exporter import export_graph
from venus.export.onnx.manifest import component_entry
from venus.export.onnx.specs import graph_specs
from venus.export.onnx.verify import FP32_TOLERANCE, check_component


def exported_vocoder(
    model: VenusModel, out: Path, base: Path
) -> tuple[ComponentEntry, VocoderRunner]:
    """``model``'s vocoder graph in ``out`` (its manifest entry), checked against torch by
    ``venus export --verify``'s check (on ``base``'s manifest, the untrained tiny engines'),
    and a CPU runner on it."""
    spec = next(s for s in graph_specs(model) if s.name == "vocoder")
    entry = component_entry(out, export_graph(spec, model.cfg, out), "fp32", None)
    manifest = replace(load_manifest(base), components={"vocoder": entry})
    check = check_component(out, manifest, "vocoder", model, seed=7)
    assert check.result == "pass" and check.rel <= FP32_TOLERANCE, check
    session = open_component(out, "vocoder", entry, EngineOptions(providers=("cpu",)), ["cpu"])
    return entry, VocoderRunner(session, model.cfg.vocoder.hop)
