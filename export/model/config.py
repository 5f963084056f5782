"""Model configurations: one frozen dataclass per component, presets, ``config.json`` I/O.

Torch-free: ``venus model info`` and the engines' manifest read these without torch.
A checkpoint's ``config.json`` is ``{"format": "venus-checkpoint", "version": 1,
"model": {...}}``; unknown keys and wrong types are errors naming the key.
"""

from __future__ import annotations

import json
from dataclasses import field, replace
from pathlib import Path
from typing import Any, Final, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from venus.errors import ExportError

FORMAT = "venus-checkpoint"
FORMAT_VERSION = 1
_CFG = ConfigDict(extra="forbid", frozen=True)

# Control and delegation tokens appended after the upstream text vocabulary, in this
# order (their ids are backbone.vocab_size + index). Changing the list changes ids:
# bump FORMAT_VERSION.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|listen|>",
    "<|speak|>",
    "<|turn_eos|>",
    "<|chunk_start|>",
    "<|chunk_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|delegate|>",
    "<|/delegate|>",
    "<|result|>",
    "<|/result|>",
    "<|memory|>",
    "<|/memory|>",
)
CONTROL_TOKENS = ("<|listen|>", "<|speak|>", "<|turn_eos|>")
S3_VOCAB = 6561  # CosyVoice2 S3 speech-token codebook (3^8 finite scalar quantisation)


@dataclass(config=_CFG)
class AudioEncoderConfig:
    """Whisper-encoder architecture on 80-bin log-mel, 5x pooling, MLP projector."""

    n_mels: int = Field(default=80, ge=1)
    sample_rate: int = Field(default=16000, ge=8000)
    hop_length: int = Field(default=160, ge=1)  # 10 ms at 16 kHz -> 100 mel frames / s
    d_model: int = Field(default=1024, ge=1)
    layers: int = Field(default=24, ge=1)
    heads: int = Field(default=16, ge=1)
    ffn_dim: int = Field(default=4096, ge=1)
    max_positions: int = Field(default=1500, ge=1)  # encoder frames (30 s at 50 Hz)
    pool: int = Field(default=5, ge=1)  # 50 Hz encoder frames -> 10 tokens / s
    left_context_chunks: int = Field(default=2, ge=0)  # attention window: this + N chunks
    layer_norm_eps: float = Field(default=1e-5, gt=0)


@dataclass(config=_CFG)
class VisionEncoderConfig:
    """SigLIP / SigLIP2 vision tower at a fixed resolution, perceiver resampler."""

    image_size: int = Field(default=448, ge=1)
    patch_size: int = Field(default=14, ge=1)
    channels: int = Field(default=3, ge=1)
    hidden_size: int = Field(default=1152, ge=1)
    layers: int = Field(default=27, ge=1)
    heads: int = Field(default=16, ge=1)
    intermediate_size: int = Field(default=4304, ge=1)
    layer_norm_eps: float = Field(default=1e-6, gt=0)
    queries: int = Field(default=64, ge=1)  # resampler output tokens per frame
    resampler_heads: int = Field(default=32, ge=1)
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size


@dataclass(config=_CFG)
class BackboneConfig:
    """Qwen3 decoder: GQA, q/k RMSNorm, RoPE, SwiGLU. ``vocab_size`` is the upstream text
    vocabulary; the special tokens are appended after it."""

    vocab_size: int = Field(default=151936, ge=1)
    hidden_size: int = Field(default=4096, ge=1)
    layers: int = Field(default=36, ge=1)
    heads: int = Field(default=32, ge=1)
    kv_heads: int = Field(default=8, ge=1)
    head_dim: int = Field(default=128, ge=1)
    intermediate_size: int = Field(default=12288, ge=1)
    rope_theta: float = Field(default=1e6, gt=0)
    rms_norm_eps: float = Field(default=1e-6, gt=0)
    max_positions: int = Field(default=40960, ge=1)
    tie_embeddings: bool = False

    @property
    def total_vocab(self) -> int:
        return self.vocab_size + len(SPECIAL_TOKENS)


