"""Either vocoder: the trained HiFi-GAN one (``vocoder.py``) or Griffin-Lim
(``griffin_lim.py``), as ``VocoderConfig.kind`` says. Both take the normalised mel and
stream with a ``VocoderState``."""

from __future__ import annotations

from venus.export.model.config import VocoderConfig
from venus.export.model.griffin_lim import GriffinLimVocoder
from venus.export.model.vocoder import Vocoder

__all__ = ["AnyVocoder", "make_vocoder"]

AnyVocoder = Vocoder | GriffinLimVocoder


def make_vocoder(cfg: VocoderConfig) -> AnyVocoder:
    """The vocoder ``cfg.kind`` names."""
    return GriffinLimVocoder(cfg) if cfg.kind == "griffin_lim" else Vocoder(cfg)
