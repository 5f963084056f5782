"""Causal HiFi-GAN-style vocoder: 80-bin mel at 50 Hz -> 24 kHz PCM, streamable sample-exact.

Every conv is causal (left context only) and upsampling is nearest-neighbour repeat
followed by a causal conv, so there is no overlap-add: output sample s depends on mel
frames ``<= s // hop`` only, and feeding the mel in chunks of any size, carrying each
conv's last input samples in ``VocoderState``, gives exactly the one-shot waveform.

Layout: causal pre-conv (mel_bins -> channels); per upsample rate r: leaky ReLU, repeat
x r, causal conv (kernel 2r) halving the channels, then the mean of one residual block
per ``resblock_kernels`` entry (causal dilated convs over ``resblock_dilations``); leaky
ReLU, causal post-conv to 1 channel, tanh. Mel is ``[batch, mel_bins, frames]``, PCM
``[batch, frames * hop]`` in [-1, 1].

With ``source`` "sine" (``vocoder_source.py``) each stage also adds a harmonic excitation
of an f0 predicted from the mel after its upsampling conv; the sine's phase is one more
piece of streaming state (``VocoderState.phase``, [B, 1] cycles). Without a source the
vocoder has exactly its former modules, weights and conv slots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from venus.export.model.causal import CausalConv1d, ConvCaches
from venus.export.model.causal import causal as _causal
from venus.export.model.config import VocoderConfig
from venus.export.model.vocoder_source import SineSource

LRELU_SLOPE = 0.1  # HiFi-GAN's leaky ReLU slope
INIT_RMS = 0.1  # a random vocoder's level (-20 dBFS) on unit-variance mel, see calibrate_init
CALIBRATION_FRAMES = 50  # one second of mel
MIN_CHANNELS = 8  # channel floor as the stages halve


def stage_channels(cfg: VocoderConfig) -> list[int]:
    """Channels before the first stage and after each upsample stage (halving, floored)."""
    floor = min(MIN_CHANNELS, cfg.channels)
    return [cfg.channels] + [
        max(cfg.channels // 2 ** (i + 1), floor) for i in range(len(cfg.upsample_rates))
    ]


class ResBlock(nn.Module):
    """HiFi-GAN ResBlock1, causal: per dilation d, x += conv(lrelu(conv_d(lrelu(x))))."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(CausalConv1d(channels, channels, kernel, d) for d in dilations)
        self.convs2 = nn.ModuleList(CausalConv1d(channels, channels, kernel) for _ in dilations)

    def forward(self, x: Tensor, caches: ConvCaches | None = None) -> Tensor:
        pairs = zip(_causal(self.convs1), _causal(self.convs2), strict=True)
        for c1, c2 in pairs:
            xt = c1.apply_cached(F.leaky_relu(x, LRELU_SLOPE), caches)
            x = x + c2.apply_cached(F.leaky_relu(xt, LRELU_SLOPE), caches)
        return x


@dataclass
class VocoderState:
    """One stream's vocoder state: each causal conv's last ``context`` input samples, and
    the sine source's phase ([B, 1] cycles; None without a source)."""

    caches: list[Tensor]  # by conv slot, [B, conv in-channels, conv context]
    phase: Tensor | None = None

    def reset(self) -> None:
        self.caches = [torch.zeros_like(c) for c in self.caches]
        if self.phase is not None:
            self.phase = torch.zeros_like(self.phase)


