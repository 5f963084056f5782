"""How the frontend samples the model's text and speech tokens, and the flow decoder's
noise: ``[model] temperature``, ``top_p`` and ``flow_temperature`` where the configuration
sets them, else the engines' recommendation (their manifest's ``sampling``, written by
``venus export --temperature / --top-p / --flow-temperature``), else the daemon's
defaults. Light: ``venus doctor`` and the evaluations read it too."""

from __future__ import annotations

from dataclasses import dataclass

from venus.daemon.config.schema import (
    DEFAULT_FLOW_TEMPERATURE,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    ModelConfig,
)
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
    flow_temperature: float = DEFAULT_FLOW_TEMPERATURE  # the flow decoder's noise scale
    flow_temperature_from: str = "default"

    def describe(self) -> str:
        return (
            f"temperature {self.temperature:g} ({self.temperature_from}), "
            f"top_p {self.top_p:g} ({self.top_p_from}), "
            f"flow_temperature {self.flow_temperature:g} ({self.flow_temperature_from})"
        )


def sampling_of(model: ModelConfig, manifest: Manifest) -> SamplingChoice:
    """``[model] temperature``, ``top_p`` and ``flow_temperature`` where set, else the
    engines' recommendation, else the daemon's defaults."""
    advised = manifest.sampling or Sampling()

    def pick(own: float | None, engines: float | None, default: float) -> tuple[float, str]:
        if own is not None:
            return own, "config"
        if engines is not None:
            return engines, "engines"
        return default, "default"

    temperature, t_from = pick(model.temperature, advised.temperature, DEFAULT_TEMPERATURE)
    top_p, p_from = pick(model.top_p, advised.top_p, DEFAULT_TOP_P)
    flow, f_from = pick(model.flow_temperature, advised.flow_temperature, DEFAULT_FLOW_TEMPERATURE)
    return SamplingChoice(temperature, top_p, t_from, p_from, flow, f_from)
