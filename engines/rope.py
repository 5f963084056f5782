"""Rotary position embeddings on the host, numpy only: moving cached keys to new positions.

The backbone graph caches its keys after q/k-norm and RoPE, each rotated for the position
it was computed at. RoPE is a rotation per pair of channels, so R(p - d) k = R(-d) R(p) k:
rotating a cached key by ``-d`` moves it exactly to position ``p - d``, without the
un-rotated key. ``BackboneState.evict`` does that to the recent keys it keeps, so that
position ids restart after the kept tokens instead of growing with the session.

The convention is the exporter's (``venus.export.model.layers``, Qwen3's "rotate_half"):
``inv_freq = 1 / theta ** (arange(0, head_dim, 2) / head_dim)`` in float32, angles
``cat(freqs, freqs)`` over the head dimension, ``x * cos + rotate_half(x) * sin``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.engines.manifest import Manifest
from venus.errors import EngineError


@dataclass(frozen=True)
class Rope:
    """The backbone's rotary embedding: ``head_dim`` channels, base ``theta``."""

    head_dim: int
    theta: float

    def __post_init__(self) -> None:
        if self.head_dim < 2 or self.head_dim % 2:
            raise EngineError(f"RoPE head_dim {self.head_dim} must be even and >= 2")
        if not self.theta > 0:
            raise EngineError(f"RoPE theta {self.theta} must be > 0")

    def inv_freq(self) -> NDArray[np.float32]:
        """[head_dim / 2] float32, computed as the exported graph does."""
        exponent = np.arange(0, self.head_dim, 2, dtype=np.float32) / np.float32(self.head_dim)
        inv: NDArray[np.float32] = np.reciprocal(np.power(np.float32(self.theta), exponent))
        return inv

    def cos_sin(self, delta: int) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """cos and sin [head_dim] of a rotation by ``delta`` positions (angles in float64)."""
        freqs = float(delta) * self.inv_freq().astype(np.float64)
        angles = np.concatenate((freqs, freqs))
        return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)

    def rotate(self, keys: NDArray[Any], delta: int) -> NDArray[Any]:
        """Keys [..., tokens, head_dim] rotated by ``delta`` positions (negative: earlier).

        Computed in float32; returned in the input's dtype (a new array).
        """
        if keys.shape[-1] != self.head_dim:
            raise EngineError(
                f"RoPE rotate: keys have shape {keys.shape}; the last axis must be "
                f"head_dim {self.head_dim}"
            )
        x = np.asarray(keys, dtype=np.float32)
        if delta == 0:
            return np.array(keys, copy=True)
        cos, sin = self.cos_sin(delta)
        half = self.head_dim // 2
        rotated = np.concatenate((-x[..., half:], x[..., :half]), axis=-1)
        out: NDArray[Any] = (x * cos + rotated * sin).astype(keys.dtype, copy=False)
        return out


def rope_of(manifest: Manifest, component: str = "backbone") -> Rope | None:
    """A decoder's RoPE from the manifest: ``rope_theta`` from the checkpoint config
    (``model.backbone``, or ``model.speech`` for the speech decoder) and the component's
    ``head_dim``; None where the manifest does not say (exported by an older release)."""
    section = {"backbone": "backbone", "speech_decoder": "speech"}[component]
    config = manifest.model_config.get("model", manifest.model_config)
    part = config.get(section) if isinstance(config, dict) else None
    theta = part.get("rope_theta") if isinstance(part, dict) else None
    entry = manifest.components.get(component)
    head_dim = entry.head_dim if entry is not None else None
    if isinstance(theta, bool) or not isinstance(theta, int | float) or head_dim is None:
        return None
    return Rope(head_dim=head_dim, theta=float(theta))