@dataclass(config=_CFG)
class SpeechDecoderConfig:
    """Small decoder LM conditioned on backbone hidden states; emits S3 speech tokens.

    Vocabulary: the S3 codes ``0 .. codebook-1``, then ``end`` (= codebook) and an
    input-only ``start`` (= codebook + 1).
    """

    codebook: int = Field(default=S3_VOCAB, ge=2)
    token_rate_hz: int = Field(default=25, ge=1)
    hidden_size: int = Field(default=1024, ge=1)
    layers: int = Field(default=24, ge=1)
    heads: int = Field(default=16, ge=1)
    kv_heads: int = Field(default=8, ge=1)
    head_dim: int = Field(default=64, ge=1)
    intermediate_size: int = Field(default=3072, ge=1)
    rope_theta: float = Field(default=1e4, gt=0)
    rms_norm_eps: float = Field(default=1e-6, gt=0)

    @property
    def end_token(self) -> int:
        return self.codebook

    @property
    def start_token(self) -> int:
        return self.codebook + 1

    @property
    def vocab(self) -> int:
        return self.codebook + 2


@dataclass(config=_CFG)
class FlowDecoderConfig:
    """Chunk-causal flow matching: speech tokens -> 80-bin mel at 50 Hz (2 frames a token)."""

    codebook: int = Field(default=S3_VOCAB, ge=2)
    mel_bins: int = Field(default=80, ge=1)
    frames_per_token: int = Field(default=2, ge=1)
    d_model: int = Field(default=512, ge=1)
    heads: int = Field(default=8, ge=1)
    ffn_dim: int = Field(default=2048, ge=1)
    encoder_layers: int = Field(default=6, ge=1)
    estimator_layers: int = Field(default=8, ge=1)
    lookahead_tokens: int = Field(default=3, ge=0)
    euler_steps: int = Field(default=10, ge=1)
    prompt_frames: int = Field(default=8, ge=0)  # previous chunk's mel frames seen by the next


VocoderSource = Literal["none", "sine"]  # the vocoder's excitation (VocoderConfig.source)
VOCODER_SOURCES: tuple[str, ...] = get_args(VocoderSource)
# The output mel (the flow decoder's, the vocoder's input) is measured on the 24 kHz speech
# with a 960-sample Hann (two hops) in a 1024-point FFT, 80 bands up to 8 kHz
# (train/speech_units.output_mel); a Griffin-Lim vocoder inverts that filterbank.
OUTPUT_MEL_N_FFT: Final = 1024
OUTPUT_MEL_WINDOW: Final = 960
OUTPUT_MEL_FMAX_HZ: Final = 8000.0
VocoderKind = Literal["hifigan", "griffin_lim"]  # what the vocoder is (VocoderConfig.kind)
VOCODER_KINDS: tuple[str, ...] = get_args(VocoderKind)


@dataclass(config=_CFG)
class VocoderConfig:
    """Causal HiFi-GAN-style vocoder: mel (50 Hz) -> 24 kHz PCM, streamable sample-exact.

    ``source`` "sine" adds a neural-source-filter excitation (``vocoder_source.py``): a
    harmonic sine of an f0 the vocoder predicts from the mel, ``harmonics`` of them.
    The source fields are written only when ``source`` is not "none" (``SOURCE_FIELDS``),
    so a config without a source reads and writes as it did before they existed.

    ``kind`` "griffin_lim" is no network at all (``griffin_lim.py``): the mel's magnitude
    spectrum, its phase found by ``iterations`` rounds of streaming Griffin-Lim. Its fields
    are written only for that kind (``KIND_FIELDS``); the HiFi-GAN fields then go unused.
    """

    mel_bins: int = Field(default=80, ge=1)
    sample_rate: int = Field(default=24000, ge=8000)
    upsample_rates: tuple[int, ...] = (8, 5, 3, 4)  # product = hop = 480 samples (20 ms)
    channels: int = Field(default=512, ge=1)
    kernel_size: int = Field(default=7, ge=1)
    resblock_kernels: tuple[int, ...] = (3, 7, 11)
    resblock_dilations: tuple[int, ...] = (1, 3, 5)
    source: VocoderSource = "none"  # excitation injected into the upsampling
    harmonics: int = Field(default=8, ge=1, le=64)  # sine source: f0 and its overtones
    kind: VocoderKind = "hifigan"
    iterations: int = Field(default=16, ge=1, le=256)  # griffin_lim: phase rounds a step

    def __post_init__(self) -> None:
        if self.kind == "griffin_lim" and self.source != "none":
            raise ValueError("a griffin_lim vocoder has no source: set source to none")
        if self.kind == "griffin_lim" and self.hop % 4:
            raise ValueError(f"a griffin_lim vocoder needs a hop divisible by 4, not {self.hop}")

    @property
    def hop(self) -> int:
        out = 1
        for r in self.upsample_rates:
            out *= r
        return out


