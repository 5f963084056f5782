"""SigLIP / SigLIP2 vision tower at a fixed resolution, then a perceiver resampler.

One camera frame [batch, 3, image_size, image_size] (RGB in [0, 1]) -> ``cfg.queries``
tokens in the backbone's width. The tower's parameter names follow ``EncoderLayer``'s
Whisper-style layout (``self_attn_layer_norm``, ``fc1``...); ``convert/siglip.py`` renames
the upstream SigLIP names. Patches are flattened as SigLIP2's image processor does: each
patch as (row, column, channel), patches row-major over the grid, so SigLIP2's Linear
patch embedding loads as is (SigLIP's Conv2d is reshaped into it at conversion).

The resampler (MiniCPM-V style) is Venus's own: learned queries cross-attend once over the
projected patch features.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from venus.errors import ExportError
from venus.export.model.config import VisionEncoderConfig
from venus.export.model.layers import EncoderLayer, Projections


def patchify(pixels: Tensor, patch: int) -> Tensor:
    """[batch, channels, H, W] -> [batch, (H/P) * (W/P), P * P * channels], SigLIP2's order."""
    b, c, h, w = pixels.shape
    x = pixels.reshape(b, c, h // patch, patch, w // patch, patch)
    x = x.permute(0, 2, 4, 3, 5, 1)  # [b, grid_h, grid_w, P (row), P (col), c]
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


class CrossAttention(Projections):
    """Multi-head attention of queries [batch, q, dim] over keys / values [batch, kv, dim]."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__(dim)
        self.heads = heads

    def _split(self, y: Tensor) -> Tensor:
        b, t, d = y.shape
        return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, q: Tensor, kv: Tensor) -> Tensor:
        b, t, d = q.shape
        out = F.scaled_dot_product_attention(
            self._split(self.q_proj(q)), self._split(self.k_proj(kv)), self._split(self.v_proj(kv))
        )
        result: Tensor = self.out_proj(out.transpose(1, 2).reshape(b, t, d))
        return result


class Resampler(nn.Module):
    """Perceiver resampler: ``queries`` learned tokens attend over patch features.

    features [batch, patches, in_dim] -> [batch, queries, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, queries: int, heads: int, eps: float) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.empty(queries, out_dim))
        nn.init.trunc_normal_(self.queries, std=0.02)
        self.kv_proj = nn.Linear(in_dim, out_dim, bias=False)
        self.ln_q = nn.LayerNorm(out_dim, eps=eps)
        self.ln_kv = nn.LayerNorm(out_dim, eps=eps)
        self.attn = CrossAttention(out_dim, heads)
        self.ln_post = nn.LayerNorm(out_dim, eps=eps)
        self.proj = nn.Linear(out_dim, out_dim)

    def forward(self, feats: Tensor) -> Tensor:
        kv = self.ln_kv(self.kv_proj(feats))
        q = self.ln_q(self.queries)[None].expand(feats.shape[0], -1, -1)
        out: Tensor = self.proj(self.ln_post(self.attn(q, kv)))
        return out


class VisionEncoder(nn.Module):
    """SigLIP tower (patch embedding, learned positions, encoder, post norm) + resampler."""

    mean: Tensor  # [channels, 1, 1]
    std: Tensor

    def __init__(self, cfg: VisionEncoderConfig, out_dim: int) -> None:
        super().__init__()
        if cfg.image_size % cfg.patch_size:
            raise ExportError(
                f"vision.image_size {cfg.image_size} is not a multiple of vision.patch_size "
                f"{cfg.patch_size}; pick an image size the patches tile exactly"
            )
        if cfg.hidden_size % cfg.heads:
            raise ExportError(f"vision.hidden_size {cfg.hidden_size} is not a multiple of heads")
        if out_dim % cfg.resampler_heads:
            raise ExportError(
                f"resampler width {out_dim} is not a multiple of "
                f"vision.resampler_heads {cfg.resampler_heads}"
            )
        self.cfg = cfg
        p, h = cfg.patch_size, cfg.hidden_size
        self.patch_embedding = nn.Linear(cfg.channels * p * p, h)
        self.position_embedding = nn.Embedding(cfg.grid * cfg.grid, h)
        self.layers = nn.ModuleList(
            EncoderLayer(
                h,
                cfg.heads,
                cfg.intermediate_size,
                cfg.layer_norm_eps,
                act="gelu_tanh",
                k_bias=True,
            )
            for _ in range(cfg.layers)
        )
        self.post_layernorm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.resampler = Resampler(h, out_dim, cfg.queries, cfg.resampler_heads, cfg.layer_norm_eps)
        # Normalisation constants come from the config, so they stay out of the state dict.
        self.register_buffer("mean", torch.tensor(cfg.image_mean)[:, None, None], persistent=False)
        self.register_buffer("std", torch.tensor(cfg.image_std)[:, None, None], persistent=False)

    def encode_tower(self, pixels: Tensor) -> Tensor:
        """Normalised pixels [batch, C, size, size] -> [batch, grid * grid, hidden].

        Equals the Hugging Face SigLIP / SigLIP2 vision model's ``last_hidden_state``.
        """
        size = self.cfg.image_size
        if pixels.shape[-2:] != (size, size):
            raise ExportError(
                f"image is {tuple(pixels.shape[-2:])} pixels, the vision encoder takes "
                f"{size}x{size}; resize frames before encoding"
            )
        x = self.patch_embedding(patchify(pixels, self.cfg.patch_size))
        x = x + self.position_embedding.weight
        for layer in self.layers:
            x = layer(x)
        out: Tensor = self.post_layernorm(x)
        return out

    def forward(self, images: Tensor) -> Tensor:
        """RGB frames [batch, 3, size, size] in [0, 1] -> tokens [batch, queries, out_dim]."""
        pixels = (images - self.mean) / self.std
        out: Tensor = self.resampler(self.encode_tower(pixels))
        return out
