"""Vision encoder: parity with Hugging Face SigLIP2 (NaFlex) and SigLIP towers, shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import (
    Siglip2Config,
    Siglip2Model,
    Siglip2VisionConfig,
    Siglip2VisionModel,
    SiglipConfig,
    SiglipModel,
    SiglipVisionConfig,
    SiglipVisionModel,
)

from venus.export.convert.siglip import siglip_tensors, vision_config_from_siglip
from venus.export.convert.upstream import HFCheckpoint
from venus.export.model.config import PRESETS
from venus.export.model.vision import VisionEncoder

TOL = 1e-5
TOWER = {  # odd sizes on purpose, unlike any real SigLIP
    "hidden_size": 36,
    "num_attention_heads": 3,
    "num_hidden_layers": 2,
    "intermediate_size": 52,
    "patch_size": 8,
}
TEXT = {
    "hidden_size": 36,
    "num_attention_heads": 3,
    "num_hidden_layers": 1,
    "intermediate_size": 52,
    "vocab_size": 100,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def convert_image_to_patches(image: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Transcribed from transformers' ``image_processing_siglip2`` (it needs torchvision)."""
    num_channels, image_height, image_width = image.shape
    num_patches_height = image_height // patch_size
    num_patches_width = image_width // patch_size
    patched_image = image.reshape(
        num_channels, num_patches_height, patch_size, num_patches_width, patch_size
    )
    patched_image = patched_image.permute(1, 3, 2, 4, 0)
    return patched_image.reshape(num_patches_height * num_patches_width, -1)


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


def perturb(model: torch.nn.Module) -> None:
    """Move every parameter off its init (zero biases, unit norms) so names are all tested."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def save(model: torch.nn.Module, path: Path) -> torch.nn.Module:
    """Perturb, save (safetensors) and return the vision tower to compare against."""
    perturb(model)
    model.save_pretrained(path)  # type: ignore[operator]
    tower = getattr(model, "vision_model", model)
    assert isinstance(tower, torch.nn.Module)
    return tower.eval()


def convert(path: Path, image_size: int | None) -> VisionEncoder:
    with HFCheckpoint(path) as ckpt:
        cfg = vision_config_from_siglip(ckpt.config, image_size=image_size)
        encoder = VisionEncoder(cfg, out_dim=32)
        result = encoder.load_state_dict(dict(siglip_tensors(ckpt, cfg)), strict=False)
    assert not result.unexpected_keys
    assert all(k.startswith("resampler.") for k in result.missing_keys)
    return encoder.eval()


@pytest.mark.parametrize("full", [True, False], ids=["Siglip2Model", "Siglip2VisionModel"])
@pytest.mark.parametrize("image_size", [32, 48, 24], ids=["grid4", "grid6-up", "grid3-down"])
def test_siglip2_tower_matches_hf(tmp_path: Path, full: bool, image_size: int) -> None:
    torch.manual_seed(0)
    vision = Siglip2VisionConfig(num_patches=16, **TOWER)  # stored position table: 4 x 4
    model = (
        Siglip2Model(Siglip2Config(vision_config=vision.to_dict(), text_config=TEXT))
        if full
        else Siglip2VisionModel(vision)
    )
    tower = save(model, tmp_path)
    ours = convert(tmp_path, image_size)
    grid = image_size // 8
    pixels = torch.randn(2, 3, image_size, image_size)
    patches = torch.stack([convert_image_to_patches(img, 8) for img in pixels])
    with torch.no_grad():
        ref = tower(
            pixel_values=patches,
            pixel_attention_mask=torch.ones(2, grid * grid, dtype=torch.long),
            spatial_shapes=torch.tensor([[grid, grid]] * 2),
        ).last_hidden_state
        out = ours.encode_tower(pixels)
    assert out.shape == ref.shape == (2, grid * grid, 36)
    assert rel_err(out, ref) <= TOL


@pytest.mark.parametrize("full", [True, False], ids=["SiglipModel", "SiglipVisionModel"])
@pytest.mark.parametrize("image_size", [32, 48], ids=["native", "interpolated"])
def test_siglip_tower_matches_hf(tmp_path: Path, full: bool, image_size: int) -> None:
    torch.manual_seed(0)
    vision = SiglipVisionConfig(image_size=32, **TOWER)
    model = (
        SiglipModel(SiglipConfig(vision_config=vision.to_dict(), text_config=TEXT))
        if full
        else SiglipVisionModel(vision)
    )
    tower = save(model, tmp_path)
    ours = convert(tmp_path, None if image_size == 32 else image_size)
    pixels = torch.randn(2, 3, image_size, image_size)
    with torch.no_grad():
        ref = tower(pixel_values=pixels, interpolate_pos_encoding=image_size != 32)
        out = ours.encode_tower(pixels)
    assert out.shape == ref.last_hidden_state.shape
    assert rel_err(out, ref.last_hidden_state) <= TOL


def test_bf16_upstream_stays_bf16(tmp_path: Path) -> None:
    model = Siglip2VisionModel(Siglip2VisionConfig(num_patches=16, **TOWER)).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    with HFCheckpoint(tmp_path) as ckpt:
        cfg = vision_config_from_siglip(ckpt.config, image_size=48)
        tensors = dict(siglip_tensors(ckpt, cfg))
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    assert tensors["position_embedding.weight"].shape == (36, 36)  # resized to 6 x 6
    assert tensors["patch_embedding.weight"].shape == (36, 8 * 8 * 3)
    assert not any(k.startswith("head.") for k in tensors)


def test_tiny_frame_gives_query_tokens() -> None:
    cfg = PRESETS["tiny"]()
    assert cfg.vision is not None
    encoder = VisionEncoder(cfg.vision, cfg.backbone.hidden_size).eval()
    size = cfg.vision.image_size
    with torch.no_grad():
        tokens = encoder(torch.rand(1, 3, size, size))
    assert tokens.shape == (1, cfg.vision.queries, cfg.backbone.hidden_size)
    assert torch.isfinite(tokens).all()
