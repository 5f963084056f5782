"""How the frontend samples the model's text and speech tokens: ``[model] temperature``
and ``top_p`` where the configuration sets them, else the engines' recommendation (their
manifest's ``sampling``, written by ``venus export --temperature / --top-p``), else the
daemon's defaults. Light: ``venus doctor`` and the evaluations read it too."""

from __future__ import annotations

from dataclasses import dataclass

from venus.daemon.config.schema import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, ModelConfig
from venus.engines.manifest import Manifest, Sampling


@dataclass(frozen=True)
class SamplingChoice:
    """The temperature and nucleus mass a session samples text and speech with, and
    where each came from: "config" ([model]), "engines" (their manifest's
    recommendation, ``venus export --temperature / --top-p``) or "default"."""

    temperature: float
    top_p: float
    temperature_from: str
    top_p_from: str

    def describe(self) -> str:
        return (
            f"temperature {self.temperature:g} ({self.temperature_from}), "
            f"top_p {self.top_p:g} ({self.top_p_from})"
        )


def sampling_of(model: ModelConfig, manifest: Manifest) -> SamplingChoice:
    """``[model] temperature`` and ``top_p`` where set, else the engines' recommendation,
    else the daemon's defaults."""
    advised = manifest.sampling or Sampling()

    def pick(own: float | None, engines: float | None, default: float) -> tuple[float, str]:
        if own is not None:
            return own, "config"
        if engines is not None:
            return engines, "engines"
        return default, "default"

    temperature, t_from = pick(model.temperature, advised.temperature, DEFAULT_TEMPERATURE)
    top_p, p_from = pick(model.top_p, advised.top_p, DEFAULT_TOP_P)
    return SamplingChoice(temperature, top_p, t_from, p_from)
