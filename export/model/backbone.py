"""Qwen3 decoder backbone taking ``inputs_embeds``, returning logits and last hidden states.

``forward`` is the exported signature (ONNX Runtime GenAI naming): embeddings,
``attention_mask`` over past + new tokens, ``position_ids``, and per-layer past keys /
values ``[batch, kv_heads, past, head_dim]``; it returns logits, the final hidden states
(for the speech decoder) and the present keys / values. ``KVCache`` is the per-stream
state object for step-by-step use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from venus.export.model.config import BackboneConfig, SpeechDecoderConfig
from venus.export.model.layers import DecoderLayer, RMSNorm, causal_mask, rope_cos_sin


@dataclass
class KVCache:
    """One stream's backbone state: per-layer keys / values and the tokens they cover."""

    keys: list[Tensor]
    values: list[Tensor]
    positions: int = 0  # next position id
    mask: Tensor = field(default_factory=lambda: torch.zeros(1, 0, dtype=torch.int64))

    @property
    def length(self) -> int:
        return self.keys[0].shape[2]

    def reset(self) -> None:
        for i, k in enumerate(self.keys):
            self.keys[i] = k[:, :, :0]
            self.values[i] = self.values[i][:, :, :0]
        self.positions = 0
        self.mask = self.mask[:, :0]


@dataclass(frozen=True)
class DecoderShape:
    """The sizes a Qwen3-style decoder stack needs (backbone and speech decoder share it)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rope_theta: float
    eps: float
    tie_embeddings: bool

    @classmethod
    def of(
        cls, cfg: BackboneConfig | SpeechDecoderConfig, vocab: int, tie_embeddings: bool
    ) -> DecoderShape:
        """The shape a backbone or speech-decoder config describes (same field names)."""
        return cls(
            vocab=vocab,
            hidden=cfg.hidden_size,
            layers=cfg.layers,
            heads=cfg.heads,
            kv_heads=cfg.kv_heads,
            head_dim=cfg.head_dim,
            intermediate=cfg.intermediate_size,
            rope_theta=cfg.rope_theta,
            eps=cfg.rms_norm_eps,
            tie_embeddings=tie_embeddings,
        )


class DecoderStack(nn.Module):
    """Token embedding, Qwen3 decoder layers, final norm and LM head, with a KV cache."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.shape = shape
        self.embed_tokens = nn.Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(
                shape.hidden,
                shape.heads,
                shape.kv_heads,
                shape.head_dim,
                shape.intermediate,
                shape.eps,
            )
            for _ in range(shape.layers)
        )
        self.norm = RMSNorm(shape.hidden, shape.eps)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        if shape.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def new_cache(self, batch: int = 1) -> KVCache:
        p = next(self.parameters())
        shape = (batch, self.shape.kv_heads, 0, self.shape.head_dim)
        return KVCache(
            keys=[p.new_zeros(shape) for _ in self.layers],
            values=[p.new_zeros(shape) for _ in self.layers],
            mask=torch.zeros(batch, 0, dtype=torch.int64, device=p.device),
        )

    def embed(self, input_ids: Tensor) -> Tensor:
        out: Tensor = self.embed_tokens(input_ids)
        return out

    def forward(
        self,
        inputs_embeds: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        past_keys: list[Tensor],
        past_values: list[Tensor],
    ) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
        """-> (logits, hidden_states, present_keys, present_values)."""
        x = inputs_embeds
        cos, sin = rope_cos_sin(position_ids, self.shape.head_dim, self.shape.rope_theta)
        mask = causal_mask(attention_mask, x.shape[1], dtype=torch.float32)
        present_k, present_v = [], []
        for layer, pk, pv in zip(self.layers, past_keys, past_values, strict=True):
            x, k, v = layer(x, cos, sin, pk, pv, mask)
            present_k.append(k)
            present_v.append(v)
        hidden = self.norm(x)
        return self.lm_head(hidden), hidden, present_k, present_v

    def hidden_states(self, inputs_embeds: Tensor) -> Tensor:
        """Final hidden states [batch, length, hidden] of whole rows padded on the right,
        from position 0 with no cache and without the LM head: training's teacher-forced
        pass, whose caller applies ``lm_head`` only where it has targets (a speech row's
        logits over the 6,563 units at every padded position were a third of a CPU step).
        Attention is plain causal: a row's tokens never see its padding, which comes after
        them; the padding's own states are computed and read by nothing."""
        b, t, _ = inputs_embeds.shape
        positions = torch.arange(t, device=inputs_embeds.device)[None].expand(b, t)
        cos, sin = rope_cos_sin(positions, self.shape.head_dim, self.shape.rope_theta)
        empty = inputs_embeds.new_zeros(b, self.shape.kv_heads, 0, self.shape.head_dim)
        x = inputs_embeds
        for layer in self.layers:
            x, _k, _v = layer(x, cos, sin, empty, empty, None)
        out: Tensor = self.norm(x)
        return out

    def step(self, inputs_embeds: Tensor, cache: KVCache) -> tuple[Tensor, Tensor]:
        """Append ``inputs_embeds`` [batch, new, hidden] to the stream; -> (logits, hidden)."""
        b, t, _ = inputs_embeds.shape
        positions = torch.arange(cache.positions, cache.positions + t, device=inputs_embeds.device)
        positions = positions[None].expand(b, t)
        mask = torch.cat(
            (cache.mask, torch.ones(b, t, dtype=torch.int64, device=inputs_embeds.device)), dim=1
        )
        logits, hidden, keys, values = self(
            inputs_embeds, mask, positions, cache.keys, cache.values
        )
        cache.keys, cache.values, cache.mask = keys, values, mask
        cache.positions += t
        return logits, hidden


class Backbone(DecoderStack):
    """The Qwen3 backbone; its vocabulary is the upstream one plus the special tokens."""

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__(DecoderShape.of(cfg, cfg.total_vocab, cfg.tie_embeddings))
        self.cfg = cfg
