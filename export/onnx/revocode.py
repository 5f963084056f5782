"""``python -m venus.export.onnx.revocode ENGINES --iterations N --out NEW``: a copy of an
engine directory whose Griffin-Lim vocoder runs ``N`` phase rounds a step.

A Griffin-Lim vocoder (``griffin_lim.py``) has no trained weights: its graph is the
config's signal processing and the voice's per-bin log-mel ``mean`` and ``std``. So it can
be made again at another iteration count without the checkpoint, which engines do not
carry. The stats are read back from the graph (the ``Mul`` by ``std`` and the ``Add`` of
``mean`` that open it), and before anything is written the vocoder is re-made at the
engines' own count and must give the graph's own output on a random mel: stats read
wrong, or a graph of another make, stop it there. The copy's manifest names the new
vocoder file and says the new count in its ``model_config``, and ``tools`` records the
change (``revocode``); every other file is copied as it is.

Measured on the shipped venus-tiny (docs/training-log.md, the thirty-eighth round): from
4 to 16 rounds the replies are heard within the spread two flow seeds give; 32 are heard
worse. The cost grows with the rounds (16 take about 3 GFLOP a second of speech).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from numpy.typing import NDArray
from onnx import numpy_helper
from pydantic import ValidationError

from venus.engines.manifest import ComponentEntry, Manifest
from venus.engines.options import EngineOptions
from venus.engines.session import open_component
from venus.engines.vocoder import VocoderRunner
from venus.errors import ExportError
from venus.export.model.config import ModelConfig, VocoderConfig
from venus.export.model.griffin_lim import GriffinLimVocoder
from venus.export.onnx.exporter import export_graph
from venus.export.onnx.manifest import component_entry
from venus.export.onnx.specs import vocoder_spec
from venus.export.onnx.swap import engines_config, run_tool, swap_component

__all__ = ["graph_stats", "revocode"]

log = logging.getLogger(__name__)
VOCODER_FILE = "vocoder.onnx"
CHECK_FRAMES = 50  # one second of mel for the reproduction check
CHECK_TOLERANCE = 1e-4  # of the output's peak


def graph_stats(graph: onnx.ModelProto, bins: int) -> tuple[NDArray[np.float32], ...]:
    """The voice's ``(mean, std)`` a Griffin-Lim vocoder graph de-normalises its ``mel``
    input with (``mel * std + mean``, the graph's first arithmetic)."""
    inits = {i.name: i for i in graph.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def operand(node: onnx.NodeProto, other: str) -> NDArray[np.float32] | None:
        names = [n for n in node.input if n != other]
        if len(names) != 1 or names[0] not in inits:
            return None
        value = numpy_helper.to_array(inits[names[0]]).astype(np.float32)
        return value.reshape(-1) if value.size == bins else None

    for mul in (n for n in consumers.get("mel", []) if n.op_type == "Mul"):
        std = operand(mul, "mel")
        for add in (n for n in consumers.get(mul.output[0], []) if n.op_type == "Add"):
            mean = operand(add, mul.output[0])
            if std is not None and mean is not None:
                return mean, std
    raise ExportError(
        f"the vocoder graph does not open with mel * std + mean over {bins} bins: not a "
        "Griffin-Lim vocoder as `venus export` writes one"
    )


def _vocoder(
    cfg: VocoderConfig, mean: NDArray[np.float32], std: NDArray[np.float32]
) -> GriffinLimVocoder:
    vocoder = GriffinLimVocoder(cfg)
    vocoder.set_stats(torch.from_numpy(mean.copy()), torch.from_numpy(std.copy()))
    return vocoder.eval()


def _export(cfg: ModelConfig, vocoder: GriffinLimVocoder, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = export_graph(vocoder_spec(cfg.vocoder, vocoder), cfg, Path(tmp))
        if files != [VOCODER_FILE]:
            raise ExportError(f"the vocoder exported as {files}, not one {VOCODER_FILE}")
        shutil.copyfile(Path(tmp) / VOCODER_FILE, out)


def _play(root: Path, entry: ComponentEntry, hop: int, mel: NDArray[np.float32]) -> NDArray[Any]:
    """``mel`` through the vocoder graph of ``root`` as the daemon runs it (its runner)."""
    session = open_component(root, "vocoder", entry, EngineOptions(), ("cpu",))
    runner = VocoderRunner(session, hop)
    return runner.step(mel, runner.new_state())


def _model_config(engines: Path) -> tuple[Manifest, ModelConfig]:
    manifest, cfg = engines_config(engines, "vocoder")
    if cfg.vocoder.kind != "griffin_lim":
        raise ExportError(
            f"{engines}: the vocoder is {cfg.vocoder.kind!r}, whose weights were trained; only "
            "a griffin_lim vocoder is re-made without its checkpoint"
        )
    return manifest, cfg


def revocode(engines: Path, out: Path, iterations: int) -> Manifest:
    """Copy ``engines`` to ``out`` (new or empty) with the Griffin-Lim vocoder at
    ``iterations`` rounds a step (module doc); -> the new manifest."""
    manifest, cfg = _model_config(engines)
    old = cfg.vocoder
    try:
        new_cfg = dataclasses.replace(old, iterations=iterations)
    except ValidationError as e:  # VocoderConfig's range: 1 to 256
        raise ExportError(f"--iterations {iterations}: {e.errors()[0]['msg']}") from None
    original = engines / VOCODER_FILE
    try:
        graph = onnx.load(str(original))
    except Exception as e:  # onnx raises DecodeError, OSError...: name the file
        raise ExportError(f"{original}: not a readable ONNX graph ({e})") from e
    mean, std = graph_stats(graph, old.mel_bins)

    rng = np.random.default_rng(0)
    mel = rng.standard_normal((1, old.mel_bins, CHECK_FRAMES)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        log.info("revocode: re-making the vocoder at its own %d rounds to check it", old.iterations)
        _export(cfg, _vocoder(old, mean, std), Path(tmp) / VOCODER_FILE)
        remade = component_entry(Path(tmp), [VOCODER_FILE], "fp32", None)
        want = _play(engines, manifest.components["vocoder"], old.hop, mel)
        got = _play(Path(tmp), remade, old.hop, mel)
        gap = float(np.abs(want - got).max())
        if gap > CHECK_TOLERANCE * max(float(np.abs(want).max()), 1e-6):
            raise ExportError(
                f"{original}: re-made from its own stats it differs by {gap:.3g} (peak "
                f"{float(np.abs(want).max()):.3g}): a graph of another make; export again"
            )
        log.info(
            "revocode: reproduced %s to %.2g; copying %s to %s", VOCODER_FILE, gap, engines, out
        )
    new_model = dataclasses.replace(cfg, vocoder=new_cfg)

    def write(root: Path) -> list[str]:
        log.info("revocode: exporting the vocoder at %d rounds into %s", iterations, root)
        _export(new_model, _vocoder(new_cfg, mean, std), root / VOCODER_FILE)
        return [VOCODER_FILE]

    change = f"griffin_lim iterations {old.iterations} -> {iterations}"
    return swap_component(engines, manifest, out, "vocoder", write, new_model, "revocode", change)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m venus.export.onnx.revocode",
        description="Copy an engine directory with its Griffin-Lim vocoder re-made at another "
        "number of phase rounds a step (no checkpoint needed: the vocoder has no trained "
        "weights). The rest of the engines is copied as it is.",
    )
    parser.add_argument("engines", type=Path, metavar="ENGINES", help="an engine directory")
    parser.add_argument(
        "--iterations", type=int, required=True, metavar="N",
        help="Griffin-Lim rounds a step (1 to 256; the shipped voice has 16)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, metavar="NEW",
                        help="new (or empty) engine directory")  # fmt: skip
    args = parser.parse_args(argv)
    return run_tool("revocode", args.out, lambda: revocode(args.engines, args.out, args.iterations))


if __name__ == "__main__":
    sys.exit(main())
