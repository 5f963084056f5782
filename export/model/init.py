"""Reproducible random initialisation, one independent generator per component.

Each component's generator is seeded from (seed, component name), so adding a
component or converting only part of a model never shifts the others' weights.
Matrices ~ N(0, 0.02), biases 0, 1-D scales (norms) 1; modules with fixed tables
(sinusoidal positions) restore them through ``reset_fixed()``. A module with an
``calibrate_init(generator)`` method is given the chance to rescale what it just drew: the
vocoder uses it so that a random checkpoint speaks audibly (plain N(0, 0.02) weights through
its stack of convs whisper at about -95 dBFS, which no VAD or listener can hear).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

INIT_STD = 0.02


def component_generator(seed: int, component: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{component}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


@torch.no_grad()
def init_component(module: nn.Module, seed: int, component: str) -> None:
    gen = component_generator(seed, component)
    seen: set[int] = set()
    for name, param in module.named_parameters():
        if id(param) in seen:  # tied weights: initialise once
            continue
        seen.add(id(param))
        if name.endswith("bias"):
            param.zero_()
        elif param.ndim == 1:
            param.fill_(1.0)
        else:
            param.copy_(torch.randn(param.shape, generator=gen) * INIT_STD)
    for sub in module.modules():
        reset = getattr(sub, "reset_fixed", None)
        if callable(reset):
            reset()
    for sub in module.modules():
        calibrate = getattr(sub, "calibrate_init", None)
        if callable(calibrate):
            calibrate(gen)


def init_model(model: nn.Module, seed: int) -> None:
    """Initialise every component of a ``VenusModel``."""
    for name, component in model.components().items():  # type: ignore[operator]
        init_component(component, seed, name)
