"""The Griffin-Lim vocoder: normalised mel (50 Hz) -> 24 kHz PCM with no trained weights.

The tiny model's trained HiFi-GAN vocoder does not yet speak words a recogniser hears
(docs/training-log.md, fourth round), while the same mel through Griffin-Lim does. So
``VocoderConfig.kind`` "griffin_lim" swaps the network for signal processing, exported as
an ONNX graph like any vocoder (same inputs, outputs and streaming contract,
``engines/vocoder.py``).

1. **Magnitude.** The mel is de-normalised with the voice's per-bin ``mean`` and ``std``
   (buffers the voice sets, ``set_stats``), exponentiated, mapped to a magnitude spectrum
   by the pseudo-inverse of the output mel's filterbank (1024-point FFT, 80 bands to 8
   kHz, ``config.OUTPUT_MEL_*``), resampled to this STFT's bins and clipped at zero.
2. **Frames.** The STFT window is one mel hop (N = 480 samples, 20 ms, periodic Hann)
   with ``FRAMES_PER_MEL`` = 4 frames a mel frame (a 120-sample hop h). Frame j covers
   samples [j h, j h + N). The magnitude of the 4 frames of mel frame i steps linearly
   from mel frame i - 1's (the previous step's last, carried; silence at the start) to
   frame i's.
3. **Phase, streamed** (RTISI, Beauregard, Harvey and Zhu 2005): a step of F mel frames
   adds n = 4F frames after the K = 3 frames the previous step left, which are kept as
   they are. The new frames start from the phase of the previous step's last frame,
   advanced at each bin's centre frequency; then ``iterations`` rounds of overlap-add,
   re-analysis of the new frames, and their phase kept with the magnitude set. The step
   emits samples [first new frame's start, + n h): F * 480 samples that no later frame
   touches, so each step's output is final. Frame 4i + 3, which carries mel frame i's
   magnitude, is centred 360 samples (15 ms) after that mel frame's centre.

Unlike the HiFi-GAN vocoder, chunks of different sizes give slightly different (each
final) waves: the phase search sees the chunk. The daemon feeds whole 1 s chunks.

The DFTs are matrix products and the overlap-add is four padded slices: ONNX Runtime's
CPU DFT op measured ~30x slower than numpy's FFT for these sizes, and TensorRT has no DFT.
At 16 iterations a second of speech costs about 3 GFLOP.

State (``VocoderState.caches``, exported as ``past_conv.0`` / ``past_conv.1`` so the
runner carries them as it does a conv's context):

- 0: the last K frames' spectra ``[B, 2 * bins, K]``, real parts then imaginary;
- 1: the last mel frame's magnitude ``[B, bins, 1]`` (zeros, silence, at the start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import torch
from torch import Tensor, nn

from venus.engines.mel import hann, mel_filterbank
from venus.export.model.config import (
    OUTPUT_MEL_FMAX_HZ,
    OUTPUT_MEL_N_FFT,
    OUTPUT_MEL_WINDOW,
    VocoderConfig,
)
from venus.export.model.vocoder import VocoderState

FRAMES_PER_MEL: Final = 4  # STFT frames a mel frame: hop = mel hop / 4, window = mel hop
EPS: Final = 1e-8  # magnitudes below this have no phase


@dataclass(frozen=True)
class StateSlot:
    """One piece of carried state, described as a conv cache: ``[B, in_channels, context]``."""

    in_channels: int
    context: int


def spectrum_matrix(cfg: VocoderConfig) -> np.ndarray:
    """[bins, mel_bins]: linear mel energies -> this STFT's magnitudes (module doc, 1)."""
    n_fft = OUTPUT_MEL_N_FFT
    filters = mel_filterbank(cfg.mel_bins, n_fft, cfg.sample_rate, OUTPUT_MEL_FMAX_HZ)
    inverse = np.linalg.pinv(filters)  # [513, mel]
    wide = np.linspace(0.0, cfg.sample_rate / 2, n_fft // 2 + 1)
    narrow = np.linspace(0.0, cfg.sample_rate / 2, cfg.hop // 2 + 1)
    # linear interpolation from the 1024-point bins to ours, as a matrix
    resample = np.stack([np.interp(narrow, wide, row) for row in np.eye(len(wide))], axis=1)
    # a sinusoid's peak scales with the window's sum: the output mel's, ours of one hop
    scale = hann(cfg.hop).sum() / hann(OUTPUT_MEL_WINDOW).sum()
    out: np.ndarray = (resample @ inverse * scale).astype(np.float32)
    return out


def _dft(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Windowed real DFT [n, 2 bins] and its windowed inverse [2 bins, n] as matrices."""
    bins = n // 2 + 1
    window = hann(n)
    angle = 2.0 * math.pi * np.outer(np.arange(n), np.arange(bins)) / n  # [n, bins]
    forward = np.concatenate([np.cos(angle), -np.sin(angle)], axis=1) * window[:, None]
    weight = np.full(bins, 2.0 / n)
    weight[0] = 1.0 / n
    if n % 2 == 0:
        weight[-1] = 1.0 / n
    inverse = (
        np.concatenate(
            [np.cos(angle).T * weight[:, None], -np.sin(angle).T * weight[:, None]], axis=0
        )
        * window[None, :]
    )
    return forward.astype(np.float32), inverse.astype(np.float32)


class GriffinLimVocoder(nn.Module):
    """``Vocoder``'s interface (forward, stream, new_state, step, convs) without weights."""

    source = None  # no excitation: the phase search makes the waveform
    mean: Tensor
    std: Tensor
    to_spectrum: Tensor
    forward_dft: Tensor
    inverse_dft: Tensor
    window_square: Tensor
    advance: Tensor

    def __init__(self, cfg: VocoderConfig) -> None:
        super().__init__()
        if cfg.hop % FRAMES_PER_MEL:
            raise ValueError(f"griffin_lim: the mel hop {cfg.hop} is not a multiple of 4")
        self.cfg = cfg
        self.n_fft, self.step_size = cfg.hop, cfg.hop // FRAMES_PER_MEL
        self.bins = self.n_fft // 2 + 1
        self.context = FRAMES_PER_MEL - 1  # frames overlapping the next step's first
        self.register_buffer("mean", torch.zeros(cfg.mel_bins))
        self.register_buffer("std", torch.ones(cfg.mel_bins))
        self.register_buffer("to_spectrum", torch.from_numpy(spectrum_matrix(cfg)), False)
        forward, inverse = _dft(self.n_fft)
        self.register_buffer("forward_dft", torch.from_numpy(forward), False)
        self.register_buffer("inverse_dft", torch.from_numpy(inverse), False)
        square = torch.from_numpy(hann(self.n_fft).astype(np.float32)) ** 2
        self.register_buffer("window_square", square.reshape(FRAMES_PER_MEL, -1), False)
        advance = 2.0 * math.pi * self.step_size * np.arange(self.bins) / self.n_fft
        self.register_buffer("advance", torch.from_numpy(advance.astype(np.float32)), False)
        self.convs: list[StateSlot] = [StateSlot(2 * self.bins, self.context),
                                       StateSlot(self.bins, 1)]  # fmt: skip

    def cache_shapes(self) -> list[tuple[int, int]]:
        """Each piece of state's [channels, context] (batch first), as a conv cache."""
        return [(c.in_channels, c.context) for c in self.convs]

    @torch.no_grad()
    def set_stats(self, mean: Tensor, std: Tensor) -> None:
        """The voice's per-bin log-mel mean and std (the flow decoder's normalisation)."""
        self.mean.copy_(mean)
        self.std.copy_(std)

    def _magnitudes(self, mel: Tensor, last: Tensor) -> tuple[Tensor, Tensor]:
        """mel [B, mel_bins, F], the magnitude of the mel frame before it [B, bins, 1] ->
        (the STFT frames' magnitudes [B, 4F, bins], the last mel frame's [B, bins, 1])."""
        energy = torch.exp(mel * self.std[:, None] + self.mean[:, None])
        frames = torch.relu(torch.einsum("km,bmt->bkt", self.to_spectrum, energy))
        both = torch.cat([last, frames], dim=-1)  # [B, bins, F + 1]
        prev, cur = both[..., :-1], both[..., 1:]
        w = torch.arange(1, FRAMES_PER_MEL + 1, dtype=mel.dtype, device=mel.device)
        w = w / FRAMES_PER_MEL  # the 4 frames of mel frame i lie at i - 3/4 .. i
        steps = prev[..., None] + (cur - prev)[..., None] * w  # [B, bins, F, 4]
        return steps.flatten(2).transpose(1, 2), both[..., -1:]  # the carried one if F = 0

    def _overlap_add(self, spectra: Tensor) -> Tensor:
        """[B, T, 2 bins] -> windowed overlap-add in blocks of h [B, T + 3, h], normalised
        by the windows' squares over the same frames."""
        frames = spectra @ self.inverse_dft  # [B, T, N]
        frames = frames.reshape(frames.shape[0], frames.shape[1], FRAMES_PER_MEL, -1)
        last = FRAMES_PER_MEL - 1
        ones = torch.ones_like(frames[:1, :, :, :1])  # [1, T, 4, 1]
        total, weight = torch.zeros_like(frames[:, :1, 0]), torch.zeros_like(ones[:, :1, 0])
        for r in range(FRAMES_PER_MEL):
            total = total + nn.functional.pad(frames[:, :, r], (0, 0, r, last - r))
            square = ones[:, :, r] * self.window_square[r]
            weight = weight + nn.functional.pad(square, (0, 0, r, last - r))
        return total / weight.clamp_min(EPS)

    def _analyse(self, blocks: Tensor, start: int, count: int) -> Tensor:
        """Frames ``start`` .. ``start + count`` of the blocks [B, T + 3, h] -> spectra."""
        frames = torch.cat(
            [blocks[:, start + r : start + r + count] for r in range(FRAMES_PER_MEL)], dim=-1
        )  # [B, count, N]
        return frames @ self.forward_dft

    def _phase_start(self, context: Tensor, n: int) -> tuple[Tensor, Tensor]:
        """Unit phasors (cos, sin) [B, n, bins]: the last context frame's phase advanced
        at each bin's centre frequency (phase 0 where that frame is silent)."""
        re, im = context[:, -1, : self.bins], context[:, -1, self.bins :]
        size = torch.sqrt(re * re + im * im)
        live = size > EPS
        cos0 = torch.where(live, re / size.clamp_min(EPS), torch.ones_like(re))
        sin0 = torch.where(live, im / size.clamp_min(EPS), torch.zeros_like(im))
        k = torch.arange(1, n + 1, dtype=context.dtype, device=context.device)
        turn = k[:, None] * self.advance[None, :]  # [n, bins]
        cos_t, sin_t = torch.cos(turn), torch.sin(turn)
        cos = cos0[:, None] * cos_t - sin0[:, None] * sin_t
        sin = sin0[:, None] * cos_t + cos0[:, None] * sin_t
        return cos, sin

    def stream(
        self, mel: Tensor, caches: list[Tensor], phase: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor], None]:
        """One streaming step (the exportable form; module doc) -> (PCM [B, F * hop], new
        caches, None)."""
        if phase is not None:
            raise ValueError("griffin_lim vocoder: it has no source, so no phase")
        context = caches[0].transpose(1, 2)  # [B, K, 2 bins]
        mag, last = self._magnitudes(mel, caches[1])  # [B, n, bins]
        n, k = mag.shape[1], self.context
        cos, sin = self._phase_start(context, n)
        spectra = torch.cat([mag * cos, mag * sin], dim=-1)
        for _ in range(self.cfg.iterations):
            blocks = self._overlap_add(torch.cat([context, spectra], dim=1))
            found = self._analyse(blocks, k, n)
            re, im = found[..., : self.bins], found[..., self.bins :]
            size = torch.sqrt(re * re + im * im).clamp_min(EPS)
            spectra = torch.cat([mag * re / size, mag * im / size], dim=-1)
        everything = torch.cat([context, spectra], dim=1)
        blocks = self._overlap_add(everything)
        pcm = blocks[:, k : k + n].flatten(1).clamp(-1.0, 1.0)
        new = [everything[:, -k:].transpose(1, 2), last]
        return pcm, new, None

    def forward(self, mel: Tensor, f0: Tensor | None = None) -> Tensor:
        """One shot: mel [B, mel_bins, frames] -> PCM [B, frames * hop], one step."""
        if f0 is not None:
            raise ValueError("vocoder: f0 given to a vocoder without a source")
        pcm, _, _ = self.stream(mel, self.new_state(mel.shape[0]).caches)
        return pcm

    def new_state(self, batch: int = 1) -> VocoderState:
        return VocoderState(
            caches=[self.mean.new_zeros(batch, s.in_channels, s.context) for s in self.convs]
        )

    def step(self, mel: Tensor, state: VocoderState) -> Tensor:
        """Feed a chunk: mel [B, mel_bins, frames] -> PCM [B, frames * hop]."""
        if mel.dim() != 3 or mel.shape[1] != self.cfg.mel_bins:
            raise ValueError(
                f"vocoder got mel of shape {tuple(mel.shape)}; expected [batch, "
                f"{self.cfg.mel_bins}, frames]"
            )
        pcm, state.caches, _ = self.stream(mel, state.caches)
        return pcm