class Vocoder(nn.Module):
    def __init__(self, cfg: VocoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ch = stage_channels(cfg)
        self.conv_pre = CausalConv1d(cfg.mel_bins, ch[0], cfg.kernel_size)
        self.ups = nn.ModuleList(
            CausalConv1d(ch[i], ch[i + 1], 2 * r) for i, r in enumerate(cfg.upsample_rates)
        )
        self.resblocks = nn.ModuleList(
            nn.ModuleList(
                ResBlock(ch[i + 1], k, cfg.resblock_dilations) for k in cfg.resblock_kernels
            )
            for i in range(len(cfg.upsample_rates))
        )
        self.conv_post = CausalConv1d(ch[-1], 1, cfg.kernel_size)
        self.source = SineSource(cfg, ch[1:]) if cfg.source == "sine" else None
        self.convs: list[CausalConv1d] = [m for m in self.modules() if isinstance(m, CausalConv1d)]
        for slot, conv in enumerate(self.convs):
            conv.slot = slot

    def cache_shapes(self) -> list[tuple[int, int]]:
        """Each streaming cache's [channels, context] (batch first), by slot."""
        return [(c.in_channels, c.context) for c in self.convs]

    @torch.no_grad()
    def calibrate_init(self, gen: torch.Generator) -> None:
        """Scale the post-conv so random weights speak at ``INIT_RMS`` on unit-variance mel.

        Only for random initialisation (``init_model`` calls it): trained or converted
        weights are loaded over it. Unit variance is what the flow decoder starts from.
        """
        mel = torch.randn((1, self.cfg.mel_bins, CALIBRATION_FRAMES), generator=gen)
        x, _ = self._features(mel, None, None, self._start_phase(1))
        x = self.conv_post.apply_cached(F.leaky_relu(x, LRELU_SLOPE), None)
        rms = float(x.pow(2).mean().sqrt())
        if rms > 0.0:
            self.conv_post.weight.mul_(INIT_RMS / rms)

    def _start_phase(self, batch: int) -> Tensor | None:
        """The sine source's phase at a stream's start; None without a source."""
        if self.source is None:
            return None
        return next(self.parameters()).new_zeros(batch, 1)

    def _features(
        self, mel: Tensor, caches: ConvCaches | None, f0: Tensor | None, phase: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """-> (the last stage's output, the source's phase after it)."""
        excitation: list[Tensor | None] = [None] * len(self.cfg.upsample_rates)
        if self.source is not None and phase is not None:
            parts, phase = self.source(mel, f0, phase, caches)
            excitation = list(parts)
        x = self.conv_pre.apply_cached(mel, caches)
        blocks_per_stage = cast("Iterable[nn.ModuleList]", self.resblocks)
        stages = zip(
            self.cfg.upsample_rates, _causal(self.ups), blocks_per_stage, excitation, strict=True
        )
        for r, up, blocks, source in stages:
            x = F.leaky_relu(x, LRELU_SLOPE).repeat_interleave(r, dim=-1)
            x = up.apply_cached(x, caches)
            if source is not None:
                x = x + source
            total = torch.zeros_like(x)
            for block in blocks:
                total = total + block(x, caches)
            x = total / len(blocks)
        return x, phase

    def _run(
        self, mel: Tensor, caches: ConvCaches | None, f0: Tensor | None, phase: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        x, phase = self._features(mel, caches, f0, phase)
        x = self.conv_post.apply_cached(F.leaky_relu(x, LRELU_SLOPE), caches)
        return torch.tanh(x).squeeze(1), phase

    def forward(self, mel: Tensor, f0: Tensor | None = None) -> Tensor:
        """One shot: mel [B, mel_bins, frames] -> PCM [B, frames * hop] at 24 kHz.

        ``f0`` [B, frames] Hz (0: unvoiced) drives the sine source instead of the head's
        prediction (training's teacher forcing); without a source it must be None.
        """
        if f0 is not None and self.source is None:
            raise ValueError("vocoder: f0 given to a vocoder without a source")
        pcm, _ = self._run(mel, None, f0, self._start_phase(mel.shape[0]))
        return pcm

    def stream(
        self, mel: Tensor, caches: list[Tensor], phase: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor], Tensor | None]:
        """Pure streaming step (the exportable form) -> (PCM [B, frames * hop], new caches,
        the source's new phase). ``phase`` [B, 1]: required with a source, else None."""
        if (phase is None) != (self.source is None):
            raise ValueError(
                f"vocoder with source {self.cfg.source!r}: the phase must be "
                f"{'given' if self.source is not None else 'None'}"
            )
        io = ConvCaches(old=caches, new=list(caches))
        pcm, phase = self._run(mel, io, None, phase)
        return pcm, io.new, phase

    def new_state(self, batch: int = 1) -> VocoderState:
        p = next(self.parameters())
        return VocoderState(
            caches=[p.new_zeros(batch, c.in_channels, c.context) for c in self.convs],
            phase=self._start_phase(batch),
        )

    def step(self, mel: Tensor, state: VocoderState) -> Tensor:
        """Feed a chunk of any length: mel [B, mel_bins, frames] -> PCM [B, frames * hop]."""
        if mel.dim() != 3 or mel.shape[1] != self.cfg.mel_bins:
            raise ValueError(
                f"vocoder got mel of shape {tuple(mel.shape)}; expected [batch, "
                f"{self.cfg.mel_bins}, frames]"
            )
        pcm, state.caches, state.phase = self.stream(mel, state.caches, state.phase)
        return pcm
