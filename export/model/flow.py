"""Chunk-causal flow-matching decoder: S3 speech tokens (25 Hz) -> 80-bin mel (50 Hz).

Token encoder: embedding, a right-context ("pre-lookahead") conv so each token sees the
next ``lookahead_tokens`` tokens, then transformer layers with chunk-causal attention
and rotary positions within the utterance. Its output, repeated ``frames_per_token``
times and projected, is ``mu``. The estimator then integrates the velocity field from
``noise * temperature`` (t = 0) to the mel (t = 1) in ``euler_steps`` Euler steps, one
*group* of frames at a time, attending to the last ``prompt_frames`` output frames of the
previous group as a prefix (zeros before the first) so groups join continuously.

Output rule (streaming and one-shot alike): tokens are fed in chunks of ``chunk_tokens``
(L = ``lookahead_tokens``). Every non-final step emits the mel of all tokens whose
lookahead is complete and holds back the chunk's last L tokens (and their noise); the
``final`` step emits every token left, padding the lookahead with zeros. So with
C = ``chunk_tokens`` the groups are ``[0, C-L), [C-L, 2C-L), ...`` and the last group
runs to the end: 100 tokens give 44, 50, 50, 56 frames. A group attends to itself and
all earlier groups. An empty final chunk is allowed (it flushes the L held-back tokens
as their own group, so it then differs slightly from the one-shot path).

Mel and noise are ``[batch, mel_bins, frames]`` (log-mel, 50 Hz); tokens ``[batch, n]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from venus.export.model.config import FlowDecoderConfig
from venus.export.model.layers import DecoderLayer, RMSNorm, rope_cos_sin

CHUNK_TOKENS = 25  # 1 s of S3 tokens at 25 Hz
ROPE_THETA = 1e4  # rotary base for positions within one utterance (a few thousand tokens)
NORM_EPS = 1e-6
TIME_SCALE = 1000.0  # t in [0, 1] spread over the sinusoid periods, as diffusion models do
NOISE_SEED_STRIDE = 1_000_003  # prime: seeds of (seed, chunk) pairs never collide in practice


def chunk_noise(
    cfg: FlowDecoderConfig, batch: int, tokens: int, seed: int, chunk_index: int
) -> Tensor:
    """Start noise for chunk ``chunk_index`` of ``tokens`` tokens -> [batch, mel_bins, frames].

    Deterministic in (seed, chunk_index) and independent of the other chunks, so a stream
    and the one-shot path (``utterance_noise``) see the same noise.
    """
    gen = torch.Generator().manual_seed(seed * NOISE_SEED_STRIDE + chunk_index)
    frames = tokens * cfg.frames_per_token
    return torch.randn(batch, cfg.mel_bins, frames, generator=gen)


def utterance_noise(
    cfg: FlowDecoderConfig, batch: int, tokens: int, seed: int, chunk_tokens: int = CHUNK_TOKENS
) -> Tensor:
    """The per-chunk noise of a ``tokens``-token utterance, concatenated -> [B, mel_bins, 2n]."""
    sizes = [min(chunk_tokens, tokens - s) for s in range(0, tokens, chunk_tokens)]
    parts = [chunk_noise(cfg, batch, m, seed, i) for i, m in enumerate(sizes)]
    return torch.cat(parts, dim=-1) if parts else torch.zeros(batch, cfg.mel_bins, 0)


def token_groups(n: int, chunk_tokens: int, lookahead: int) -> list[tuple[int, int]]:
    """Token ranges [start, end) emitted together: ends at k*C - L, the last one at n.

    Chunk k (tokens [kC, kC + C)) emits up to kC + C - L unless it is the final chunk,
    which emits everything left; the final chunk of n tokens is chunk (n - 1) // C.
    """
    if n == 0:
        return []
    last_chunk = (n - 1) // chunk_tokens
    starts = [0, *(k * chunk_tokens - lookahead for k in range(1, last_chunk + 1))]
    return list(zip(starts, [*starts[1:], n], strict=True))


def timestep_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal embedding of flow time ``t`` [batch] in [0, 1] -> [batch, dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / max(half, 1))
    args = TIME_SCALE * t.float()[:, None] * freqs[None]
    return F.pad(torch.cat((args.sin(), args.cos()), dim=-1), (0, dim % 2)).to(t.dtype)


def _layers(cfg: FlowDecoderConfig, count: int) -> nn.ModuleList:
    hd = cfg.d_model // cfg.heads
    return nn.ModuleList(
        DecoderLayer(cfg.d_model, cfg.heads, cfg.heads, hd, cfg.ffn_dim, NORM_EPS)
        for _ in range(count)
    )


class FlowEstimator(nn.Module):
    """Velocity v(x_t, t | mu, prompt) for the frames of one group."""

    def __init__(self, cfg: FlowDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.in_proj = nn.Linear(2 * cfg.mel_bins, d)
        self.prompt_proj = nn.Linear(cfg.mel_bins, d)
        self.time_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.layers = _layers(cfg, cfg.estimator_layers)
        self.norm = RMSNorm(d, NORM_EPS)
        self.out_proj = nn.Linear(d, cfg.mel_bins)

    def forward(self, x: Tensor, t: Tensor, mu: Tensor, prompt: Tensor) -> Tensor:
        """x, mu [B, F, mel_bins], t [B], prompt [B, P, mel_bins] -> velocity [B, F, mel_bins]."""
        b, p = x.shape[0], prompt.shape[1]
        h = torch.cat((self.prompt_proj(prompt), self.in_proj(torch.cat((x, mu), dim=-1))), 1)
        h = h + self.time_mlp(timestep_embedding(t, self.cfg.d_model))[:, None]
        pos = torch.arange(h.shape[1], device=h.device)[None].expand(b, -1)
        cos, sin = rope_cos_sin(pos, self.cfg.d_model // self.cfg.heads, ROPE_THETA)
        empty = h.new_zeros(b, self.cfg.heads, 0, self.cfg.d_model // self.cfg.heads)
        full = h.new_zeros(1, 1, 1, 1)  # additive mask: every frame sees prefix and group
        for layer in self.layers:
            h, _, _ = layer(h, cos, sin, empty, empty, full)
        out: Tensor = self.out_proj(self.norm(h[:, p:]))
        return out


@dataclass
class FlowState:
    """One stream's flow state. ``reset()`` between utterances (or on barge-in)."""

    keys: list[Tensor]  # per encoder layer [B, heads, emitted_tokens, head_dim]
    values: list[Tensor]
    pending_tokens: Tensor  # [B, <= lookahead] int64: received, mel not yet emitted
    pending_noise: Tensor  # [B, mel_bins, frames of pending_tokens]
    prompt: Tensor  # [B, mel_bins, prompt_frames]: last output frames, zeros at start
    chunk_tokens: int
    finished: bool = False

    @property
    def emitted_tokens(self) -> int:
        return self.keys[0].shape[2]

    def reset(self) -> None:
        self.keys = [k[:, :, :0] for k in self.keys]
        self.values = [v[:, :, :0] for v in self.values]
        self.pending_tokens = self.pending_tokens[:, :0]
        self.pending_noise = self.pending_noise[..., :0]
        self.prompt = torch.zeros_like(self.prompt)
        self.finished = False


