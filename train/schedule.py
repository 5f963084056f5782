"""What each training step takes, from the recipe's seed and the step alone: its learning
rate, its examples and its random draws. So a run resumed at any step (from its saved
state, ``runlog.py``; or stopped by a signal, ``stopping.py``) goes on exactly as the
uninterrupted run would have."""

from __future__ import annotations

import math

import torch

from venus.train.config import TrainConfig

FINAL_LR = 0.1  # of the peak, at the last step


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """The learning rate at ``step``, of the peak: a linear warm-up, then a cosine down to
    ``FINAL_LR``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return FINAL_LR + (1 - FINAL_LR) * 0.5 * (1 + math.cos(math.pi * progress))


def sampling_share(step: int, cfg: TrainConfig) -> float:
    """Scheduled sampling's share at ``step``: from 0 linearly to ``speech_sampling`` at
    half the run, then held (the decoder first learns from the data's units alone)."""
    return cfg.speech_sampling * min(1.0, step / max(1, cfg.steps // 2))


def step_draws(step: int, cfg: TrainConfig, device: torch.device) -> torch.Generator | None:
    """The random draws of ``step`` (scheduled sampling): seeded by the run and the step,
    so a resumed run draws what an uninterrupted one would (on the same kind of device:
    CPU and CUDA generators differ); apart from the crops' draws
    (``loop._batch``), which the same seed would otherwise repeat."""
    if not cfg.speech_sampling:
        return None
    return torch.Generator(device=device).manual_seed((1 << 62) + cfg.seed * 1_000_003 + step)


def batch_indices(step: int, n: int, size: int, seed: int) -> list[int]:
    """Step ``step``'s examples: epoch-wise seeded permutations, the same on a resume."""
    out: list[int] = []
    start = step * size
    while len(out) < min(size, n):
        epoch, offset = divmod(start + len(out), n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100003 + epoch))
        out += perm[offset : offset + size - len(out)].tolist()
    return out
