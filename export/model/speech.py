"""Speech decoder: a small Qwen3-style LM conditioned on backbone hidden states.

Per chunk of a spoken reply, the backbone hidden states of the text tokens spoken in
that chunk are projected (``cond_proj``) and appended to the speech decoder's context,
followed by the ``start`` token; it then emits up to ``speech_tokens_per_chunk`` S3
tokens (25 Hz; the daemon allows half as many more in the chunk that ends a reply),
stopping early at ``end``. One ``KVCache`` holds a whole reply, so
every chunk sees the text and speech of the chunks before it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from venus.export.model.backbone import DecoderShape, DecoderStack, KVCache
from venus.export.model.config import SpeechDecoderConfig


class SpeechDecoder(DecoderStack):
    def __init__(self, cfg: SpeechDecoderConfig, cond_dim: int) -> None:
        super().__init__(DecoderShape.of(cfg, cfg.vocab, tie_embeddings=False))
        self.cfg = cfg
        self.cond_proj = nn.Linear(cond_dim, cfg.hidden_size)

    def condition(self, backbone_hidden: Tensor) -> Tensor:
        """Backbone hidden states [batch, n, cond_dim] -> decoder inputs [batch, n, hidden]."""
        out: Tensor = self.cond_proj(backbone_hidden)
        return out

    @torch.no_grad()
    def speak_chunk(self, backbone_hidden: Tensor, cache: KVCache, max_tokens: int) -> Tensor:
        """Greedy reference decode of one chunk: -> S3 tokens [batch, <= max_tokens].

        Stops when every row has emitted ``end``; rows that ended earlier are padded
        with ``end``. The engines' sampler replaces greedy choice in the daemon.
        """
        b = backbone_hidden.shape[0]
        start = torch.full((b, 1), self.cfg.start_token, device=backbone_hidden.device)
        x = torch.cat((self.condition(backbone_hidden), self.embed(start)), dim=1)
        out: list[Tensor] = []
        done = torch.zeros(b, dtype=torch.bool, device=backbone_hidden.device)
        for _ in range(max_tokens):
            logits, _ = self.step(x, cache)
            scores = logits[:, -1].clone()
            scores[:, self.cfg.start_token] = float("-inf")  # input-only, never emitted
            token = scores.argmax(-1)
            token = torch.where(done, torch.full_like(token, self.cfg.end_token), token)
            out.append(token)
            done |= token == self.cfg.end_token
            if bool(done.all()):
                break
            x = self.embed(token[:, None])
        return torch.stack(out, dim=1)
