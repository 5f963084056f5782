"""``venus train-voice --config FILE``: the voice recipe, TOML. Every key has a default;
an unknown key or a bad value is an error naming it.

    [data]
    validation = 0.1         # held-out share: the same split as `venus train` when this and
    seed = 0                 # the seed equal its data.validation and model.seed
    samples = 0              # the set's first N samples only (0: all): the same voice from a
                             # larger set drawn at the same seed (its first N are the same)

    [units]
    k = 1024                 # speech codes (speech_units.Codebook), fitted on the training split
    iterations = 20          # k-means iterations

    [flow]                   # the flow decoder: codes -> normalised mel
    steps = 3000
    batch = 8                # windows a step
    learning_rate = 1e-3     # AdamW peak; linear warm-up, cosine decay to 10%
    warmup_steps = 100
    window_s = 3.0           # a window: whole 1 s groups of a reply, the daemon's
    prior_weight = 1.0       # the L1 of mu (the token encoder's mel prior) beside the velocity MSE
    d_model = 128            # sizes; the rest of the architecture is the preset's
    heads = 4
    ffn_dim = 256
    encoder_layers = 2
    estimator_layers = 2
    euler_steps = 4          # the daemon's Euler steps from noise to mel

    [vocoder]                # normalised mel -> 24 kHz PCM
    kind = "hifigan"         # "hifigan" (trained; the keys below) or "griffin_lim": no
    iterations = 16          # weights, the phase found by this many streaming rounds
    steps = 3000
    batch = 8                # segments a step
    learning_rate = 1e-3
    warmup_steps = 100
    segment_s = 1.0          # of real speech, its ground-truth mel as input
    mel_weight = 1.0         # the output's log-mel L1 beside the multi-resolution STFT loss
    channels = 128
    kernels = [3, 7]         # residual blocks per stage (their kernel sizes)
    dilations = [1, 3, 5]
    source = "none"          # excitation: none, or "sine" (neural source-filter, f0 from the mel)
    harmonics = 8            # sine: f0 and its overtones summed
    f0_weight = 1.0          # sine: the f0 head's loss (ln f0 L1 + voicing BCE) beside the rest

    [train]
    preset = "tiny"          # the architecture the voice is for (tiny, tiny-audio, small, ...)
    seed = 0                 # initial weights, windows, segments, noise
    checkpoint_every = 500   # steps between a measurement and a resumable state
    threads = 0              # torch threads (0: torch's default)

    [eval]
    utterances = 6           # held-out replies measured (word error rates); 0: none
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from venus.errors import VenusError
from venus.export.model.config import (
    TRAINABLE_PRESETS,
    VOCODER_KINDS,
    VOCODER_SOURCES,
    VocoderKind,
    VocoderSource,
)
from venus.train.runlog import read_recipe

__all__ = ["VoiceConfig", "VoiceConfigError", "load_voice_config", "parse_voice_config"]

PRESETS = TRAINABLE_PRESETS
SOURCES = VOCODER_SOURCES  # VocoderConfig.source
KINDS = VOCODER_KINDS  # VocoderConfig.kind


class VoiceConfigError(VenusError):
    """The voice recipe is not valid: the message names the key."""


@dataclass(frozen=True)
class DataSection:
    validation: float = 0.1
    seed: int = 0
    samples: int = 0


@dataclass(frozen=True)
class UnitsSection:
    k: int = 1024
    iterations: int = 20


@dataclass(frozen=True)
class FlowSection:
    steps: int = 3000
    batch: int = 8
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    window_s: float = 3.0
    prior_weight: float = 1.0
    d_model: int = 128
    heads: int = 4
    ffn_dim: int = 256
    encoder_layers: int = 2
    estimator_layers: int = 2
    euler_steps: int = 4


@dataclass(frozen=True)
class VocoderSection:
    kind: VocoderKind = "hifigan"  # parsed as a str, checked against KINDS
    iterations: int = 16
    steps: int = 3000
    batch: int = 8
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    segment_s: float = 1.0
    mel_weight: float = 1.0
    channels: int = 128
    kernels: tuple[int, ...] = (3, 7)
    dilations: tuple[int, ...] = (1, 3, 5)
    source: VocoderSource = "none"  # parsed as a str, checked against SOURCES
    harmonics: int = 8
    f0_weight: float = 1.0


@dataclass(frozen=True)
class TrainSection:
    preset: str = "tiny"
    seed: int = 0
    checkpoint_every: int = 500
    threads: int = 0


@dataclass(frozen=True)
class EvalSection:
    utterances: int = 6


@dataclass(frozen=True)
class VoiceConfig:
    data: DataSection = field(default_factory=DataSection)
    units: UnitsSection = field(default_factory=UnitsSection)
    flow: FlowSection = field(default_factory=FlowSection)
    vocoder: VocoderSection = field(default_factory=VocoderSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)

    @property
    def vocoder_steps(self) -> int:
        """The vocoder's training steps: none for Griffin-Lim, which has no weights."""
        return 0 if self.vocoder.kind == "griffin_lim" else self.vocoder.steps

    @property
    def steps(self) -> int:
        """The run's steps: each trains the flow until its steps, the vocoder until its."""
        return max(self.flow.steps, self.vocoder_steps)

    def to_toml_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for f in fields(self):
            section = getattr(self, f.name)
            out[f.name] = {
                s.name: list(v) if isinstance(v := getattr(section, s.name), tuple) else v
                for s in fields(section)
            }
        return out


def _hint(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]}?" if close else f" (known: {', '.join(known)})"


