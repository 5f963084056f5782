"""The generation config: one TOML file -> frozen dataclasses, every key validated.

Problems name the key's dotted path and what is allowed (``mix.group: the ratios sum to
0.9; they must sum to 1``), with the nearest valid key for a typo, all reported at once in
one ``GenerationConfigError``. Presets: ``smoke`` (a handful of short samples, seconds to
generate) and ``eval`` (a few hundred, the paper's mix). A file may be partial: missing keys
take the defaults below, which are the ``eval`` preset's.

    samples = 300
    [duration]
    min_s = 12.0
    max_s = 40.0
    [mix]
    sampling = "stratified"      # or "random"
    group = { video = 0.7, audio = 0.3 }
    category = { offline_understanding = 0.56, proactive_duplex = 0.37, delegation = 0.07 }

The paper's category mix is 56 / 37 / 6 (rounded, summing to 99); the default gives the
remaining point to delegation so the ratios sum to 1.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from pydantic.dataclasses import dataclass

from venus.datagen import tts
from venus.datagen.domains import DOMAINS
from venus.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_SECTION = ConfigDict(extra="forbid", frozen=True)
SUM_TOLERANCE = 1e-6
VOICE = re.compile(r"[A-Za-z0-9_+.-]{1,64}")
Engine = Literal["espeak-ng", "flite", "pico"]
VOICE_LISTS = {"espeak-ng": "espeak_voices", "flite": "flite_voices", "pico": "pico_voices"}
NoiseKind = Literal["none", "white", "pink", "brown", "babble"]


def _range(low: float, high: float) -> AfterValidator:
    """A ``[a, b]`` pair with ``low <= a <= b <= high``."""

    def check(pair: tuple[float, float]) -> tuple[float, float]:
        a, b = pair
        if not low <= a <= b <= high:
            raise ValueError(f"{list(pair)} must be [a, b] with {low} <= a <= b <= {high}")
        return pair

    return AfterValidator(check)


def _voices(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not VOICE.fullmatch(name):
            raise ValueError(f"{name!r} is not a voice name ([A-Za-z0-9_+.-]{{1,64}})")
    return names


def _assistant_voice(value: str) -> str:
    """Empty, or ``ENGINE:NAME`` naming a voice the engine has (``tts.voice_problem``)."""
    if not value:
        return value
    engine, colon, name = value.partition(":")
    if not (engine and colon and name):
        raise ValueError(
            f'{value!r} is not "ENGINE:NAME" (e.g. "flite:kal16"); leave it "" to draw the '
            "assistant's voice per sample"
        )
    if engine not in get_args(Engine):
        raise ValueError(f"unknown engine {engine!r} in {value!r}; use espeak-ng, flite or pico")
    if not VOICE.fullmatch(name):
        raise ValueError(f"{name!r} is not a voice name ([A-Za-z0-9_+.-]{{1,64}})")
    try:
        problem = tts.voice_problem(cast(Engine, engine), name)
    except tts.SynthesisError as e:
        raise ValueError(str(e)) from e
    if problem is not None:
        raise ValueError(f"{value!r}: {problem}")
    return value


def _one_second(value: float) -> float:
    if value != 1.0:
        raise ValueError(f"{value} s: only 1.0 s chunks are supported (the model's schedule)")
    return value


FloatPair = tuple[StrictFloat, StrictFloat]
IntPair = tuple[StrictInt, StrictInt]


class _Mix:
    """Ratios that sum to 1 (each field a ratio in [0, 1])."""

    def __post_init__(self) -> None:
        total = math.fsum(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]
        if abs(total - 1.0) > SUM_TOLERANCE:
            raise ValueError(f"the ratios sum to {total:g}; they must sum to 1")

    def ratios(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


Ratio = Annotated[StrictFloat, Field(ge=0.0, le=1.0)]


@dataclass(config=_SECTION)
class GroupMix(_Mix):
    video: Ratio = 0.7
    audio: Ratio = 0.3


@dataclass(config=_SECTION)
class CategoryMix(_Mix):
    offline_understanding: Ratio = 0.56
    proactive_duplex: Ratio = 0.37
    delegation: Ratio = 0.07


@dataclass(config=_SECTION)
class EventMix(_Mix):
    backchannel: Ratio = 0.3
    other_directed: Ratio = 0.25
    background: Ratio = 0.2
    interruption: Ratio = 0.25


@dataclass(config=_SECTION)
class IntentMix(_Mix):
    stop: Ratio = 0.3
    revise: Ratio = 0.25
    cancel_pending: Ratio = 0.2
    change_topic: Ratio = 0.25


@dataclass(config=_SECTION)
class MixConfig:
    sampling: Literal["random", "stratified"] = Field(
        default="stratified",
        description="random: each sample draws its group and category; stratified: a "
        "low-discrepancy sequence, so every prefix of the set is close to the ratios.",
    )
    group: GroupMix = Field(default_factory=GroupMix)
    category: CategoryMix = Field(default_factory=CategoryMix)
    events: EventMix = Field(default_factory=EventMix, description="overlap events by kind")
    intents: IntentMix = Field(default_factory=IntentMix, description="interruptions by intent")


@dataclass(config=_SECTION)
class DurationConfig:
    min_s: StrictFloat = Field(default=12.0, ge=4.0, le=600.0)
    max_s: StrictFloat = Field(default=40.0, ge=4.0, le=600.0)

    def __post_init__(self) -> None:
        if self.max_s < self.min_s:
            raise ValueError(f"max_s: {self.max_s} must be at least min_s ({self.min_s})")


@dataclass(config=_SECTION)
class EventsConfig:
    max_per_sample: StrictInt = Field(default=3, ge=1, le=10)
    await_input_p: StrictFloat = Field(
        default=0.3, ge=0.0, le=1.0, description="other-directed speech while the assistant waits"
    )
    reply_outlasts_s: StrictFloat = Field(
        default=0.0,
        ge=0.0,
        le=5.0,
        description="a backchannel, aside or background line the assistant talks through ends "
        "at least this long before its reply does (drawn earlier into the reply, or left "
        "out), so carrying on can be heard after it: 2.0 clears Full-Duplex-Bench v1.5's "
        "1.5 s grace; 0 draws nothing, so sets are planned as before the key existed",
    )


@dataclass(config=_SECTION)
class DelegationConfig:
    capabilities: tuple[str, ...] = Field(default=tuple(DOMAINS), min_length=1)
    failure_p: StrictFloat = Field(default=0.15, ge=0.0, le=1.0)
    retry_p: StrictFloat = Field(default=0.5, ge=0.0, le=1.0, description="a failure is retried")
    early_offer_p: StrictFloat = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="a result ready while the user speaks (and the assistant listens) is "
        "offered then, not at its announcement: the assistant holds it until the user is "
        "done; 0 draws nothing, so sets are planned as before the key existed",
    )
    talk_on_p: StrictFloat = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="a delegation sample opens with the user talking on to someone else "
        "for 10-15 s while the work is pending (the result often ready in the middle: "
        "with early_offer_p, offered there and held); 0 draws nothing",
    )

    def __post_init__(self) -> None:
        unknown = [c for c in self.capabilities if c not in DOMAINS]
        if unknown:
            raise ValueError(f"capabilities: unknown {unknown}; choose from {', '.join(DOMAINS)}")


@dataclass(config=_SECTION)
class SpeechConfig:
    engines: tuple[Engine, ...] = Field(default=("espeak-ng", "flite"), min_length=1)
    espeak_voices: Annotated[tuple[str, ...], AfterValidator(_voices)] = Field(
        default=("en-us", "en-gb", "en-us+f3", "en-us+m3", "en-gb+f2", "en-us+f4"), min_length=1
    )
    flite_voices: Annotated[tuple[str, ...], AfterValidator(_voices)] = Field(
        default=("kal", "awb", "rms", "slt"), min_length=1
    )
    pico_voices: Annotated[tuple[str, ...], AfterValidator(_voices)] = Field(
        default=("en-US", "en-GB"), min_length=1
    )
    engine_weights: tuple[Annotated[StrictFloat, Field(ge=0.0)], ...] = Field(
        default=(),
        description="each engine's weight, in the order of engines; empty: all alike",
    )
    rate_wpm: Annotated[IntPair, _range(80, 400)] = (140, 200)
    pitch: Annotated[IntPair, _range(0, 99)] = (25, 75)
    gain_db: Annotated[FloatPair, _range(-20.0, 10.0)] = (-6.0, 3.0)
    formant: Annotated[FloatPair, _range(*tts.FORMANT)] = Field(
        default=(1.0, 1.0),
        description="the formant scale each person's voice draws (1.0: the voice's own; "
        "its rate and pitch are kept); the assistant's is always 1.0",
    )
    filler_p: StrictFloat = Field(default=0.3, ge=0.0, le=1.0, description="a user turn has {um}")
    pause_p: StrictFloat = Field(default=0.2, ge=0.0, le=1.0, description="... a [pause N]")
    restart_p: StrictFloat = Field(default=0.05, ge=0.0, le=1.0, description="... a -- restart")
    assistant_voice: Annotated[StrictStr, AfterValidator(_assistant_voice)] = Field(
        default="",
        description='"ENGINE:NAME": the assistant speaks with it in every sample (at the middle '
        'of rate_wpm and pitch) and no one else does; "" draws it per sample from the lists',
    )

    def __post_init__(self) -> None:
        weights = self.engine_weights
        if weights and (len(weights) != len(self.engines) or sum(weights) <= 0):
            raise ValueError(
                f"engine_weights: {list(weights)} (sum {sum(weights):g}) for the "
                f"{len(self.engines)} engines {list(self.engines)}: give one weight per "
                "engine, in its order, not all 0; or none, to draw them alike"
            )
        if self.fixed_assistant() is None:
            return
        for engine in self.engines:
            if not self.people_voices(engine):
                key = VOICE_LISTS[engine]
                raise ValueError(
                    f"assistant_voice: {self.assistant_voice} is the only voice in {key}, and "
                    f"no one else may speak with it; add another voice to speech.{key}, or "
                    f"take {engine} out of speech.engines"
                )

    def fixed_assistant(self) -> tuple[Engine, str] | None:
        """``assistant_voice`` as (engine, name); None when it is drawn per sample."""
        if not self.assistant_voice:
            return None
        engine, _, name = self.assistant_voice.partition(":")
        return cast(Engine, engine), name

    def people_voices(self, engine: Engine) -> tuple[str, ...]:
        """The voices the user, other people and babble draw from for ``engine``: its list,
        less the assistant's fixed voice."""
        names: tuple[str, ...] = getattr(self, VOICE_LISTS[engine])
        return tuple(n for n in names if (engine, n) != self.fixed_assistant())


