"""Whisper encoder (Hugging Face layout) -> Venus ``AudioEncoder`` tensors.

Our parameter names are Whisper's, so conversion strips the encoder's prefix:
``model.encoder.`` (``WhisperForConditionalGeneration``), ``encoder.`` (``WhisperModel``)
or none (a bare ``WhisperEncoder``); any other prefix in front of ``conv1.weight`` works
too. Tensors stream one at a time, in their stored dtype. The decoder is skipped; the
projector is not upstream (the caller initialises it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import torch
from pydantic import ValidationError

from venus.errors import ExportError
from venus.export.convert.upstream import HFCheckpoint
from venus.export.model.config import AudioEncoderConfig

_ENCODER_TENSOR = re.compile(
    r"(conv[12]|layer_norm)\.(weight|bias)"
    r"|embed_positions\.weight"
    r"|layers\.\d+\.(self_attn\.(q|k|v|out)_proj|self_attn_layer_norm|final_layer_norm|fc[12])"
    r"\.(weight|bias)"
)
_CONFIG_KEYS = {  # ours: Whisper's config.json key
    "n_mels": "num_mel_bins",
    "d_model": "d_model",
    "layers": "encoder_layers",
    "heads": "encoder_attention_heads",
    "ffn_dim": "encoder_ffn_dim",
    "max_positions": "max_source_positions",
}


def audio_config_from_whisper(hf_config: dict[str, Any]) -> AudioEncoderConfig:
    """The encoder's shape from a Whisper ``config.json`` (encoder keys are top-level)."""
    missing = [theirs for theirs in _CONFIG_KEYS.values() if theirs not in hf_config]
    if missing:
        raise ExportError(
            f"Whisper config lacks {', '.join(missing)}; pass the config.json of a "
            "WhisperForConditionalGeneration, WhisperModel or WhisperEncoder checkpoint"
        )
    act = hf_config.get("activation_function", "gelu")
    if act != "gelu":
        raise ExportError(f"Whisper activation_function {act!r} is not supported (only 'gelu')")
    try:
        return AudioEncoderConfig(**{ours: hf_config[k] for ours, k in _CONFIG_KEYS.items()})
    except ValidationError as e:
        raise ExportError(f"Whisper config does not fit the audio encoder: {e}") from e


def encoder_prefix(ckpt: HFCheckpoint) -> str:
    """The key prefix of the Whisper encoder's tensors (``model.encoder.``, ``encoder.``...)."""
    keys = ckpt.names()
    found = [
        k.removesuffix("conv1.weight") for k in keys if k.split(".")[-2:] == ["conv1", "weight"]
    ]
    if len(found) != 1:
        raise ExportError(
            f"{ckpt.root}: expected one Whisper encoder (a single '*conv1.weight' tensor), "
            f"found {len(found)}; pass a Whisper checkpoint"
        )
    return found[0]


def whisper_tensors(ckpt: HFCheckpoint) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name relative to ``AudioEncoder``, tensor) for every upstream encoder tensor."""
    prefix = encoder_prefix(ckpt)
    keys = ckpt.names()
    for key in ckpt.by_shard([k for k in keys if k.startswith(prefix)]):
        ours = key[len(prefix) :]
        if not _ENCODER_TENSOR.fullmatch(ours):
            raise ExportError(
                f"{ckpt.root}: unexpected tensor {key} in the Whisper encoder; "
                "is this a Whisper checkpoint?"
            )
        yield ours, ckpt.get(key)
