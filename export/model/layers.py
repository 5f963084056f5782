"""Building blocks shared by the components: norms, rotary embeddings, attention, MLPs.

Shapes: ``[batch, time, channels]`` for activations; key/value caches are
``[batch, kv_heads, time, head_dim]`` (the ONNX Runtime GenAI layout the export uses).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

Activation = Literal["gelu", "gelu_tanh", "silu"]


def activation(name: Activation) -> nn.Module:
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    return nn.SiLU()


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32 (as Qwen3 does), scaled by ``weight``."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos / sin of rotary embeddings for ``positions`` [batch, time] -> [batch, time, head_dim]."""
    inv_freq = 1.0 / (
        theta
        ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    )
    freqs = positions.float()[..., None] * inv_freq  # [B, T, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` [batch, heads, time, head_dim] by cos / sin [batch, time, head_dim]."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class GQAttention(nn.Module):
    """Qwen3 attention: grouped-query heads, RMSNorm on q and k per head, rotary positions.

    ``forward`` takes this layer's cached keys / values and returns them extended by the
    new tokens (the caller owns the cache). ``mask`` is additive, broadcastable to
    ``[batch, heads, new, past + new]``; ``None`` is plain causal attention over the new
    tokens, for a pass with no past (``DecoderStack.hidden_states``), which lets the
    attention kernel skip the masked half instead of reading a mask.
    """

    def __init__(
        self, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float, bias: bool = False
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        past_k: Tensor,
        past_v: Tensor,
        mask: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = torch.cat((past_k, k), dim=2)
        v = torch.cat((past_v, v), dim=2)
        groups = self.heads // self.kv_heads
        kk = k.repeat_interleave(groups, dim=1) if groups > 1 else k
        vv = v.repeat_interleave(groups, dim=1) if groups > 1 else v
        if mask is None:
            if past_k.shape[2]:
                raise ValueError("attention without a mask is for a pass with no past")
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask.to(q.dtype))
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(out), k, v


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    """One Qwen3 decoder layer (pre-norm attention and SwiGLU MLP, residuals)."""

    def __init__(
        self, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int, eps: float
    ) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = GQAttention(hidden, heads, kv_heads, head_dim, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = SwiGLU(hidden, intermediate)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        past_k: Tensor,
        past_v: Tensor,
        mask: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        attn, k, v = self.self_attn(self.input_layernorm(x), cos, sin, past_k, past_v, mask)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


def causal_mask(attention_mask: Tensor, new: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Additive mask [batch, 1, new, past + new] from a 0/1 ``attention_mask`` [batch, past + new].

    New token i may see every kept past token and new tokens 0..i.
    """
    total = attention_mask.shape[1]
    past = total - new
    rows = torch.arange(new, device=attention_mask.device)[:, None] + past
    cols = torch.arange(total, device=attention_mask.device)[None, :]
    allowed = (cols <= rows)[None, None] & attention_mask[:, None, None, :].bool()
    zero = torch.zeros((), dtype=dtype, device=attention_mask.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=attention_mask.device)
    return torch.where(allowed, zero, neg)


class Projections(nn.Module):
    """The four projections of a multi-head attention (``q/k/v/out_proj``), with biases."""

    def __init__(self, d: int, k_bias: bool = True) -> None:
        super().__init__()
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=k_bias)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)


class EncoderLayer(nn.Module):
    """Pre-LayerNorm transformer encoder layer with biased projections.

    Whisper (``k_bias=False``, exact GELU) and SigLIP (all biases, tanh GELU) both fit.
    Parameter names follow the Whisper layout: ``self_attn.{q,k,v,out}_proj``,
    ``self_attn_layer_norm``, ``fc1``, ``fc2``, ``final_layer_norm``.
    """

    def __init__(
        self, d: int, heads: int, ffn: int, eps: float, act: Activation, k_bias: bool = True
    ) -> None:
        super().__init__()
        self.heads = heads
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        self.self_attn = Projections(d, k_bias)
        self.final_layer_norm = nn.LayerNorm(d, eps=eps)
        self.fc1 = nn.Linear(d, ffn)
        self.act = activation(act)
        self.fc2 = nn.Linear(ffn, d)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        h = self.self_attn_layer_norm(x)
        a = self.self_attn

        def heads(y: Tensor) -> Tensor:
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = heads(a.q_proj(h)), heads(a.k_proj(h)), heads(a.v_proj(h))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + a.out_proj(out.transpose(1, 2).reshape(b, t, d))
        y: Tensor = x + self.fc2(self.act(self.fc1(self.final_layer_norm(x))))
        return y


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    """Whisper's fixed sinusoidal position table [length, channels]."""
    log_inc = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-log_inc * torch.arange(channels // 2, dtype=torch.float32))
    scaled = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([scaled.sin(), scaled.cos()], dim=1)