@dataclass(config=_SECTION)
class AcousticsConfig:
    noise: tuple[NoiseKind, ...] = Field(
        default=("none", "white", "pink", "brown", "babble"), min_length=1
    )
    snr_db: Annotated[FloatPair, _range(-10.0, 60.0)] = (5.0, 30.0)
    reverb_p: StrictFloat = Field(default=0.5, ge=0.0, le=1.0)
    rt60_s: Annotated[FloatPair, _range(0.05, 3.0)] = (0.2, 0.8)
    far_gain_db: Annotated[FloatPair, _range(-40.0, 0.0)] = (-18.0, -8.0)
    level_change_p: StrictFloat = Field(default=0.2, ge=0.0, le=1.0)


@dataclass(config=_SECTION)
class VideoConfig:
    width_px: StrictInt = Field(default=448, ge=64, le=1920)
    height_px: StrictInt = Field(default=448, ge=64, le=1920)
    objects: Annotated[IntPair, _range(1, 9)] = (2, 6)


@dataclass(config=_SECTION)
class OutputConfig:
    full_duplex_bench: StrictBool = Field(
        default=True, description="also write the Full-Duplex-Bench v1.5 layout"
    )
    timeline_plots: StrictInt = Field(default=3, ge=0, le=100, description="PNG plots written")


