"""Parity of exported graphs with the torch reference (``venus export --verify``, tests).

Every graph runs on ONNX Runtime's CPU provider on fresh random inputs (sizes unlike
those it was traced at, past lengths and condition lengths of 0 included) and is
compared with ``reference.reference``: relative error = max |ort - ref| / max |ref|,
the worst over the graph's outputs and cases. fp32 graphs pass at <= ``FP32_TOLERANCE``;
for fp16 and int4 graphs the error is measured and reported, not judged. The backbone is
also decoded for ``DECODE_STEPS`` steps through its KV cache next to ``Backbone.step``:
logits error and top-1 agreement (the accuracy cost of int4 / fp16).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from venus.engines.manifest import Manifest, verify
from venus.errors import EngineError, ExportError
from venus.export.model.config import ModelConfig
from venus.export.model.venus import VenusModel
from venus.export.onnx.inputs import random_inputs
from venus.export.onnx.reference import reference
from venus.export.onnx.session import open_session, run_session
from venus.export.onnx.specs import graph_specs

FP32_TOLERANCE = 1e-4
DECODE_STEPS = 50
PROMPT_TOKENS = 8
Result = Literal["pass", "FAIL", "measured", "skipped"]


@dataclass(frozen=True)
class Case:
    sizes: dict[str, int]
    padding: int = 0  # flow decoder: masked lookahead tokens (the final flush)


@dataclass(frozen=True)
class Check:
    component: str
    precision: str
    max_abs: float
    rel: float
    result: Result
    note: str = ""


@dataclass(frozen=True)
class DecodeAgreement:
    precision: str
    steps: int
    max_abs: float
    rel: float
    top1: int  # steps whose argmax matched the reference


def cases(name: str, cfg: ModelConfig) -> tuple[Case, ...]:
    """The inputs each graph is checked on: streaming edge cases included."""
    if name == "audio_encoder":
        full = cfg.audio.left_context_chunks * (cfg.mel_frames_per_chunk // 2)
        return (Case({"batch": 1, "context_frames": 0}), Case({"batch": 2, "context_frames": full}))
    if name == "backbone":
        return (
            Case({"batch": 1, "sequence": 6, "past_sequence": 0}),
            Case({"batch": 2, "sequence": 1, "past_sequence": 9}),
        )
    if name == "speech_decoder":
        return (
            Case({"batch": 1, "condition_length": 5, "sequence": 1, "past_sequence": 0}),
            Case({"batch": 2, "condition_length": 0, "sequence": 1, "past_sequence": 8}),
        )
    if name == "flow_decoder":
        c, la = cfg.speech_tokens_per_chunk, cfg.flow.lookahead_tokens
        return (
            Case({"batch": 1, "group": c - la, "past_sequence": 0}),
            Case({"batch": 2, "group": 7 + la, "past_sequence": c - la}, padding=la),
        )
    return (Case({"batch": 1, "sequence": 7, "frames": 9}),)


def _compare(got: np.ndarray, ref: torch.Tensor, where: str) -> tuple[float, float]:
    want = ref.double().numpy()
    if got.shape != want.shape:
        raise ExportError(f"{where}: ONNX Runtime gave shape {got.shape}, torch {want.shape}")
    if want.size == 0:
        return 0.0, 0.0
    err = float(np.abs(got.astype(np.float64) - want).max())
    return err, err / max(float(np.abs(want).max()), 1e-30)


def check_component(
    root: Path, manifest: Manifest, name: str, model: VenusModel, seed: int = 0
) -> Check:
    """Run graph ``name`` on its cases next to the torch reference."""
    entry = manifest.components[name]
    spec = next(s for s in graph_specs(model) if s.name == name)
    gen = torch.Generator().manual_seed(seed)
    worst_abs = worst_rel = 0.0
    try:
        session = open_session(root / entry.graph)
        for case in cases(name, model.cfg):
            inputs = random_inputs(spec, model.cfg, case.sizes, gen, case.padding)
            ref = reference(name, model, inputs, case.padding)
            got = run_session(session, inputs)
            for out_name, value in got.items():
                err, rel = _compare(value, ref[out_name], f"{name}.{out_name} at {case.sizes}")
                worst_abs, worst_rel = max(worst_abs, err), max(worst_rel, rel)
    except ExportError as e:
        if entry.precision == "fp32":
            raise
        note = f"ONNX Runtime's CPU provider cannot run it: {e}; verify on a CUDA machine"
        return Check(name, entry.precision, 0.0, 0.0, "skipped", note)
    if entry.precision != "fp32":
        return Check(name, entry.precision, worst_abs, worst_rel, "measured")
    ok = worst_rel <= FP32_TOLERANCE
    return Check(name, entry.precision, worst_abs, worst_rel, "pass" if ok else "FAIL")


@torch.no_grad()
def decode_agreement(
    root: Path, manifest: Manifest, model: VenusModel, steps: int = DECODE_STEPS, seed: int = 0
) -> DecodeAgreement:
    """Prefill ``PROMPT_TOKENS`` random tokens, then greedy-decode ``steps - 1`` tokens
    (the reference's choices feed both) through the backbone graph's KV cache."""
    entry = manifest.components["backbone"]
    session = open_session(root / entry.graph)
    bb = model.backbone
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, bb.shape.vocab, (1, PROMPT_TOKENS), generator=gen)
    cache = bb.new_cache(1)
    empty = torch.zeros(1, bb.shape.kv_heads, 0, bb.shape.head_dim)
    past = {
        f"past_key_values.{i}.{p}": empty for i in range(bb.shape.layers) for p in ("key", "value")
    }
    worst_abs = worst_rel = 0.0
    top1 = 0
    for _ in range(steps):
        embeds = bb.embed(ids)
        start, n = cache.positions, ids.shape[1]
        ref, _ = bb.step(embeds, cache)
        feeds = {
            "inputs_embeds": embeds,
            "attention_mask": torch.ones(1, start + n, dtype=torch.int64),
            "position_ids": torch.arange(start, start + n)[None],
            **past,
        }
        out = run_session(session, feeds)
        err, rel = _compare(out["logits"][:, -1], ref[:, -1], "backbone decode")
        worst_abs, worst_rel = max(worst_abs, err), max(worst_rel, rel)
        top1 += int(out["logits"][0, -1].argmax() == int(ref[0, -1].argmax()))
        past = {k: torch.from_numpy(out[k.replace("past_key_values", "present")]) for k in past}
        ids = ref[:, -1:].argmax(-1)
    return DecodeAgreement(entry.precision, steps, worst_abs, worst_rel, top1)


def verify_engines(
    root: Path, manifest: Manifest, model: VenusModel
) -> tuple[list[Check], DecodeAgreement | None]:
    """Hashes of every file, then every graph's parity and the backbone's decode."""
    try:
        verify(root, manifest)
    except EngineError as e:
        raise ExportError(str(e)) from e
    checks = [check_component(root, manifest, name, model) for name in manifest.components]
    try:
        decode = decode_agreement(root, manifest, model)
    except ExportError:
        if manifest.components["backbone"].precision == "fp32":
            raise
        decode = None  # its check above says why
    return checks, decode


def render_report(checks: list[Check], decode: DecodeAgreement | None) -> str:
    lines = [f"{'component':<16}{'precision':<11}{'max abs error':>15}{'rel error':>12}  result"]
    for c in checks:
        note = f" ({c.note})" if c.note else ""
        lines.append(
            f"{c.component:<16}{c.precision:<11}{c.max_abs:>15.2e}{c.rel:>12.2e}  {c.result}{note}"
        )
    if decode is None:
        return "\n".join(lines) + "\n"
    d = decode
    lines.append(
        f"backbone decode, {d.steps} steps ({d.precision}): logits max abs error "
        f"{d.max_abs:.2e} (relative {d.rel:.2e}), top-1 agreement {d.top1}/{d.steps} "
        f"({100 * d.top1 / d.steps:.0f} %)"
    )
    return "\n".join(lines) + "\n"
