"""Random graph inputs of chosen sizes: for tracing the export and for parity checks.

Sizes name the symbolic dimensions (``batch``, ``sequence``, ``past_sequence``...;
``total_sequence`` follows from them);
``random_inputs`` fills every input of a ``GraphSpec`` with values of the right kind:
token ids in range, all-ones attention masks, position ids continuing after the past,
RGB in [0, 1], normal noise for the rest.
"""

from __future__ import annotations

import torch
from torch import Tensor

from venus.export.model.config import ModelConfig
from venus.export.onnx.specs import GraphSpec, dim_size

# Sizes used to trace the export: all distinct and > 1, so that torch.export neither
# specialises a dimension to 0 / 1 nor ties two unrelated dimensions together.
TRACE_SIZES = {
    "batch": 2,
    "sequence": 3,
    "past_sequence": 5,
    "condition_length": 4,
    "group": 6,
    "frames": 7,
    "context_frames": 11,
}


def trace_sizes() -> dict[str, int]:
    return dict(TRACE_SIZES)


def _vocab(spec: GraphSpec, cfg: ModelConfig) -> int:
    if spec.name == "speech_decoder":
        return cfg.speech.vocab
    if spec.name == "flow_decoder":
        return cfg.flow.codebook
    return cfg.backbone.total_vocab


def random_inputs(
    spec: GraphSpec,
    cfg: ModelConfig,
    sizes: dict[str, int],
    gen: torch.Generator,
    padding: int = 0,
) -> dict[str, Tensor]:
    """Inputs of ``spec`` at ``sizes`` -> {name: tensor}; float32 throughout.

    ``padding`` (flow decoder only) zeroes the last ``padding`` entries of ``token_mask``,
    as at the final flush.
    """
    out: dict[str, Tensor] = {}
    past = sizes.get("past_sequence", 0)
    sizes = dict(sizes)
    for t in spec.inputs:  # the attention mask covers the past and the new positions
        if t.name == "position_ids":
            sizes["total_sequence"] = past + dim_size(t.shape[1], sizes)
    for t in spec.inputs:
        shape = tuple(dim_size(d, sizes) for d in t.shape)
        if t.name in ("input_ids", "tokens"):
            out[t.name] = torch.randint(0, _vocab(spec, cfg), shape, generator=gen)
        elif t.name == "attention_mask":
            out[t.name] = torch.ones(shape, dtype=torch.int64)
        elif t.name == "position_ids":
            out[t.name] = (torch.arange(shape[1]) + past)[None].expand(shape).contiguous()
        elif t.name == "token_mask":
            mask = torch.ones(shape)
            if padding:
                mask[:, shape[1] - padding :] = 0.0
            out[t.name] = mask
        elif t.name == "pixels":
            out[t.name] = torch.rand(shape, generator=gen)
        else:
            out[t.name] = torch.randn(shape, generator=gen)
    return out
