"""SigLIP / SigLIP2 vision tower (Hugging Face layout) -> Venus ``VisionEncoder`` tensors.

Two upstream kinds:

- SigLIP2 NaFlex (``model_type`` ``siglip2`` / ``siglip2_vision_model``): a Linear patch
  embedding over patches flattened as (row, column, channel), which is our layout, and a
  ``side x side`` position table that Hugging Face resizes to each image's patch grid
  (bilinear, antialiased). We resize it once here, to the fixed grid.
- Fixed-resolution SigLIP (``model_type`` ``siglip`` / ``siglip_vision_model``): a Conv2d
  patch embedding, reshaped into our Linear; the position table is used as is when it
  matches the grid, else resized bicubically as Hugging Face's
  ``interpolate_pos_encoding`` does.

Full ``SiglipModel`` / ``Siglip2Model`` checkpoints (``vision_model.`` prefix) and bare
vision models (no prefix) both work. The attention-pooling ``head`` is skipped; the
resampler is not upstream (the caller initialises it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any, Literal

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from pydantic import ValidationError

from venus.errors import ExportError
from venus.export.convert.upstream import HFCheckpoint
from venus.export.model.config import VisionEncoderConfig

Kind = Literal["siglip", "siglip2"]
SIGLIP2_IMAGE_SIZE = 448  # NaFlex checkpoints have no fixed size; Venus runs at 448 px
_PATCH = "embeddings.patch_embedding.weight"
# Hugging Face's defaults, for keys a hub config.json leaves out.
_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_channels": 3,
    "patch_size": 16,
    "layer_norm_eps": 1e-6,
    "hidden_act": "gelu_pytorch_tanh",
    "image_size": 224,
}
_LAYER = re.compile(r"encoder\.layers\.(\d+)\.(.+)")
_LAYER_RENAMES = {
    "layer_norm1.": "self_attn_layer_norm.",
    "layer_norm2.": "final_layer_norm.",
    "mlp.fc1.": "fc1.",
    "mlp.fc2.": "fc2.",
    "self_attn.": "self_attn.",
}


def vision_section(hf_config: dict[str, Any]) -> tuple[Kind, dict[str, Any]]:
    """(kind, the vision tower's config) from a full or vision-only ``config.json``."""
    model_type = hf_config.get("model_type")
    if model_type in ("siglip", "siglip2"):
        return model_type, {**_DEFAULTS, **hf_config.get("vision_config", {})}
    if model_type in ("siglip_vision_model", "siglip2_vision_model"):
        return model_type.removesuffix("_vision_model"), {**_DEFAULTS, **hf_config}
    raise ExportError(
        f"model_type {model_type!r} is not a SigLIP or SigLIP2 checkpoint "
        "(expected siglip, siglip2, siglip_vision_model or siglip2_vision_model)"
    )


def _square(value: Any, what: str) -> int:
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise ExportError(f"SigLIP {what} {value} is not square; only square sizes work")
        value = value[0]
    return int(value)


def vision_config_from_siglip(
    hf_config: dict[str, Any], image_size: int | None = None
) -> VisionEncoderConfig:
    """The tower's shape from a SigLIP / SigLIP2 ``config.json``.

    ``image_size`` (pixels) defaults to 448 for SigLIP2 NaFlex (its config has none) and
    to the config's for SigLIP. Resampler fields keep ``VisionEncoderConfig``'s defaults.
    """
    kind, vc = vision_section(hf_config)
    if vc["hidden_act"] != "gelu_pytorch_tanh":
        raise ExportError(f"SigLIP hidden_act {vc['hidden_act']!r} is not supported")
    if image_size is None:
        image_size = SIGLIP2_IMAGE_SIZE if kind == "siglip2" else _square(vc["image_size"], "size")
    try:
        return VisionEncoderConfig(
            image_size=image_size,
            patch_size=_square(vc["patch_size"], "patch_size"),
            channels=vc["num_channels"],
            hidden_size=vc["hidden_size"],
            layers=vc["num_hidden_layers"],
            heads=vc["num_attention_heads"],
            intermediate_size=vc["intermediate_size"],
            layer_norm_eps=vc["layer_norm_eps"],
        )
    except ValidationError as e:
        raise ExportError(f"SigLIP config does not fit the vision encoder: {e}") from e


def resize_positions(table: torch.Tensor, grid: int, kind: Kind) -> torch.Tensor:
    """Position table [side * side, hidden] -> [grid * grid, hidden], as Hugging Face resizes.

    SigLIP2: bilinear, antialiased; SigLIP: bicubic. Computed in float32, returned in the
    table's dtype.
    """
    side = math.isqrt(table.shape[0])
    if side * side != table.shape[0]:
        raise ExportError(f"position table of {table.shape[0]} rows is not a square grid")
    if side == grid:
        return table
    hidden = table.shape[1]
    image = table.float().reshape(side, side, hidden).permute(2, 0, 1)[None]
    if kind == "siglip2":
        image = F.interpolate(
            image, (grid, grid), mode="bilinear", align_corners=False, antialias=True
        )
    else:
        image = F.interpolate(image, (grid, grid), mode="bicubic", align_corners=False)
    return image[0].permute(1, 2, 0).reshape(grid * grid, hidden).to(table.dtype)


def _rename(rel: str) -> str | None:
    """Our name for an upstream tower tensor (prefix stripped); None to skip it."""
    if rel.startswith("head.") or rel == "embeddings.position_ids":
        return None
    if rel in (_PATCH, "embeddings.patch_embedding.bias"):
        return rel.removeprefix("embeddings.")
    if rel == "embeddings.position_embedding.weight":
        return "position_embedding.weight"
    if rel in ("post_layernorm.weight", "post_layernorm.bias"):
        return rel
    m = _LAYER.fullmatch(rel)
    if m:
        for theirs, ours in _LAYER_RENAMES.items():
            if m.group(2).startswith(theirs):
                return f"layers.{m.group(1)}.{ours}{m.group(2).removeprefix(theirs)}"
    raise ExportError(f"unexpected SigLIP vision tensor {rel}; is this a SigLIP checkpoint?")


def siglip_tensors(
    ckpt: HFCheckpoint, cfg: VisionEncoderConfig
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name relative to ``VisionEncoder``, tensor) for every upstream tower tensor.

    Dtypes stay as stored; the patch embedding comes out as a Linear weight
    [hidden, P * P * channels] and the position table as [grid * grid, hidden].
    """
    kind, _ = vision_section(ckpt.config)
    keys = ckpt.names()
    found = [k.removesuffix(_PATCH) for k in keys if k == _PATCH or k.endswith("." + _PATCH)]
    if len(found) != 1:
        raise ExportError(
            f"{ckpt.root}: expected one vision tower (a single '*{_PATCH}'), found {len(found)}"
        )
    prefix = found[0]
    for key in ckpt.by_shard([k for k in keys if k.startswith(prefix)]):
        ours = _rename(key[len(prefix) :])
        if ours is None:
            continue
        tensor = ckpt.get(key)
        if ours == "patch_embedding.weight" and tensor.ndim == 4:
            # Conv2d [hidden, C, P, P] -> Linear over (row, column, channel) patches.
            tensor = tensor.permute(0, 2, 3, 1).reshape(tensor.shape[0], -1)
        elif ours == "position_embedding.weight":
            tensor = resize_positions(tensor, cfg.grid, kind)
        yield ours, tensor
