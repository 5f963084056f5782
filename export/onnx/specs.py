"""Graph specifications: names, dtypes and shapes of every graph's inputs and outputs.

These are docs/engines.md in code. A dimension is a fixed size (from the model config),
a symbolic name (``batch``, ``sequence``, ``past_sequence``...) or, where one size
follows from others, an expression of them (``group + 3``, ``2 * group``,
``condition_length + sequence``). The exporter stamps these names on the ONNX graph,
and the manifest reads them back from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from venus.errors import ExportError
from venus.export.model.config import FlowDecoderConfig, ModelConfig, VocoderConfig
from venus.export.model.flow import FlowDecoder
from venus.export.model.venus import VenusModel
from venus.export.model.vocoders import AnyVocoder
from venus.export.onnx import graphs

Dim = int | str


@dataclass(frozen=True)
class TensorTemplate:
    name: str
    dtype: str  # "float" (float32, or float16 at fp16 precision) or "int64"
    shape: tuple[Dim, ...]


@dataclass(frozen=True)
class KVLayout:
    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class GraphSpec:
    """One graph: its wrapper module, inputs, outputs and KV layout (if it has a cache)."""

    name: str
    module: nn.Module
    inputs: tuple[TensorTemplate, ...]
    outputs: tuple[TensorTemplate, ...]
    kv: KVLayout | None = None
    varargs: int = 0  # trailing inputs passed as ``*past`` (past_key_values / past_conv)


def dim_size(dim: Dim, sizes: dict[str, int]) -> int:
    """The size of ``dim`` given the symbolic sizes: ``"group + 3"`` with group 5 -> 8."""
    if isinstance(dim, int):
        return dim
    for op in (" + ", " * "):
        if op in dim:
            left, right = dim.split(op, 1)
            a, b = dim_size(_term(left), sizes), dim_size(_term(right), sizes)
            return a + b if op == " + " else a * b
    if dim not in sizes:
        raise ExportError(f"no size given for the dimension {dim!r}")
    return sizes[dim]


def _term(text: str) -> Dim:
    return int(text) if text.isdigit() else text


def _kv(prefix: str, layout: KVLayout, length: str) -> tuple[TensorTemplate, ...]:
    shape: tuple[Dim, ...] = ("batch", layout.kv_heads, length, layout.head_dim)
    return tuple(
        TensorTemplate(f"{prefix}.{i}.{part}", "float", shape)
        for i in range(layout.layers)
        for part in ("key", "value")
    )


def graph_specs(model: VenusModel) -> list[GraphSpec]:
    """Every graph of ``model`` in export order (no vision_encoder for an audio frontend)."""
    cfg: ModelConfig = model.cfg
    hidden = cfg.backbone.hidden_size
    specs = [_embedding(model, hidden), _audio(model, hidden)]
    if model.vision_encoder is not None:
        specs.append(_vision(model, hidden))
    return [*specs, _backbone(model), _speech(model, hidden), _flow(model), _vocoder(model)]


def _embedding(model: VenusModel, hidden: int) -> GraphSpec:
    return GraphSpec(
        "embedding",
        graphs.EmbeddingGraph(model.backbone),
        (TensorTemplate("input_ids", "int64", ("batch", "sequence")),),
        (TensorTemplate("inputs_embeds", "float", ("batch", "sequence", hidden)),),
    )


def _vision(model: VenusModel, hidden: int) -> GraphSpec:
    v = model.cfg.vision
    if v is None or model.vision_encoder is None:
        raise ExportError("an audio-frontend model has no vision encoder to export")
    return GraphSpec(
        "vision_encoder",
        graphs.VisionEncoderGraph(model.vision_encoder),
        (TensorTemplate("pixels", "float", ("batch", v.channels, v.image_size, v.image_size)),),
        (TensorTemplate("tokens", "float", ("batch", v.queries, hidden)),),
    )


def _audio(model: VenusModel, hidden: int) -> GraphSpec:
    cfg = model.cfg
    d = cfg.audio.d_model
    return GraphSpec(
        "audio_encoder",
        graphs.AudioEncoderGraph(model.audio_encoder),
        (
            TensorTemplate("mel", "float", ("batch", cfg.audio.n_mels, cfg.mel_frames_per_chunk)),
            TensorTemplate("context", "float", ("batch", "context_frames", d)),
        ),
        (
            TensorTemplate("tokens", "float", ("batch", cfg.audio_tokens_per_chunk, hidden)),
            TensorTemplate("new_context", "float", ("batch", "new_context_frames", d)),
        ),
    )


def _backbone(model: VenusModel) -> GraphSpec:
    b = model.cfg.backbone
    kv = KVLayout(b.layers, b.kv_heads, b.head_dim)
    return GraphSpec(
        "backbone",
        graphs.BackboneGraph(model.backbone),
        (
            TensorTemplate("inputs_embeds", "float", ("batch", "sequence", b.hidden_size)),
            TensorTemplate("attention_mask", "int64", ("batch", "total_sequence")),
            TensorTemplate("position_ids", "int64", ("batch", "sequence")),
            *_kv("past_key_values", kv, "past_sequence"),
        ),
        (
            TensorTemplate("logits", "float", ("batch", "sequence", b.total_vocab)),
            TensorTemplate("hidden_states", "float", ("batch", "sequence", b.hidden_size)),
            *_kv("present", kv, "total_sequence"),
        ),
        kv,
        varargs=2 * kv.layers,
    )


def _speech(model: VenusModel, hidden: int) -> GraphSpec:
    s = model.cfg.speech
    kv = KVLayout(s.layers, s.kv_heads, s.head_dim)
    new = "condition_length + sequence"
    return GraphSpec(
        "speech_decoder",
        graphs.SpeechDecoderGraph(model.speech_decoder),
        (
            TensorTemplate("condition", "float", ("batch", "condition_length", hidden)),
            TensorTemplate("input_ids", "int64", ("batch", "sequence")),
            TensorTemplate("attention_mask", "int64", ("batch", "total_sequence")),
            TensorTemplate("position_ids", "int64", ("batch", new)),
            *_kv("past_key_values", kv, "past_sequence"),
        ),
        (
            TensorTemplate("logits", "float", ("batch", new, s.vocab)),
            *_kv("present", kv, "total_sequence"),
        ),
        kv,
        varargs=2 * kv.layers,
    )


def _flow(model: VenusModel) -> GraphSpec:
    return flow_spec(model.cfg.flow, model.flow_decoder)


def flow_spec(f: FlowDecoderConfig, flow: FlowDecoder) -> GraphSpec:
    """The flow decoder's graph, from its config and module alone (``reflow.py`` re-exports
    it from a voice, without the rest of the model)."""
    kv = KVLayout(f.encoder_layers, f.heads, f.d_model // f.heads)
    tokens = f"group + {f.lookahead_tokens}" if f.lookahead_tokens else "group"
    frames = f"{f.frames_per_token} * group" if f.frames_per_token > 1 else "group"
    return GraphSpec(
        "flow_decoder",
        graphs.FlowDecoderGraph(flow),
        (
            TensorTemplate("tokens", "int64", ("batch", tokens)),
            TensorTemplate("token_mask", "float", ("batch", tokens)),
            TensorTemplate("noise", "float", ("batch", f.mel_bins, frames)),
            TensorTemplate("prompt", "float", ("batch", f.mel_bins, f.prompt_frames)),
            *_kv("past_key_values", kv, "past_sequence"),
        ),
        (
            TensorTemplate("mel", "float", ("batch", f.mel_bins, frames)),
            *_kv("present", kv, "total_sequence"),
        ),
        kv,
        varargs=2 * kv.layers,
    )


def _vocoder(model: VenusModel) -> GraphSpec:
    return vocoder_spec(model.cfg.vocoder, model.vocoder)


def vocoder_spec(v: VocoderConfig, vocoder: AnyVocoder) -> GraphSpec:
    """The vocoder's graph, from its config and module alone (``revocode.py`` re-exports a
    Griffin-Lim vocoder without the rest of the model)."""
    convs = vocoder.cache_shapes()
    frames = f"{v.hop} * frames"

    def conv(prefix: str) -> tuple[TensorTemplate, ...]:
        return tuple(
            TensorTemplate(f"{prefix}.{k}", "float", ("batch", channels, context))
            for k, (channels, context) in enumerate(convs)
        )

    mel = TensorTemplate("mel", "float", ("batch", v.mel_bins, "frames"))
    pcm = TensorTemplate("pcm", "float", ("batch", frames))
    if v.source == "none":
        return GraphSpec(
            "vocoder",
            graphs.VocoderGraph(vocoder),
            (mel, *conv("past_conv")),
            (pcm, *conv("present_conv")),
            varargs=len(convs),
        )
    return GraphSpec(  # the sine source's phase, in cycles, after the mel
        "vocoder",
        graphs.SineVocoderGraph(vocoder),
        (mel, TensorTemplate("past_phase", "float", ("batch", 1)), *conv("past_conv")),
        (pcm, TensorTemplate("present_phase", "float", ("batch", 1)), *conv("present_conv")),
        varargs=len(convs),
    )