@dataclass(config=_CFG)
class ModelConfig:
    """A whole Venus model. ``frontend`` omni has a vision encoder; audio has none."""

    name: str = "venus-9b"
    frontend: Literal["omni", "audio"] = "omni"
    chunk_s: float = Field(default=1.0, gt=0)
    audio: AudioEncoderConfig = field(default_factory=AudioEncoderConfig)
    vision: VisionEncoderConfig | None = field(default_factory=VisionEncoderConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    speech: SpeechDecoderConfig = field(default_factory=SpeechDecoderConfig)
    flow: FlowDecoderConfig = field(default_factory=FlowDecoderConfig)
    vocoder: VocoderConfig = field(default_factory=VocoderConfig)

    def __post_init__(self) -> None:
        if (self.frontend == "omni") != (self.vision is not None):
            raise ValueError("frontend 'omni' needs a vision config; 'audio' must have none")
        if self.flow.mel_bins != self.vocoder.mel_bins:
            raise ValueError("flow.mel_bins and vocoder.mel_bins differ")
        if self.flow.codebook != self.speech.codebook:
            raise ValueError("flow.codebook and speech.codebook differ")
        b = self.backbone
        if b.heads % b.kv_heads:
            raise ValueError("backbone.heads must be a multiple of backbone.kv_heads")
        s = self.speech
        if s.heads % s.kv_heads:
            raise ValueError("speech.heads must be a multiple of speech.kv_heads")

    # Derived per-chunk figures of the schedule.
    @property
    def mel_frames_per_chunk(self) -> int:
        return round(self.chunk_s * self.audio.sample_rate / self.audio.hop_length)

    @property
    def audio_frames_per_chunk(self) -> int:
        return self.mel_frames_per_chunk // 2  # conv2 has stride 2

    @property
    def audio_tokens_per_chunk(self) -> int:
        return self.audio_frames_per_chunk // self.audio.pool

    @property
    def speech_tokens_per_chunk(self) -> int:
        return round(self.chunk_s * self.speech.token_rate_hz)

    @property
    def special_token_ids(self) -> dict[str, int]:
        return {t: self.backbone.vocab_size + i for i, t in enumerate(SPECIAL_TOKENS)}


def _tiny(frontend: Literal["omni", "audio"]) -> ModelConfig:
    return ModelConfig(
        name="tiny" if frontend == "omni" else "tiny-audio",
        frontend=frontend,
        audio=AudioEncoderConfig(d_model=64, layers=2, heads=4, ffn_dim=128, max_positions=300),
        vision=VisionEncoderConfig(
            image_size=64,
            patch_size=16,
            hidden_size=48,
            layers=2,
            heads=3,
            intermediate_size=96,
            queries=8,
            resampler_heads=4,
        )
        if frontend == "omni"
        else None,
        backbone=BackboneConfig(
            vocab_size=512,
            hidden_size=64,
            layers=2,
            heads=4,
            kv_heads=2,
            head_dim=16,
            intermediate_size=128,
            max_positions=8192,
            tie_embeddings=True,
        ),
        speech=SpeechDecoderConfig(
            hidden_size=64,
            layers=2,
            heads=4,
            kv_heads=2,
            head_dim=16,
            intermediate_size=128,
        ),
        flow=FlowDecoderConfig(
            d_model=64,
            heads=4,
            ffn_dim=128,
            encoder_layers=2,
            estimator_layers=2,
            euler_steps=4,
        ),
        vocoder=VocoderConfig(channels=32, resblock_kernels=(3,), resblock_dilations=(1, 3)),
    )


def _small(frontend: Literal["omni", "audio"]) -> ModelConfig:
    """The tiny model with a wider, deeper audio encoder and backbone (hearing which
    question was asked is what tiny lacks; docs/training.md). The speech side, flow decoder
    and vocoder are tiny's, so a voice trained for tiny speaks for it too."""
    base = _tiny(frontend)
    return replace(
        base,
        name="small" if frontend == "omni" else "small-audio",
        audio=AudioEncoderConfig(d_model=128, layers=3, heads=4, ffn_dim=256, max_positions=300),
        backbone=replace(
            base.backbone, hidden_size=96, layers=3, head_dim=24, intermediate_size=256
        ),
    )


def _tiny_wide(frontend: Literal["omni", "audio"]) -> ModelConfig:
    """The tiny model with small's backbone (96 wide, 3 layers) and tiny's audio encoder:
    a listening stage trained for tiny serves it (``train/warm.py``), and what it adds over
    tiny is the room to decide from what was heard (docs/training-log.md, nineteenth round)."""
    base = _tiny(frontend)
    return replace(
        base,
        name="tiny-wide" if frontend == "omni" else "tiny-wide-audio",
        backbone=_small(frontend).backbone,
    )


def _venus_9b(frontend: Literal["omni", "audio"]) -> ModelConfig:
    return ModelConfig(
        name="venus-9b" if frontend == "omni" else "venus-9b-audio",
        frontend=frontend,
        vision=VisionEncoderConfig() if frontend == "omni" else None,
    )


PRESETS = {
    "tiny": lambda: _tiny("omni"),
    "tiny-audio": lambda: _tiny("audio"),
    "tiny-wide": lambda: _tiny_wide("omni"),
    "tiny-wide-audio": lambda: _tiny_wide("audio"),
    "small": lambda: _small("omni"),
    "small-audio": lambda: _small("audio"),
    "venus-9b": lambda: _venus_9b("omni"),
    "venus-9b-audio": lambda: _venus_9b("audio"),
}

# The presets `venus train` and `venus train-voice` take: those a CPU can train.
TRAINABLE_PRESETS = ("tiny", "tiny-audio", "tiny-wide", "tiny-wide-audio", "small", "small-audio")

_ADAPTER: TypeAdapter[ModelConfig] = TypeAdapter(ModelConfig)
_VOCODER: TypeAdapter[VocoderConfig] = TypeAdapter(VocoderConfig)


# VocoderConfig fields written only when the vocoder has a source, or is Griffin-Lim (its
# docstring).
SOURCE_FIELDS = ("source", "harmonics")
KIND_FIELDS = ("kind", "iterations")


def vocoder_to_dict(cfg: VocoderConfig) -> dict[str, Any]:
    """``cfg`` as JSON values, without the ``SOURCE_FIELDS`` left at their defaults when it
    has no source, nor the ``KIND_FIELDS`` when it is HiFi-GAN (configs from before those
    fields read back the same)."""
    out: dict[str, Any] = _VOCODER.dump_python(cfg, mode="json")
    defaults = _VOCODER.dump_python(VocoderConfig(), mode="json")
    unused = (SOURCE_FIELDS if cfg.source == "none" else ()) + (
        KIND_FIELDS if cfg.kind == "hifigan" else ()
    )
    for name in unused:
        if out[name] == defaults[name]:
            del out[name]
    return out


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    model: dict[str, Any] = _ADAPTER.dump_python(cfg, mode="json")
    model["vocoder"] = vocoder_to_dict(cfg.vocoder)
    return {"format": FORMAT, "version": FORMAT_VERSION, "model": model}


def config_from_dict(data: Any, source: str) -> ModelConfig:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExportError(f'{source}: not a Venus model config (expected "format": "{FORMAT}")')
    if data.get("version") != FORMAT_VERSION:
        raise ExportError(
            f"{source}: config version {data.get('version')!r} is not supported "
            f"(this release reads version {FORMAT_VERSION}); re-create the checkpoint"
        )
    try:
        return _ADAPTER.validate_python(data.get("model", {}))
    except ValidationError as e:
        problems = "; ".join(
            f"model.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise ExportError(f"{source}: invalid model config: {problems}") from None


def save_config(cfg: ModelConfig, path: Path) -> None:
    path.write_text(json.dumps(config_to_dict(cfg), indent=2) + "\n")


def load_config(path: Path) -> ModelConfig:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: not valid JSON: {e}") from e
    return config_from_dict(data, str(path))


def resolve_config(name_or_path: str) -> ModelConfig:
    """A preset name, a ``config.json``, or a checkpoint directory holding one."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]()
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise ExportError(
            f"{name_or_path}: neither a preset ({', '.join(PRESETS)}) nor a config file "
            "or checkpoint directory"
        )
    return load_config(path)


__all__ = [
    "CONTROL_TOKENS",
    "PRESETS",
    "SOURCE_FIELDS",
    "SPECIAL_TOKENS",
    "AudioEncoderConfig",
    "BackboneConfig",
    "FlowDecoderConfig",
    "ModelConfig",
    "SpeechDecoderConfig",
    "VisionEncoderConfig",
    "VocoderConfig",
    "load_config",
    "replace",
    "resolve_config",
    "save_config",
    "vocoder_to_dict",
]