@dataclass(config=_SECTION)
class GenerationConfig:
    samples: StrictInt = Field(default=300, ge=1, le=10_000_000)
    chunk_s: Annotated[StrictFloat, AfterValidator(_one_second)] = Field(
        default=1.0, description="the model's chunk, seconds (1.0: the runtime's schedule)"
    )
    duration: DurationConfig = Field(default_factory=DurationConfig)
    mix: MixConfig = Field(default_factory=MixConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)
    delegation: DelegationConfig = Field(default_factory=DelegationConfig)
    speech: SpeechConfig = Field(default_factory=SpeechConfig)
    acoustics: AcousticsConfig = Field(default_factory=AcousticsConfig)
    video: VideoConfig = Field(default_factory=VideoConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)


PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {  # every category and group, short: the whole pipeline in seconds
        "samples": 6,
        "duration": {"min_s": 8.0, "max_s": 16.0},
        "mix": {
            "group": {"video": 0.5, "audio": 0.5},
            "category": {
                "offline_understanding": 0.34,
                "proactive_duplex": 0.33,
                "delegation": 0.33,
            },
        },
        "output": {"timeline_plots": 2},
    },
    "eval": {"samples": 300},
}
_ADAPTER: TypeAdapter[GenerationConfig] = TypeAdapter(GenerationConfig)


