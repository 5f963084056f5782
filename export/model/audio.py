"""Whisper-encoder audio tower on 80-bin log-mel (16 kHz, 100 frames / s), streamed in chunks.

Parameter names mirror the Hugging Face ``WhisperEncoder`` (``conv1``, ``conv2``,
``embed_positions``, ``layers.{i}``, ``layer_norm``), so converting an upstream checkpoint
is a prefix strip. The 5x average pooling and the MLP ``projector`` (50 Hz encoder frames
-> 10 tokens / s in the backbone's width) are Venus's own.

Two ways to run it:

- ``encode_utterance`` is exactly Whisper's encoder over a whole mel: one conv over every
  frame, positions ``0 .. n-1``, full attention. It is the reference for parity.
- ``step`` (streaming, state in ``AudioStreamState``) and ``encode_chunks`` (the same
  numbers computed in one shot) run each chunk (default 100 mel frames = 1 s) through the
  conv front end on its own, then the transformer over a bounded window: the conv
  features of the last ``cfg.left_context_chunks`` chunks plus this one, at positions
  ``0 .. window-1``, full attention inside the window. The chunk's last 50 frames are
  pooled and projected to 10 tokens.

Where streaming differs from whole-utterance Whisper, on purpose:

1. Conv padding per chunk: ``conv1`` / ``conv2`` zero-pad each chunk's edges, so the
   first and last encoder frame of every chunk see zeros where the whole-utterance conv
   would see the neighbouring chunk's mel frames.
2. Bounded attention: a frame attends only to its window (at most
   ``left_context_chunks + 1`` chunks), and positions restart at 0 in every window, so
   they never exceed ``max_positions`` however long the session runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from venus.errors import ExportError
from venus.export.model.config import AudioEncoderConfig
from venus.export.model.layers import EncoderLayer, sinusoids

MEL_FRAMES_PER_CHUNK = 100  # 1 s of log-mel at a 10 ms hop
CONV_STRIDE = 2  # conv2 halves the frame rate: 100 mel frames / s -> 50 encoder frames / s


@dataclass
class AudioStreamState:
    """One stream's audio-encoder state: the conv features of the previous chunks.

    ``context`` is ``[batch, frames, d_model]`` with at most
    ``left_context_chunks * frames_per_chunk`` encoder frames (the oldest drop out first).
    """

    context: Tensor
    chunks: int = 0  # chunks encoded since the stream opened or was reset

    def reset(self) -> None:
        self.context = self.context[:, :0]
        self.chunks = 0


class AudioEncoder(nn.Module):
    """Whisper encoder + 5x average pooling + MLP projector to ``out_dim``."""

    def __init__(
        self,
        cfg: AudioEncoderConfig,
        out_dim: int,
        mel_frames_per_chunk: int = MEL_FRAMES_PER_CHUNK,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.mel_frames_per_chunk = mel_frames_per_chunk
        self.frames_per_chunk = mel_frames_per_chunk // CONV_STRIDE  # encoder frames
        self._check_schedule()
        d = cfg.d_model
        self.conv1 = nn.Conv1d(cfg.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=CONV_STRIDE, padding=1)
        self.embed_positions = nn.Embedding(cfg.max_positions, d)
        self.embed_positions.requires_grad_(False)
        self.layers = nn.ModuleList(
            EncoderLayer(d, cfg.heads, cfg.ffn_dim, cfg.layer_norm_eps, act="gelu", k_bias=False)
            for _ in range(cfg.layers)
        )
        self.layer_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.projector = nn.Sequential(
            nn.Linear(d, out_dim), nn.GELU(), nn.Linear(out_dim, out_dim)
        )
        self.reset_fixed()

    def _check_schedule(self) -> None:
        cfg, f = self.cfg, self.frames_per_chunk
        if cfg.d_model % cfg.heads:
            raise ExportError(f"audio.d_model {cfg.d_model} is not a multiple of heads {cfg.heads}")
        if self.mel_frames_per_chunk % CONV_STRIDE or f % cfg.pool:
            raise ExportError(
                f"a chunk of {self.mel_frames_per_chunk} mel frames gives {f} encoder frames, "
                f"which audio.pool {cfg.pool} does not divide; choose a chunk length that "
                f"is a multiple of {CONV_STRIDE * cfg.pool} mel frames"
            )
        window = (cfg.left_context_chunks + 1) * f
        if window > cfg.max_positions:
            raise ExportError(
                f"the attention window ({cfg.left_context_chunks} + 1 chunks = {window} encoder "
                f"frames) exceeds audio.max_positions {cfg.max_positions}; lower "
                "audio.left_context_chunks or the chunk length"
            )

    @property
    def tokens_per_chunk(self) -> int:
        return self.frames_per_chunk // self.cfg.pool

    def reset_fixed(self) -> None:
        """Re-fill the position table with Whisper's sinusoids (after a random init)."""
        with torch.no_grad():
            table = sinusoids(self.cfg.max_positions, self.cfg.d_model)
            self.embed_positions.weight.copy_(table.to(self.embed_positions.weight.dtype))

    def front_end(self, mel: Tensor) -> Tensor:
        """Conv front end: mel [batch, n_mels, frames] -> [batch, frames / 2, d_model]."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x))
        return x.transpose(1, 2)

    def transformer(self, x: Tensor, positions: Tensor, mask: Tensor | None) -> Tensor:
        """Add positions, run the layers and the final norm: [batch, time, d] -> same.

        ``positions`` [batch, time] index ``embed_positions``; ``mask`` is additive,
        broadcastable to [batch, heads, time, time], or None for full attention.
        """
        x = x + self.embed_positions(positions)
        for layer in self.layers:
            x = layer(x, mask)
        out: Tensor = self.layer_norm(x)
        return out

    def project(self, hidden: Tensor) -> Tensor:
        """Pool and project: encoder frames [batch, time, d] -> [batch, time / pool, out_dim]."""
        pooled = F.avg_pool1d(hidden.transpose(1, 2), self.cfg.pool, self.cfg.pool)
        out: Tensor = self.projector(pooled.transpose(1, 2))
        return out

    def encode_utterance(self, mel: Tensor) -> Tensor:
        """Whisper's encoder over a whole mel [batch, n_mels, frames] -> [batch, frames / 2, d].

        Equals Hugging Face ``WhisperEncoder``'s ``last_hidden_state``.
        """
        x = self.front_end(mel)
        b, t, _ = x.shape
        if t > self.cfg.max_positions:
            raise ExportError(
                f"{mel.shape[-1]} mel frames give {t} encoder frames, more than "
                f"audio.max_positions {self.cfg.max_positions}; encode it in chunks instead"
            )
        positions = torch.arange(t, device=x.device)[None].expand(b, t)
        return self.transformer(x, positions, None)

    def window_forward(self, feats: Tensor, valid: Tensor | None = None) -> Tensor:
        """Tokens of a window's last chunk: conv features [batch, window, d] -> [batch, 10, out].

        The window is the conv features of up to ``left_context_chunks`` previous chunks
        followed by this chunk's ``frames_per_chunk`` frames. ``valid`` [batch, window]
        (1 = real frame, 0 = left padding) lets a fixed-size window hold fewer chunks:
        padding takes no part in attention, and real frames get positions from 0 on.
        """
        return self.project(self.window_frames(feats, valid))

    def window_frames(self, feats: Tensor, valid: Tensor | None = None) -> Tensor:
        """The encoder frames of a window's last chunk, before pooling: [batch, 50, d]."""
        b, w, _ = feats.shape
        if valid is None:
            positions = torch.arange(w, device=feats.device)[None].expand(b, w)
            mask = None
        else:
            positions = (valid.long().cumsum(1) - 1).clamp(min=0)
            zero = torch.zeros((), dtype=feats.dtype, device=feats.device)
            neg = torch.full(
                (), torch.finfo(feats.dtype).min, dtype=feats.dtype, device=feats.device
            )
            mask = torch.where(valid.bool(), zero, neg)[:, None, None, :]
        hidden = self.transformer(feats, positions, mask)
        return hidden[:, w - self.frames_per_chunk :]

    def new_state(self, batch: int = 1) -> AudioStreamState:
        p = self.embed_positions.weight
        return AudioStreamState(context=p.new_zeros(batch, 0, self.cfg.d_model))

    def step(self, mel_chunk: Tensor, state: AudioStreamState) -> Tensor:
        """Encode the next chunk: mel [batch, n_mels, 100] -> tokens [batch, 10, out_dim]."""
        if mel_chunk.shape[-1] != self.mel_frames_per_chunk:
            raise ExportError(
                f"audio chunk has {mel_chunk.shape[-1]} mel frames, expected "
                f"{self.mel_frames_per_chunk}; pad the last chunk with silence"
            )
        window = torch.cat((state.context, self.front_end(mel_chunk)), dim=1)
        tokens = self.window_forward(window)
        keep = self.cfg.left_context_chunks * self.frames_per_chunk
        state.context = window[:, max(0, window.shape[1] - keep) :]
        state.chunks += 1
        return tokens

    def encode_chunks(self, mel: Tensor) -> Tensor:
        """What ``step`` gives over consecutive chunks, in one batched pass, without state.

        mel [batch, n_mels, n_chunks * 100] -> tokens [batch, n_chunks * 10, out_dim].
        Every chunk's window is built at once; the first chunks' windows are left-padded
        with zero features that ``valid`` masks out.
        """
        return self.encode_chunk_frames(mel)[0]

    def encode_chunk_frames(self, mel: Tensor) -> tuple[Tensor, Tensor]:
        """``encode_chunks``'s tokens and the encoder frames they pool (each chunk's, from
        its own window): ([batch, n_chunks * 10, out_dim], [batch, n_chunks * 50, d_model]).
        Training reads the frames (an auxiliary recognition loss, ``train/heard.py``)."""
        b, n_mels, frames = mel.shape
        m, f, left = self.mel_frames_per_chunk, self.frames_per_chunk, self.cfg.left_context_chunks
        if frames % m:
            raise ExportError(f"{frames} mel frames is not a whole number of {m}-frame chunks")
        n = frames // m
        chunks = mel.reshape(b, n_mels, n, m).permute(0, 2, 1, 3).reshape(b * n, n_mels, m)
        feats = self.front_end(chunks).reshape(b, n, f, -1)
        padded = torch.cat((feats.new_zeros(b, left, f, feats.shape[-1]), feats), dim=1)
        windows = torch.stack([padded[:, i : i + left + 1] for i in range(n)], dim=1)
        windows = windows.reshape(b * n, (left + 1) * f, -1)
        slots = torch.arange(left + 1, device=mel.device)
        chunk_of_slot = torch.arange(n, device=mel.device)[:, None] - left + slots
        valid = (chunk_of_slot >= 0).repeat_interleave(f, dim=1)  # [n, window]
        frames_out = self.window_frames(windows, valid.repeat(b, 1))
        tokens = self.project(frames_out)
        return (
            tokens.reshape(b, n * self.tokens_per_chunk, -1),
            frames_out.reshape(b, n * f, -1),
        )
