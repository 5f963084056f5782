"""`venus model info`: sizes checked against the reference implementations and published sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    Qwen3Config,
    Qwen3ForCausalLM,
    SiglipVisionConfig,
    SiglipVisionModel,
    WhisperConfig,
    WhisperModel,
)

from venus.export.info import CONTEXT_TOKENS, DECODE_STEPS, MARKERS, model_info
from venus.export.model.config import PRESETS, SPECIAL_TOKENS
from venus.export.model.venus import VenusModel

VENUS = Path(sys.executable).with_name("venus")


def meta_params(model_cls: type, config: object) -> int:
    with torch.device("meta"):
        model = model_cls(config)
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.fixture(scope="module")
def big() -> dict[str, object]:
    return model_info(PRESETS["venus-9b"]())


def test_tiny_counts_equal_the_real_modules() -> None:
    cfg = PRESETS["tiny"]()
    info = model_info(cfg)
    model = VenusModel(cfg)
    for name, module in model.components().items():
        real = sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
        assert info["components"][name]["params"] == real, name
    assert info["total"]["weight_bytes"]["fp32"] < 20e6  # "a few MB"


def test_backbone_is_qwen3_8b(big: dict) -> None:
    # Qwen3-8B's real config, counted by transformers itself on the meta device.
    ref = meta_params(
        Qwen3ForCausalLM,
        Qwen3Config(
            vocab_size=151936,
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=False,
        ),
    )
    ours = big["components"]["backbone"]["params"]
    assert ours == ref + 2 * len(SPECIAL_TOKENS) * 4096  # plus the special-token rows
    assert abs(ref / 8.19e9 - 1) < 0.005  # the model card: 8.2B parameters


def test_audio_encoder_is_whisper_medium(big: dict) -> None:
    whisper = WhisperConfig(
        num_mel_bins=80,
        d_model=1024,
        encoder_layers=24,
        decoder_layers=24,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
        vocab_size=51865,
    )
    with torch.device("meta"):
        hf = WhisperModel(whisper)
    encoder = sum(p.numel() for p in hf.encoder.parameters())
    total = sum(p.numel() for p in hf.parameters())
    assert abs(total / 769e6 - 1) < 0.01  # Whisper paper, table 1: medium = 769M
    projector = 1024 * 4096 + 4096 + 4096 * 4096 + 4096
    assert big["components"]["audio_encoder"]["params"] == encoder + projector


def test_vision_tower_is_siglip_so400m(big: dict) -> None:
    cfg = PRESETS["venus-9b"]().vision
    assert cfg is not None
    siglip = SiglipVisionConfig(
        hidden_size=1152,
        intermediate_size=4304,
        num_hidden_layers=27,
        num_attention_heads=16,
        image_size=448,
        patch_size=14,
    )
    with torch.device("meta"):
        hf = SiglipVisionModel(siglip)
    tower = sum(
        p.numel()
        for n, p in hf.named_parameters()
        if "head." not in n.split("vision_model.")[-1][:5]
    )
    assert abs(tower / 400e6 - 1) < 0.1  # "so400m": shape-optimised ~400M
    with torch.device("meta"):
        ours = VenusModel(PRESETS["venus-9b"]()).vision_encoder
    assert ours is not None
    ours_tower = sum(p.numel() for n, p in ours.named_parameters() if not n.startswith("resampler"))
    assert ours_tower == tower


def test_backbone_flops_follow_the_workload(big: dict) -> None:
    cfg = PRESETS["venus-9b"]()
    b = cfg.backbone
    per_layer = (
        b.hidden_size * b.head_dim * (2 * b.heads + 2 * b.kv_heads)
        + 3 * b.hidden_size * b.intermediate_size
    )
    prefill = cfg.audio_tokens_per_chunk + MARKERS + cfg.vision.queries  # type: ignore[union-attr]
    tokens = prefill + DECODE_STEPS
    linear = 2 * tokens * (b.layers * per_layer + b.hidden_size * b.total_vocab)
    attention = 4 * tokens * (CONTEXT_TOKENS + prefill) * b.heads * b.head_dim * b.layers
    counted = big["components"]["backbone"]["chunk_flops"]
    assert abs(counted / (linear + attention) - 1) < 0.05


def test_decode_moves_the_weights_once_per_step(big: dict) -> None:
    c = big["components"]["backbone"]
    weights = (
        c["params"] - 4096 * PRESETS["venus-9b"]().backbone.total_vocab
    )  # embedding: rows only
    # 1 prefill pass + DECODE_STEPS passes read every weight; int8: one byte each.
    assert c["chunk_bytes_moved"]["int8"] >= weights * (1 + DECODE_STEPS)


def test_layers_counted_once_stand_for_every_layer_run() -> None:
    """model_info runs one and two layers of each stack deeper than two; on tiny widths
    with every stack deeper (both flow counts too), that equals running every layer."""
    from venus.export.info import LAYER_COUNTS, _chunk_costs, _measure, _with_layers

    cfg = PRESETS["tiny"]()
    cfg = _with_layers(cfg, {(section, name): 3 for section, name, _ in LAYER_COUNTS})
    every = _measure(cfg)
    assert _chunk_costs(cfg) == every
    assert (
        every["flow_decoder"]
        != _measure(_with_layers(cfg, {("flow", "encoder_layers"): 1}))["flow_decoder"]
    )  # the counts do change what is counted


def test_audio_frontend_has_no_vision() -> None:
    info = model_info(PRESETS["tiny-audio"]())
    assert "vision_encoder" not in info["components"]


def test_cli_table_and_json(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(VENUS), "model", "info", "tiny"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for name in (
        "audio_encoder",
        "vision_encoder",
        "backbone",
        "speech_decoder",
        "flow_decoder",
        "vocoder",
        "total",
    ):
        assert name in out.stdout
    data = json.loads(
        subprocess.run(
            [str(VENUS), "model", "info", "tiny", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert data["components"]["backbone"]["params"] > 0
    bad = subprocess.run(
        [str(VENUS), "model", "info", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 1
    assert "neither a preset" in bad.stderr
