"""Qwen3 (Hugging Face ``Qwen3ForCausalLM``) -> the Venus backbone.

Names map one to one after stripping ``model.``; the embedding (and an untied LM head)
gain one row per special token, initialised reproducibly near the mean upstream row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from venus.errors import ExportError
from venus.export.convert.upstream import HFCheckpoint
from venus.export.model.config import SPECIAL_TOKENS, BackboneConfig

NEW_ROW_NOISE = 0.1  # new rows = mean row + 0.1 * per-column std * N(0, 1)


def backbone_config_from_qwen3(hf: dict[str, Any], source: str) -> BackboneConfig:
    if hf.get("model_type") not in ("qwen3", None):
        raise ExportError(f"{source}: model_type {hf.get('model_type')!r} is not qwen3")
    rope = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if rope_type not in ("default", None):
        raise ExportError(f"{source}: rope type {rope_type!r} is not supported (only default RoPE)")
    if hf.get("attention_bias"):
        raise ExportError(f"{source}: attention_bias=true is not a Qwen3 layout")
    try:
        heads = int(hf["num_attention_heads"])
        hidden = int(hf["hidden_size"])
        return BackboneConfig(
            vocab_size=int(hf["vocab_size"]),
            hidden_size=hidden,
            layers=int(hf["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(hf.get("num_key_value_heads", heads)),
            head_dim=int(hf.get("head_dim") or hidden // heads),
            intermediate_size=int(hf["intermediate_size"]),
            rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 1e6))),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            max_positions=int(hf.get("max_position_embeddings", 40960)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        )
    except KeyError as e:
        raise ExportError(f"{source}: config.json lacks {e.args[0]}") from None


STATS_ROWS = 8192  # rows summed at a time: no float copy of a 151936-row table (2.5 GB)


def extend_rows(table: torch.Tensor, extra: int, gen: torch.Generator) -> torch.Tensor:
    """Append ``extra`` rows near the mean row, keeping the dtype.

    Mean and standard deviation are accumulated in float64 over blocks of rows.
    """
    total = torch.zeros(table.shape[1], dtype=torch.float64)
    squares = torch.zeros(table.shape[1], dtype=torch.float64)
    for start in range(0, table.shape[0], STATS_ROWS):
        block = table[start : start + STATS_ROWS].double()
        total += block.sum(0)
        squares += block.square().sum(0)
    n = table.shape[0]
    mean = total / n
    std = ((squares - n * mean.square()) / max(n - 1, 1)).clamp(min=0).sqrt()
    noise = torch.randn(extra, table.shape[1], generator=gen)
    new = (mean.float() + NEW_ROW_NOISE * std.float() * noise).to(table.dtype)
    return torch.cat((table, new))


def qwen3_tensors(
    ckpt: HFCheckpoint, cfg: BackboneConfig, gen: torch.Generator
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (backbone tensor name, tensor) for every backbone weight, shard by shard."""
    extra = len(SPECIAL_TOKENS)
    wanted = [k for k in ckpt.names() if k.startswith("model.") or k == "lm_head.weight"]
    for key in ckpt.by_shard(wanted):
        name = key.removeprefix("model.")
        if "rotary_emb." in name:
            continue  # buffers some exports include; RoPE is computed
        if name == "lm_head.weight" and cfg.tie_embeddings:
            continue
        tensor = ckpt.get(key)
        if name in ("embed_tokens.weight", "lm_head.weight"):
            tensor = extend_rows(tensor, extra, gen)
        yield name, tensor
    if not cfg.tie_embeddings and not ckpt.has("lm_head.weight"):
        raise ExportError(
            f"{ckpt.root}: tie_word_embeddings is false but lm_head.weight is missing"
        )