def _value(raw: Any, default: Any, path: str, source: str) -> Any:
    """``raw`` as the type of ``default`` (an int passes for a float, a list for a tuple)."""
    if isinstance(default, tuple):
        if isinstance(raw, list) and all(type(v) is int for v in raw):
            return tuple(raw)
        raise VoiceConfigError(f"{source}: {path} must be a list of int, not {raw!r}")
    if isinstance(default, float) and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if type(raw) is not type(default):
        raise VoiceConfigError(f"{source}: {path} must be a {type(default).__name__}, not {raw!r}")
    return raw


def parse_voice_config(data: dict[str, Any], source: str = "config") -> VoiceConfig:
    defaults = VoiceConfig()
    sections = {f.name: getattr(defaults, f.name) for f in fields(defaults)}
    parsed: dict[str, Any] = {}
    for name, table in data.items():
        if name not in sections or not isinstance(table, dict):
            raise VoiceConfigError(f"{source}: unknown section [{name}]{_hint(name, [*sections])}")
        section = sections[name]
        keys = [f.name for f in fields(section)]
        values = {}
        for key, raw in table.items():
            if key not in keys:
                raise VoiceConfigError(f"{source}: unknown key {name}.{key}{_hint(key, keys)}")
            values[key] = _value(raw, getattr(section, key), f"{name}.{key}", source)
        parsed[name] = type(section)(**values)
    cfg = VoiceConfig(**parsed)
    _check(cfg, source)
    return cfg


def _check(cfg: VoiceConfig, source: str) -> None:
    f, v, t = cfg.flow, cfg.vocoder, cfg.train
    checks = [
        (0.0 <= cfg.data.validation < 1.0, "data.validation must be in [0, 1)"),
        (cfg.data.samples >= 0, "data.samples must be >= 0 (0: the whole set)"),
        (2 <= cfg.units.k <= 6561, "units.k must be in [2, 6561] (the model's speech codes)"),
        (cfg.units.iterations >= 1, "units.iterations must be at least 1"),
        (t.preset in PRESETS, f"train.preset must be one of {', '.join(PRESETS)}"),
        (t.checkpoint_every >= 1, "train.checkpoint_every must be at least 1"),
        (t.threads >= 0, "train.threads must be >= 0"),
        (cfg.eval.utterances >= 0, "eval.utterances must be >= 0"),
    ]
    for name, s in (("flow", f), ("vocoder", v)):
        checks += [
            (s.steps >= 0, f"{name}.steps must be >= 0"),
            (s.batch >= 1, f"{name}.batch must be at least 1"),
            (s.learning_rate > 0, f"{name}.learning_rate must be positive"),
            (s.warmup_steps >= 0, f"{name}.warmup_steps must be >= 0"),
        ]
    checks += [
        (f.window_s >= 1.0 and f.window_s == int(f.window_s),
         "flow.window_s must be a whole number of 1 s groups (at least 1)"),
        (f.prior_weight >= 0, "flow.prior_weight must be >= 0"),
        (f.d_model >= 1 and f.heads >= 1 and f.d_model % f.heads == 0,
         "flow.d_model must be a positive multiple of flow.heads"),
        (f.ffn_dim >= 1, "flow.ffn_dim must be at least 1"),
        (f.encoder_layers >= 1, "flow.encoder_layers must be at least 1"),
        (f.estimator_layers >= 1, "flow.estimator_layers must be at least 1"),
        (f.euler_steps >= 1, "flow.euler_steps must be at least 1"),
        (0.2 <= v.segment_s <= 10.0 and abs(v.segment_s * 50 - round(v.segment_s * 50)) < 1e-9,
         "vocoder.segment_s must be 0.2-10 s in whole 20 ms frames"),
        (v.mel_weight >= 0, "vocoder.mel_weight must be >= 0"),
        (v.channels >= 1, "vocoder.channels must be at least 1"),
        (bool(v.kernels) and all(k >= 1 for k in v.kernels),
         "vocoder.kernels must be a non-empty list of sizes >= 1"),
        (bool(v.dilations) and all(d >= 1 for d in v.dilations),
         "vocoder.dilations must be a non-empty list of dilations >= 1"),
        (v.source in SOURCES, f"vocoder.source must be one of {', '.join(SOURCES)}, "
                              f"not {v.source!r}"),
        (v.kind in KINDS, f"vocoder.kind must be one of {', '.join(KINDS)}, not {v.kind!r}"),
        (1 <= v.iterations <= 256, "vocoder.iterations must be in [1, 256]"),
        (v.kind == "hifigan" or v.source == "none",
         "vocoder.source needs vocoder.kind = \"hifigan\" (Griffin-Lim has no source)"),
        (1 <= v.harmonics <= 64, "vocoder.harmonics must be in [1, 64]"),
        (v.f0_weight >= 0, "vocoder.f0_weight must be >= 0"),
        (cfg.steps >= 1, "flow.steps or vocoder.steps must be at least 1"
                         + (" (a griffin_lim vocoder has no steps)"
                            if v.kind == "griffin_lim" else "")),
    ]  # fmt: skip
    for ok, message in checks:
        if not ok:
            raise VoiceConfigError(f"{source}: {message}")


def load_voice_config(path: Path | None) -> VoiceConfig:
    if path is None:
        return VoiceConfig()
    return parse_voice_config(read_recipe(path, VoiceConfigError), str(path))


def with_samples(cfg: VoiceConfig, samples: int) -> VoiceConfig:
    """``cfg`` with ``data.samples`` set (``venus train-voice --samples``), checked."""
    out = replace(cfg, data=replace(cfg.data, samples=samples))
    _check(out, "--samples")
    return out
