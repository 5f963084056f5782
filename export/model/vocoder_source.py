"""The vocoder's neural-source-filter excitation (``VocoderConfig.source`` "sine").

After hn-NSF (Wang, Takaki & Yamagishi 2019), which learned harmonics from spectral
amplitude distances alone, and NSF-HiFiGAN: a small causal head predicts f0 per mel
frame; the f0 drives a sum of ``harmonics`` sines whose phase is the running sum of
``f0 / sample_rate``; a 1x1 conv and tanh merge them into one excitation channel; per
upsample stage a strided causal conv brings it down to the stage's rate, and the
vocoder adds it after the stage's upsampling conv. The filter (the HiFi-GAN stages) then
shapes harmonics it is given instead of having to make them from the mel.

**Phase**, in cycles, wrapped to [0, 1). f0 holds for a whole frame (the vocoder's
nearest-neighbour upsampling), so sample j (1-based) of frame t has phase
``start_t + j * c_t / hop`` with ``c_t = f0_t * hop / sr`` the frame's cycles, and
``start_t`` is the wrapped running sum of the frames' cycles before it. ``c_t`` is
rounded to whole ``1 / PHASE_STEPS`` of a cycle (f0 to 0.05 Hz), so float32 sums the
starts exactly (to 2^24 / PHASE_STEPS frames, 5.5 minutes in one piece): a chunked
stream, which carries the wrapped phase (``VocoderState.phase``), meets the one-shot
phase exactly, with no float64 (which TensorRT lacks). Each sample depends on frames up
to its own only: causal, sample-exact under streaming.

**Voicing.** Frames the head calls unvoiced (logit <= 0), and harmonics at or above
Nyquist, add no sine. hn-NSF adds Gaussian noise as well; there is none here, so a stream
stays deterministic (the filter makes noise bands from the mel, as without a source).

Training feeds the tracked f0 of the real audio (``venus.train.pitch``) instead of the
head's, and teaches the head with its own loss there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from venus.export.model.causal import CausalConv1d, ConvCaches, causal
from venus.export.model.config import VocoderConfig

F0_REF_HZ = 150.0  # the head predicts ln(f0 / F0_REF_HZ): a random head starts near speech
F0_CLAMP_HZ = (40.0, 1000.0)  # predicted f0 is clamped to this
HEAD_CHANNELS = 64
HEAD_KERNEL = 5  # mel frames the head's first conv sees (100 ms)
SINE_AMPLITUDE = 0.1  # hn-NSF's alpha
PHASE_STEPS = 1024  # a frame's cycles are whole 1/1024ths (module doc)
LRELU_SLOPE = 0.1


@dataclass(frozen=True)
class F0Prediction:
    """The head's output per mel frame: ln f0 (Hz) and a voicing logit, each [B, frames]."""

    log_f0: Tensor
    voicing: Tensor

    def hz(self) -> Tensor:
        """f0 in Hz [B, frames], clamped to ``F0_CLAMP_HZ``; 0 where unvoiced."""
        low, high = (math.log(f) for f in F0_CLAMP_HZ)
        f0 = self.log_f0.clamp(low, high).exp()
        return torch.where(self.voicing > 0, f0, torch.zeros_like(f0))


class F0Head(nn.Module):
    """Causal mel -> (ln f0, voicing): two causal convs and a 1x1 projection."""

    def __init__(self, mel_bins: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            (
                CausalConv1d(mel_bins, HEAD_CHANNELS, HEAD_KERNEL),
                CausalConv1d(HEAD_CHANNELS, HEAD_CHANNELS, 3),
            )
        )
        self.proj = nn.Conv1d(HEAD_CHANNELS, 2, 1)

    def forward(self, mel: Tensor, caches: ConvCaches | None = None) -> F0Prediction:
        """mel [B, mel_bins, frames] -> the prediction for each frame."""
        x = mel
        for conv in causal(self.convs):
            x = F.leaky_relu(conv.apply_cached(x, caches), LRELU_SLOPE)
        out = self.proj(x)
        return F0Prediction(out[:, 0] + math.log(F0_REF_HZ), out[:, 1])


def sine_excitation(
    f0: Tensor, phase: Tensor, hop: int, sample_rate: int, harmonics: int
) -> tuple[Tensor, Tensor]:
    """f0 [B, frames] Hz (0: unvoiced), phase [B, 1] cycles before the first sample ->
    (sines [B, harmonics, frames * hop], each harmonic's amplitude 1 or 0; the phase after
    the last sample, wrapped). A frame's cycles are rounded to whole ``1 / PHASE_STEPS``."""
    b = f0.shape[0]
    cycles = torch.round(f0 * (hop * PHASE_STEPS / sample_rate)) / PHASE_STEPS  # a frame's
    whole = cycles - cycles.floor()  # what a frame adds to the wrapped phase
    run = phase + torch.cumsum(whole, dim=1)  # after each frame: exact (module doc)
    # Wrapped phase before each frame, and after the last: values in [0, 1) on a 1/1024
    # grid, exact in float16 too (an fp16 engine keeps the chain to the Sin in float32,
    # not a separate sum that only feeds present_phase).
    edges = torch.cat((phase, run - run.floor()), dim=1)
    starts, after = edges[:, :-1], edges[:, -1:]
    j = torch.arange(1, hop + 1, dtype=f0.dtype, device=f0.device) / hop
    k = torch.arange(1, harmonics + 1, dtype=f0.dtype, device=f0.device)[None, :, None]
    phi = starts[:, None, :, None] + cycles[:, None, :, None] * j  # [B, 1, frames, hop]
    turns = k[..., None] * phi
    sines = torch.sin(2 * math.pi * (turns - turns.floor()))
    audible = (f0[:, None] > 0) & (k * f0[:, None] < sample_rate / 2)  # [B, harmonics, frames]
    sines = sines * audible[..., None].to(sines.dtype)
    return sines.reshape(b, harmonics, -1), after


def stage_strides(cfg: VocoderConfig) -> list[int]:
    """Samples at 24 kHz per sample of each upsample stage's output."""
    rates = cfg.upsample_rates
    return [math.prod(rates[i + 1 :]) for i in range(len(rates))]


class SineSource(nn.Module):
    """The f0 head, the harmonic merge and one strided causal conv per stage (module doc)."""

    def __init__(self, cfg: VocoderConfig, channels: list[int]) -> None:
        """``channels``: each upsample stage's output channels."""
        super().__init__()
        self.cfg = cfg
        self.head = F0Head(cfg.mel_bins)
        self.merge = nn.Conv1d(cfg.harmonics, 1, 1)
        self.downs = nn.ModuleList(
            CausalConv1d(1, c, 2 * s, stride=s)
            for c, s in zip(channels, stage_strides(cfg), strict=True)
        )

    def forward(
        self, mel: Tensor, f0: Tensor | None, phase: Tensor, caches: ConvCaches | None
    ) -> tuple[list[Tensor], Tensor]:
        """mel [B, mel_bins, frames]; f0 [B, frames] Hz to use instead of the head's
        (training) -> (the excitation at each stage's rate, the phase after)."""
        if f0 is None:
            f0 = self.head(mel, caches).hz()
        c = self.cfg
        sines, after = sine_excitation(f0, phase, c.hop, c.sample_rate, c.harmonics)
        excitation = torch.tanh(self.merge(SINE_AMPLITUDE * sines))
        return [down.apply_cached(excitation, caches) for down in causal(self.downs)], after
