"""``python -m venus.train.reflow ENGINES --voice VOICE --euler-steps N --out NEW``: a copy
of an engine directory whose flow decoder integrates in ``N`` Euler steps a group.

The flow decoder's Euler loop is unrolled in its graph (``FlowDecoder.solve``), so its
step count is fixed at export. Flow matching trains the velocity at every t, not at the
steps the graph takes, so the same weights can be integrated in more or fewer steps; and
the weights are the voice's (``venus train-voice``: ``venus train --voice`` copies them
into the checkpoint unchanged), so the engines need not their checkpoint, only their voice.

Before anything is written, the voice's flow decoder is exported at the engines' own step
count and must give the engines' own mel on the same tokens and noise, played through the
daemon's flow runner: a voice trained further, fitted again, or another's stops it there,
since the model's speech tokens are that voice's codes. A flow decoder trained further (or
for more steps) on the same codebook speaks the same codes: ``--engines-voice OLD`` names
the voice the engines were trained with, which is checked so, and the new voice's codebook
must be OLD's (``units_sha``). The copy's manifest names the new graph and step count
(``model_config``) and ``tools`` records the change and the voice (``reflow``); every other
file is copied as it is. Measured on the shipped venus-tiny:
docs/training-log.md (the thirty-ninth round).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from numpy.typing import NDArray
from safetensors import SafetensorError
from safetensors.torch import load_file

from venus.engines.flow import FlowRunner
from venus.engines.manifest import ComponentEntry, Manifest, Schedule
from venus.engines.options import EngineOptions
from venus.engines.session import open_component
from venus.errors import ExportError
from venus.export.model.config import FlowDecoderConfig, ModelConfig
from venus.export.model.flow import FlowDecoder
from venus.export.onnx.exporter import export_graph
from venus.export.onnx.manifest import component_entry
from venus.export.onnx.specs import KVLayout, flow_spec
from venus.export.onnx.swap import engines_config, run_tool, swap_component
from venus.train.data import TrainDataError
from venus.train.voice import FLOW_FILE, load_voice
from venus.train.voice_id import units_sha

__all__ = ["MAX_EULER_STEPS", "reflow"]

log = logging.getLogger(__name__)
FLOW_GRAPH = "flow_decoder.onnx"
MAX_EULER_STEPS = 64  # each step is one estimator pass a group: the cost grows with it
CHECK_CHUNKS = 2  # one full chunk of tokens, then a final one: the cache and the flush
CHECK_TOLERANCE = 1e-4  # of the mel's peak


def _flow(cfg: FlowDecoderConfig, voice: Path) -> FlowDecoder:
    flow = FlowDecoder(cfg)
    try:
        flow.load_state_dict(load_file(str(voice / FLOW_FILE)))
    except (OSError, SafetensorError, RuntimeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ExportError(f"{voice / FLOW_FILE}: not this voice's flow decoder ({first})") from e
    return flow.eval()


def _export(model: ModelConfig, flow: FlowDecoder, root: Path) -> list[str]:
    files = export_graph(flow_spec(model.flow, flow), model, root)
    if files != [FLOW_GRAPH]:
        raise ExportError(f"the flow decoder exported as {files}, not one {FLOW_GRAPH}")
    return files


def _kv(cfg: FlowDecoderConfig) -> KVLayout:
    return KVLayout(cfg.encoder_layers, cfg.heads, cfg.d_model // cfg.heads)


def _play(
    root: Path, entry: ComponentEntry, schedule: Schedule, tokens: NDArray[np.int64]
) -> NDArray[np.float32]:
    """``tokens`` [1, chunks x C] through the flow graph of ``root`` as the daemon streams
    them (its runner, noise from seed 0, the last chunk final)."""
    session = open_component(root, "flow_decoder", entry, EngineOptions(), ("cpu",))
    runner = FlowRunner(session, entry, schedule)
    state = runner.new_state(seed=0)
    c = runner.chunk_tokens
    mels = [
        runner.step(tokens[:, i : i + c], state, final=i + c >= tokens.shape[1])
        for i in range(0, tokens.shape[1], c)
    ]
    return np.concatenate(mels, axis=2)


def _check_voice(
    engines: Path, manifest: Manifest, cfg: ModelConfig, flow: FlowDecoder, voice: Path
) -> None:
    """The voice's flow decoder at the engines' step count must give the engines' mel."""
    rng = np.random.default_rng(0)
    chunk = manifest.schedule.speech_tokens
    tokens = rng.integers(0, cfg.flow.codebook, (1, CHECK_CHUNKS * chunk), dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        log.info("reflow: exporting %s's flow decoder at the engines' %d steps to check it",
                 voice, cfg.flow.euler_steps)  # fmt: skip
        files = _export(cfg, flow, Path(tmp))
        remade = component_entry(Path(tmp), files, "fp32", _kv(cfg.flow))
        want = _play(engines, manifest.components["flow_decoder"], manifest.schedule, tokens)
        got = _play(Path(tmp), remade, manifest.schedule, tokens)
    gap, peak = float(np.abs(want - got).max()), float(np.abs(want).max())
    if gap > CHECK_TOLERANCE * max(peak, 1e-6):
        raise ExportError(
            f"{voice}: its flow decoder differs from {engines}'s by {gap:.3g} (peak {peak:.3g}) "
            "on the same tokens: not the voice these engines were trained with (a voice "
            "trained further, or fitted again, speaks other codes)"
        )
    log.info("reflow: %s reproduces %s/%s to %.2g", voice, engines, FLOW_GRAPH, gap)


def _voice_flow(
    voice: Path, engines: Path, cfg: FlowDecoderConfig
) -> tuple[FlowDecoderConfig, int]:
    """``voice``'s flow config at the engines' step count, which must be the engines', and
    the voice's training step."""
    try:
        loaded = load_voice(voice)
    except TrainDataError as e:
        raise ExportError(str(e)) from None
    own = dataclasses.replace(loaded.flow, euler_steps=cfg.euler_steps)
    if own != cfg:
        diff = [
            f"{f.name} {getattr(own, f.name)} against {getattr(cfg, f.name)}"
            for f in dataclasses.fields(own)
            if getattr(own, f.name) != getattr(cfg, f.name)
        ]
        raise ExportError(
            f"{voice}: its flow decoder is not the shape of {engines}'s " + ", ".join(diff)
        )
    return own, loaded.step


def reflow(
    engines: Path,
    voice: Path,
    out: Path,
    euler_steps: int | None = None,
    engines_voice: Path | None = None,
) -> Manifest:
    """Copy ``engines`` to ``out`` (new or empty) with the flow decoder of ``voice`` at
    ``euler_steps`` Euler steps a group (by default the engines' own count). ``voice``
    must be the voice the engines were trained with, or, given ``engines_voice`` (that
    voice), one of the same codebook (module doc); -> the new manifest."""
    manifest, cfg = engines_config(engines, "flow_decoder")
    old_steps = cfg.flow.euler_steps
    steps = old_steps if euler_steps is None else euler_steps
    if not 1 <= steps <= MAX_EULER_STEPS:
        raise ExportError(f"--euler-steps {steps}: expected 1 to {MAX_EULER_STEPS}")
    own, voice_step = _voice_flow(voice, engines, cfg.flow)
    if engines_voice is None and steps == old_steps:
        raise ExportError(
            f"--euler-steps {steps} is the engines' own count and {voice} their own voice: "
            "nothing would change"
        )
    trained = voice if engines_voice is None else engines_voice
    if engines_voice is not None:
        _voice_flow(engines_voice, engines, cfg.flow)
        if units_sha(voice) != units_sha(engines_voice):
            raise ExportError(
                f"{voice}: its codebook is not {engines_voice}'s, whose codes the engines' "
                "model speaks; train the voice further from that codebook"
            )
    checked = _flow(own, trained)
    with torch.no_grad():
        _check_voice(engines, manifest, cfg, checked, trained)
    new_flow = dataclasses.replace(own, euler_steps=steps)
    new_model = dataclasses.replace(cfg, flow=new_flow)
    if engines_voice is None:  # the weights just checked, unrolled to the new count
        flow = FlowDecoder(new_flow)
        flow.load_state_dict(checked.state_dict())
        flow.eval()
    else:
        flow = _flow(new_flow, voice)

    def write(root: Path) -> list[str]:
        log.info("reflow: exporting %s's flow decoder at %d Euler steps into %s",
                 voice, steps, root)  # fmt: skip
        with torch.no_grad():
            return _export(new_model, flow, root)

    counts = f"{old_steps} -> {steps}" if steps != old_steps else f"{steps}"
    # the voice by its name, step and codebook, not by this machine's path to it
    named = f"{voice.resolve().name} (step {voice_step}, units {units_sha(voice)})"
    change = f"flow decoder of {named}, euler_steps {counts}"
    return swap_component(
        engines, manifest, out, "flow_decoder", write, new_model, "reflow", change, _kv(new_flow)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m venus.train.reflow",
        description="Copy an engine directory with its flow decoder exported again from its "
        "voice (venus train-voice's output) at another number of Euler steps a group, or "
        "from a voice of the same codebook trained further. The voice the engines were "
        "trained with is checked against them. The rest of the engines is copied as it is.",
    )
    parser.add_argument("engines", type=Path, metavar="ENGINES", help="an engine directory")
    parser.add_argument("--voice", type=Path, required=True, metavar="VOICE",
                        help="the voice whose flow decoder the copy gets (venus train-voice's "
                        "output): the one the engines were trained with, unless "
                        "--engines-voice")  # fmt: skip
    parser.add_argument(
        "--euler-steps", type=int, metavar="N",
        help=f"Euler steps a group (1 to {MAX_EULER_STEPS}; default: the engines' own count; "
        "the shipped voice has 4)",
    )  # fmt: skip
    parser.add_argument(
        "--engines-voice", type=Path, metavar="OLD",
        help="the voice the engines were trained with, when VOICE is another of its codebook "
        "(trained further, or for more steps): OLD is checked against the engines, VOICE's "
        "codebook against OLD's",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, metavar="NEW",
                        help="new (or empty) engine directory")  # fmt: skip
    args = parser.parse_args(argv)
    return run_tool(
        "reflow",
        args.out,
        lambda: reflow(args.engines, args.voice, args.out, args.euler_steps, args.engines_voice),
    )


if __name__ == "__main__":
    sys.exit(main())