class FlowDecoder(nn.Module):
    def __init__(self, cfg: FlowDecoderConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.heads:
            raise ValueError("flow.d_model must be a multiple of flow.heads")
        self.cfg = cfg
        self.head_dim = cfg.d_model // cfg.heads
        self.embed = nn.Embedding(cfg.codebook, cfg.d_model)
        self.lookahead = nn.Conv1d(cfg.d_model, cfg.d_model, cfg.lookahead_tokens + 1)
        self.layers = _layers(cfg, cfg.encoder_layers)
        self.norm = RMSNorm(cfg.d_model, NORM_EPS)
        self.mu_proj = nn.Linear(cfg.d_model, cfg.mel_bins)
        self.estimator = FlowEstimator(cfg)

    # -- shared pieces -------------------------------------------------------------------
    def token_features(
        self, tokens: Tensor, pad_right: int, token_mask: Tensor | None = None
    ) -> Tensor:
        """Embeddings plus right-context conv: [B, T] -> [B, T + pad_right - L, d].

        ``token_mask`` [B, T] (1 = real token, 0 = padding) zeroes the features of padded
        positions before the conv, as ``pad_right`` zeros do: the exported flow graph pads
        the final flush's missing lookahead with masked tokens instead of shrinking.
        """
        emb: Tensor = self.embed(tokens)
        if token_mask is not None:
            emb = emb * token_mask[..., None].to(emb.dtype)
        x = F.pad(emb.transpose(1, 2), (0, pad_right))
        out = self.lookahead(x).transpose(1, 2)
        return emb[:, : out.shape[1]] + F.leaky_relu(out, 0.1)

    def to_mu(self, h: Tensor) -> Tensor:
        """Encoder output [B, T, d] -> mu [B, T * frames_per_token, mel_bins]."""
        out: Tensor = self.mu_proj(self.norm(h)).repeat_interleave(self.cfg.frames_per_token, 1)
        return out

    def solve(self, mu: Tensor, noise: Tensor, prompt: Tensor, temperature: float) -> Tensor:
        """Euler-integrate one group: mu [B, F, mel], noise [B, mel, F], prompt [B, mel, P].

        -> mel [B, mel_bins, F]: x_0 = noise * temperature at t = 0, x_1 at t = 1.
        """
        steps = self.cfg.euler_steps
        x, pr = noise.transpose(1, 2) * temperature, prompt.transpose(1, 2)
        for i in range(steps):
            t = torch.full((x.shape[0],), i / steps, device=x.device, dtype=x.dtype)
            x = x + self.estimator(x, t, mu, pr) / steps
        return x.transpose(1, 2)

    def _next_prompt(self, prompt: Tensor, mel: Tensor) -> Tensor:
        p = self.cfg.prompt_frames
        both = torch.cat((prompt, mel), dim=-1)
        return both[..., both.shape[-1] - p :]

    # -- one-shot ------------------------------------------------------------------------
    def forward(
        self,
        tokens: Tensor,
        noise: Tensor,
        temperature: float = 1.0,
        chunk_tokens: int = CHUNK_TOKENS,
    ) -> Tensor:
        """Whole utterance at once: tokens [B, n], noise [B, mel_bins, 2n] -> mel [B, mel, 2n]."""
        self._check_chunking(chunk_tokens)
        b, n = tokens.shape
        self._check_noise(noise, n)
        groups = token_groups(n, chunk_tokens, self.cfg.lookahead_tokens)
        if not groups:
            return noise
        idx = torch.arange(n, device=tokens.device)
        gid = ((idx + self.cfg.lookahead_tokens) // chunk_tokens).clamp(max=len(groups) - 1)
        allowed = gid[None, :] <= gid[:, None]
        mask = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]
        h = self.token_features(tokens, self.cfg.lookahead_tokens)
        cos, sin = rope_cos_sin(idx[None].expand(b, n), self.head_dim, ROPE_THETA)
        empty = h.new_zeros(b, self.cfg.heads, 0, self.head_dim)
        for layer in self.layers:
            h, _, _ = layer(h, cos, sin, empty, empty, mask)
        mu = self.to_mu(h)
        fpt = self.cfg.frames_per_token
        prompt = noise.new_zeros(b, self.cfg.mel_bins, self.cfg.prompt_frames)
        outs = []
        for start, end in groups:
            a, z = start * fpt, end * fpt
            mel = self.solve(mu[:, a:z], noise[..., a:z], prompt, temperature)
            prompt = self._next_prompt(prompt, mel)
            outs.append(mel)
        return torch.cat(outs, dim=-1)

    generate_utterance = forward

    # -- streaming -----------------------------------------------------------------------
    def new_state(self, batch: int = 1, chunk_tokens: int = CHUNK_TOKENS) -> FlowState:
        self._check_chunking(chunk_tokens)
        p = next(self.parameters())
        kv = (batch, self.cfg.heads, 0, self.head_dim)
        return FlowState(
            keys=[p.new_zeros(kv) for _ in self.layers],
            values=[p.new_zeros(kv) for _ in self.layers],
            pending_tokens=torch.zeros(batch, 0, dtype=torch.long, device=p.device),
            pending_noise=p.new_zeros(batch, self.cfg.mel_bins, 0),
            prompt=p.new_zeros(batch, self.cfg.mel_bins, self.cfg.prompt_frames),
            chunk_tokens=chunk_tokens,
        )

    def step(
        self,
        tokens: Tensor,
        noise: Tensor,
        state: FlowState,
        final: bool = False,
        temperature: float = 1.0,
    ) -> Tensor:
        """Feed one chunk: tokens [B, m], noise [B, mel_bins, m * frames_per_token].

        Non-final chunks must hold exactly ``state.chunk_tokens`` tokens; the final one
        1..chunk_tokens (or 0 to flush). -> mel [B, mel_bins, frames emitted] (see module doc).
        """
        if state.finished:
            raise ValueError("the flow stream already ended (final=True): call state.reset()")
        m, lookahead = tokens.shape[1], self.cfg.lookahead_tokens
        if m > state.chunk_tokens or (not final and m != state.chunk_tokens):
            raise ValueError(
                f"flow step got {m} tokens; feed chunks of {state.chunk_tokens} "
                "(the final chunk may be shorter)"
            )
        self._check_noise(noise, m)
        toks = torch.cat((state.pending_tokens, tokens), dim=1)
        all_noise = torch.cat((state.pending_noise, noise), dim=-1)
        emit = toks.shape[1] if final else toks.shape[1] - lookahead
        frames = emit * self.cfg.frames_per_token
        state.pending_tokens, state.pending_noise = toks[:, emit:], all_noise[..., frames:]
        state.finished = final
        if emit == 0:
            return all_noise[..., :0]
        h = self.token_features(toks, lookahead if final else 0)
        b, start = h.shape[0], state.emitted_tokens
        pos = torch.arange(start, start + emit, device=h.device)[None].expand(b, emit)
        cos, sin = rope_cos_sin(pos, self.head_dim, ROPE_THETA)
        see_all = h.new_zeros(1, 1, 1, 1)  # this group and every earlier one
        for i, layer in enumerate(self.layers):
            h, state.keys[i], state.values[i] = layer(
                h, cos, sin, state.keys[i], state.values[i], see_all
            )
        mel = self.solve(self.to_mu(h), all_noise[..., :frames], state.prompt, temperature)
        state.prompt = self._next_prompt(state.prompt, mel)
        return mel

    def _check_chunking(self, chunk_tokens: int) -> None:
        if chunk_tokens <= self.cfg.lookahead_tokens:
            raise ValueError(
                f"chunk_tokens={chunk_tokens} must exceed flow.lookahead_tokens="
                f"{self.cfg.lookahead_tokens}"
            )

    def _check_noise(self, noise: Tensor, tokens: int) -> None:
        want = tokens * self.cfg.frames_per_token
        if noise.dim() != 3 or noise.shape[1] != self.cfg.mel_bins or noise.shape[2] != want:
            raise ValueError(
                f"noise has shape {tuple(noise.shape)}; expected [batch, {self.cfg.mel_bins}, "
                f"{want}] ({self.cfg.frames_per_token} frames per token); see chunk_noise()"
            )
