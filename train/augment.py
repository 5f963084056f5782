"""Other voices from the same samples: the log-mel of a training batch, changed per row.

The held-out set is spoken by voices the training set never has, and the model hears
them worse than its own (docs/training-log.md, the fifth round: a reply's first chunk right on
93% of the training split, the first token on 59% of held-out reply starts). Three
changes of the features, each one a row's draw, make each step's voices a little other
than the data's:

- **Vocal tract length (``train.mel_warp``)**: the spectrum's frequency axis scaled by
  ``alpha``, drawn from ``[1 - w, 1 + w]`` (VTLP, Jaitly & Hinton 2013: the formants of
  a longer or shorter vocal tract; ``alpha`` > 1 moves them up, towards a smaller
  speaker). Bin ``b`` (centre ``f`` Hz) takes the log-mel at ``f / alpha``, interpolated
  between the two nearest bins on the filterbank's own (Slaney) scale; above the top bin
  it takes the top bin. Done on the log-mel, not the waveform, since the batch holds
  only the log-mel; the triangles' unit area makes a bin a density, so a warp of the
  spectrum moves it without rescaling.
- **Loudness (``train.mel_gain_db``)**: the whole row louder or quieter by up to that
  many dB. The front end keeps the absolute level (``engines/mel.py``), and its clamp is
  relative to the chunk's peak, so ``g`` dB is exactly ``g / 40`` added to the scaled
  log-mel (log10 power, then ``(x + 4) / 4``), above the front end's absolute floor
  (1e-10 power): a chunk of digital silence, which sits at the floor whatever the gain,
  is moved too.
- **Frequency masks (``train.mel_freq_masks``)**: that many bands of 1 to
  ``MASK_BINS`` bins set to the row's mean (SpecAugment, Park et al. 2019, without its
  time masks, which would hide words the text targets answer).

The draws are the run's seed and the step's, so a resumed run draws what an
uninterrupted one would. Validation and ``venus validate`` never augment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from venus.engines.mel import hz_to_mel, mel_to_hz
from venus.train.batch import Batch
from venus.train.data import Example

__all__ = [
    "MASK_BINS",
    "MelAugment",
    "augment_mel",
    "augment_seed",
    "augmented",
    "warp_index",
    "warp_mel",
]

MASK_BINS: Final = 8  # the widest frequency mask (of 80 bins: Park et al.'s F = 27 is wider)
SAMPLE_RATE: Final = 16000  # the front end's (engines/mel.py: 0 Hz to 8 kHz)


@dataclass(frozen=True)
class MelAugment:
    """The recipe's share of the three changes (all 0: the batch as it is)."""

    warp: float = 0.0  # alpha drawn from [1 - warp, 1 + warp]
    gain_db: float = 0.0  # gain drawn from [-gain_db, +gain_db]
    freq_masks: int = 0  # bands masked per row

    def __bool__(self) -> bool:
        return bool(self.warp or self.gain_db or self.freq_masks)


def warp_index(alpha: float, n_mels: int) -> NDArray[np.float64]:
    """For each of ``n_mels`` bins, the fractional bin whose centre is at ``1 / alpha`` of
    its centre frequency (clamped to the first and last bin)."""
    top = hz_to_mel(np.array([SAMPLE_RATE / 2.0]))[0]
    spacing = top / (n_mels + 1)  # the centres sit at (b + 1) * spacing mel
    centres = mel_to_hz(spacing * np.arange(1, n_mels + 1, dtype=np.float64))
    source = hz_to_mel(centres / alpha) / spacing - 1.0
    out: NDArray[np.float64] = np.clip(source, 0.0, n_mels - 1.0)
    return out


def warp_mel(row: Tensor, alpha: float) -> Tensor:
    """``row`` [n_mels, T] with its frequency axis scaled by ``alpha``."""
    index = warp_index(alpha, row.shape[0])
    low = np.floor(index).astype(np.int64)
    high = np.minimum(low + 1, row.shape[0] - 1)
    frac = torch.from_numpy(index - low).to(row)[:, None]
    lo, hi = torch.from_numpy(low).to(row.device), torch.from_numpy(high).to(row.device)
    return row[lo] * (1.0 - frac) + row[hi] * frac


def augment_mel(
    mel: Tensor, frames: list[int], augment: MelAugment, generator: torch.Generator
) -> Tensor:
    """``mel`` [B, n_mels, T] with each row's first ``frames[i]`` frames changed by its own
    draws (module doc); the padding after them stays as it is. A new tensor."""
    out = mel.clone()
    n_mels = mel.shape[1]
    for i, n in enumerate(frames):
        alpha, gain, bands = _row_draws(augment, n_mels, generator)
        row = out[i, :, :n]
        if alpha != 1.0:
            row = warp_mel(row, alpha)
        row = row + gain / 40.0
        if bands:
            mean = row.mean()
            row = row.clone()
            for start, width in bands:
                row[start : start + width] = mean
        out[i, :, :n] = row
    return out


def _row_draws(
    augment: MelAugment, n_mels: int, generator: torch.Generator
) -> tuple[float, float, list[tuple[int, int]]]:
    """One row's alpha, gain (dB) and masked bands (``2 * freq_masks`` uniform draws
    after the two of alpha and gain, which every setting draws)."""
    u = torch.rand(2 + 2 * max(augment.freq_masks, 0), generator=generator).tolist()
    alpha = 1.0 + augment.warp * (2.0 * u[0] - 1.0)
    gain = augment.gain_db * (2.0 * u[1] - 1.0)
    bands = []
    for k in range(augment.freq_masks):
        width = 1 + int(u[2 + 2 * k] * MASK_BINS) % MASK_BINS
        start = int(u[3 + 2 * k] * (n_mels - width + 1)) % (n_mels - width + 1)
        bands.append((start, width))
    return alpha, gain, bands


def augment_seed(seed: int, step: int) -> int:
    """The seed of step ``step``'s augmentation draws in a run of seed ``seed``: their own
    stream, apart from the crops' and scheduled sampling's."""
    return (1 << 61) + seed * 1_000_003 + step


def augmented(
    batch: Batch, examples: list[Example], augment: MelAugment, seed: int, step: int
) -> Batch:
    """``batch`` (of ``examples``, on the CPU) with its log-mel augmented by step ``step``'s
    draws of run seed ``seed``: their own stream, apart from the crops' and scheduled
    sampling's. Itself when ``augment`` changes nothing."""
    if not augment:
        return batch
    g = torch.Generator().manual_seed(augment_seed(seed, step))
    frames = [e.mel.shape[1] for e in examples]
    return replace(batch, mel=augment_mel(batch.mel, frames, augment, g))