class GenerationConfigError(ConfigError):
    """The generation config has problems; ``problems`` lists ``(key, message)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = "\n".join(
            f"  {key}: {message}" if key else f"  {message}" for key, message in problems
        )
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


def preset(name: str) -> GenerationConfig:
    """The named preset (``smoke`` or ``eval``)."""
    if name not in PRESETS:
        raise ConfigError(f"no preset {name!r}; choose one of {', '.join(PRESETS)}")
    return parse_config(PRESETS[name], source=f"preset {name}")


def load_config(path: Path) -> GenerationConfig:
    """Read and validate a TOML file; ConfigError naming the file and every bad key."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}; pass an existing TOML file") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise GenerationConfigError(str(path), [("", f"not valid TOML: {e}")]) from e
    return parse_config(data, source=str(path))


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> GenerationConfig:
    """Validate already-parsed TOML data."""
    try:
        return _ADAPTER.validate_python(dict(data))
    except ValidationError as e:
        errors = e.errors()
        locs = [tuple(err["loc"]) for err in errors]
        # a pair's own complaint hides its items' (and a union's arms repeat): keep the deepest
        kept = [
            err
            for err, loc in zip(errors, locs, strict=True)
            if not any(other[: len(loc)] == loc and len(other) > len(loc) for other in locs)
        ]
        raise GenerationConfigError(source, [_problem(err) for err in kept]) from None


def _problem(err: Any) -> tuple[str, str]:
    loc = [p for p in err["loc"] if isinstance(p, str)]
    key = ".".join(loc)
    kind, value = err["type"], err.get("input")
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        valid = _valid_keys(loc[:-1])
        close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"valid keys here: {', '.join(valid)}"
        return key, f"unknown key; {hint}"
    if kind == "missing" and isinstance(err["loc"][-1], int):
        return key, f"must be a pair [a, b] (got {value!r})"
    field = re.match(r"Value error, (\w+): ", str(err["msg"]))
    if kind == "value_error" and field and field[1] in _valid_keys(loc):
        return f"{key}.{field[1]}", str(err["msg"])[field.end() :]
    if kind == "literal_error":
        return key, f"{value!r} is not allowed; choose one of {err['ctx']['expected']}"
    message = str(err["msg"]).removeprefix("Value error, ")
    if kind != "value_error":
        message = f"{message[:1].lower()}{message[1:]} (got {value!r})"
    return key, message


def _valid_keys(path: list[str]) -> list[str]:
    cls: Any = GenerationConfig
    for name in path:
        cls = getattr(cls, "__pydantic_fields__", {}).get(name)
        cls = getattr(cls, "annotation", None)
    return sorted(getattr(cls, "__pydantic_fields__", {}))
