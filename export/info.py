"""``venus model info``: parameters, weight bytes and per-chunk cost of every component.

Figures come from the reference modules themselves, built on torch's ``meta`` device (no
memory, no weights) and run through one chunk's work under ``FlopCounterMode``, so they
cannot drift from the code. A stack deeper than two layers is run on one layer and on
two, and counted as the first plus (layers - 1) times the second's addition: its layers
are the same module on the same shapes, so this is exact, and venus-9b is counted in
seconds. What one chunk does (a speaking chunk, the expensive case):

- audio encoder: one chunk through the conv front end, the transformer over its full
  window (this chunk plus ``left_context_chunks``), pooling and the projector;
- vision encoder (omni): one frame through the tower and the resampler;
- backbone: prefill of the chunk's tokens (audio tokens, vision queries, 6 markers) on top
  of ``CONTEXT_TOKENS`` of context, then ``DECODE_STEPS`` single-token steps;
- speech decoder: the chunk's text hidden states plus ``start``, then one step per S3 token;
- flow decoder: one chunk of S3 tokens mid-utterance; vocoder: that chunk's mel.

FLOPs count matrix products, convolutions and attention (2 per multiply-add), not
element-wise work. Bytes moved count weight reads (each module's weights once per call;
embeddings only the rows looked up) and KV-cache reads at fp16; activations are not
counted. Weight bytes at int4 are the nominal 0.5 byte per weight plus one fp16 scale per
block of 32 (MatMulNBits' default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from venus.export.model.config import ModelConfig
from venus.export.model.layers import GQAttention
from venus.export.model.venus import VenusModel

CONTEXT_TOKENS = 4096  # backbone context before the chunk: half the default 8192 budget
DECODE_STEPS = 5  # the control token and ~4 text tokens for 1 s of speech
TEXT_TOKENS = 4  # text hidden states that condition the speech decoder per chunk
REPLY_CONTEXT = 64  # speech-decoder context already in the reply
MARKERS = 6  # chunk start / end, audio start / end, image start / end
KV_BYTES = 2  # fp16 KV cache
INT4_BLOCK = 32
_NOT_READS = ("new_", "__get__", "size", "dim", "numel")  # metadata, not weight reads
BYTES_PER_WEIGHT = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5 + 2 / INT4_BLOCK}


class _Meter(TorchFunctionMode):
    """Counts weight elements read (every parameter passed to a torch function, embeddings
    only for the rows looked up) and KV-cache bytes read (hooks on the attention layers)."""

    def __init__(self, root: nn.Module) -> None:
        super().__init__()
        self.weights = 0
        self.kv_bytes = 0
        self.handles = [
            m.register_forward_hook(self._attention)
            for m in root.modules()
            if isinstance(m, GQAttention)
        ]

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if func is F.embedding:
            self.weights += args[0].numel() * args[1].shape[-1]
        elif not name.startswith(_NOT_READS):
            given = (*args, *kwargs.values())
            self.weights += sum(a.numel() for a in given if isinstance(a, nn.Parameter))
        return func(*args, **kwargs)

    def _attention(self, _m: nn.Module, args: tuple[Any, ...], _out: object) -> None:
        past_k, past_v = args[3], args[4]
        self.kv_bytes += (past_k.numel() + past_v.numel()) * KV_BYTES

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _past(batch: int, layers: int, kv_heads: int, length: int, head_dim: int) -> list[torch.Tensor]:
    return [torch.empty(batch, kv_heads, length, head_dim) for _ in range(layers)]


def chunk_workloads(model: VenusModel, cfg: ModelConfig) -> dict[str, Callable[[], None]]:
    """One speaking chunk of work per component (see the module doc); inputs are made on
    the default device and dtype, so the same workloads time a real GPU run."""
    from venus.export.model.backbone import DecoderStack

    def decoder(stack: DecoderStack, prefill: torch.Tensor, context: int, steps: int) -> None:
        s = stack.shape
        cache = stack.new_cache(1)
        cache.keys = _past(1, s.layers, s.kv_heads, context, s.head_dim)
        cache.values = _past(1, s.layers, s.kv_heads, context, s.head_dim)
        cache.mask = torch.ones(1, context, dtype=torch.int64)
        cache.positions = context
        stack.step(prefill, cache)
        for _ in range(steps):
            stack.step(stack.embed(torch.zeros(1, 1, dtype=torch.int64)), cache)

    def audio() -> None:
        enc = model.audio_encoder
        state = enc.new_state(1)
        state.context = torch.empty(
            1, cfg.audio.left_context_chunks * enc.frames_per_chunk, cfg.audio.d_model
        )
        enc.step(torch.empty(1, cfg.audio.n_mels, cfg.mel_frames_per_chunk), state)

    def vision() -> None:
        v, encoder = cfg.vision, model.vision_encoder
        assert v is not None and encoder is not None  # only omni models have this workload
        encoder(torch.empty(1, v.channels, v.image_size, v.image_size))

    def backbone() -> None:
        prefill = cfg.audio_tokens_per_chunk + MARKERS
        prefill += cfg.vision.queries if cfg.vision is not None else 0
        decoder(
            model.backbone,
            torch.empty(1, prefill, cfg.backbone.hidden_size),
            CONTEXT_TOKENS,
            DECODE_STEPS,
        )

    def speech() -> None:
        sd = model.speech_decoder
        cond = sd.condition(torch.empty(1, TEXT_TOKENS, cfg.backbone.hidden_size))
        start = sd.embed(torch.zeros(1, 1, dtype=torch.int64))
        # The first speech token comes from the prefill, the rest from single steps.
        decoder(sd, torch.cat((cond, start), 1), REPLY_CONTEXT, cfg.speech_tokens_per_chunk - 1)

    def flow() -> None:
        n = cfg.speech_tokens_per_chunk
        fd = model.flow_decoder
        state = fd.new_state(1, n)
        fd.step(
            torch.zeros(1, n, dtype=torch.int64),
            torch.empty(1, cfg.flow.mel_bins, n * cfg.flow.frames_per_token),
            state,
        )

    def vocoder() -> None:
        frames = cfg.speech_tokens_per_chunk * cfg.flow.frames_per_token
        voc = model.vocoder
        voc.step(torch.empty(1, cfg.vocoder.mel_bins, frames), voc.new_state(1))

    work = {
        "audio_encoder": audio,
        "vision_encoder": vision,
        "backbone": backbone,
        "speech_decoder": speech,
        "flow_decoder": flow,
        "vocoder": vocoder,
    }
    return {name: work[name] for name in model.components()}


# (config section, layer count, the component built from it). Every layer of these stacks
# is the same module on the same shapes, so the component's FLOPs, weight reads and KV
# reads are affine in the count (see _chunk_costs).
LAYER_COUNTS = (
    ("audio", "layers", "audio_encoder"),
    ("vision", "layers", "vision_encoder"),
    ("backbone", "layers", "backbone"),
    ("speech", "layers", "speech_decoder"),
    ("flow", "encoder_layers", "flow_decoder"),
    ("flow", "estimator_layers", "flow_decoder"),
)


def _with_layers(cfg: ModelConfig, counts: dict[tuple[str, str], int]) -> ModelConfig:
    for (section, name), n in counts.items():
        part = getattr(cfg, section)
        cfg = dataclasses.replace(cfg, **{section: dataclasses.replace(part, **{name: n})})
    return cfg


def _measure(cfg: ModelConfig, only: str | None = None) -> dict[str, list[int]]:
    """One chunk's [FLOPs, weight elements read, KV bytes read] per component (``only``:
    that component's alone)."""
    with torch.device("meta"):
        model = VenusModel(cfg).eval()
        costs: dict[str, list[int]] = {}
        for name, run in chunk_workloads(model, cfg).items():
            if only is not None and name != only:
                continue
            meter = _Meter(model.components()[name])
            with torch.no_grad(), FlopCounterMode(display=False) as flops, meter:
                run()
            meter.close()
            costs[name] = [int(flops.get_total_flops()), meter.weights, meter.kv_bytes]
    return costs


def _chunk_costs(cfg: ModelConfig) -> dict[str, list[int]]:
    """``_measure`` of ``cfg``, with each stack deeper than two layers run on one layer,
    then on two: a component's cost is affine in each of its layer counts, so the full
    model's is the one-layer cost plus (count - 1) times what a second layer adds. Exact
    (tests/export/test_model_info.py runs every layer to check it, and
    bench/model_costs.json is checked against it): venus-9b takes about 6 s to count,
    where running its 36 + 24 decoder layers through every step took 27."""
    deep = {
        (section, name): (component, n - 1)
        for section, name, component in LAYER_COUNTS
        if getattr(cfg, section) is not None and (n := getattr(getattr(cfg, section), name)) > 2
    }
    ones = dict.fromkeys(deep, 1)
    base = _measure(_with_layers(cfg, ones))
    costs = {component: list(c) for component, c in base.items()}
    for key, (component, more) in deep.items():
        two = _measure(_with_layers(cfg, {**ones, key: 2}), component)
        rows = zip(costs[component], two[component], base[component], strict=True)
        costs[component] = [x + more * (t - b) for x, t, b in rows]
    return costs


def model_info(cfg: ModelConfig) -> dict[str, Any]:
    """Parameters, weight bytes and one chunk's FLOPs / bytes moved, per component."""
    with torch.device("meta"):
        model = VenusModel(cfg)
    components: dict[str, Any] = {}
    for name, (flops, weights, kv_bytes) in _chunk_costs(cfg).items():
        module = model.components()[name]
        params = sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
        components[name] = {
            "params": params,
            "weight_bytes": {k: round(params * b) for k, b in BYTES_PER_WEIGHT.items()},
            "chunk_flops": flops,
            "chunk_bytes_moved": {
                k: round(weights * b) + kv_bytes for k, b in BYTES_PER_WEIGHT.items()
            },
        }
    total = {
        "params": sum(c["params"] for c in components.values()),
        "chunk_flops": sum(c["chunk_flops"] for c in components.values()),
        "weight_bytes": {
            k: sum(c["weight_bytes"][k] for c in components.values()) for k in BYTES_PER_WEIGHT
        },
        "chunk_bytes_moved": {
            k: sum(c["chunk_bytes_moved"][k] for c in components.values()) for k in BYTES_PER_WEIGHT
        },
    }
    return {
        "model": cfg.name,
        "frontend": cfg.frontend,
        "chunk_s": cfg.chunk_s,
        "assumptions": {
            "context_tokens": CONTEXT_TOKENS,
            "decode_steps": DECODE_STEPS,
            "speech_tokens": cfg.speech_tokens_per_chunk,
            "text_tokens_per_chunk": TEXT_TOKENS,
            "kv_cache": "fp16",
        },
        "components": components,
        "total": total,
    }


def _num(n: float, unit: str = "") -> str:
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f} {suffix}{unit}"
    return f"{n:.0f} {unit}".rstrip()


def render_info(info: dict[str, Any]) -> str:
    a = info["assumptions"]
    lines = [
        f"{info['model']} ({info['frontend']} frontend), chunk {info['chunk_s']} s",
        "",
        f"{'component':<16}{'params':>11}{'fp32':>11}{'fp16':>11}{'int8':>11}{'int4':>11}",
    ]
    rows = [*info["components"].items(), ("total", info["total"])]
    for name, c in rows:
        w = c["weight_bytes"]
        lines.append(
            f"{name:<16}{_num(c['params']):>11}"
            + "".join(f"{_num(w[k], 'B'):>11}" for k in BYTES_PER_WEIGHT)
        )
    lines += [
        "",
        f"per speaking chunk: {a['context_tokens']} tokens of context, {a['decode_steps']} "
        f"backbone decode steps, {a['speech_tokens']} speech tokens",
        "bytes moved = weights read + fp16 KV cache reads",
        f"{'component':<16}{'FLOPs':>11}{'fp32':>11}{'fp16':>11}{'int8':>11}{'int4':>11}",
    ]
    for name, c in rows:
        m = c["chunk_bytes_moved"]
        lines.append(
            f"{name:<16}{_num(c['chunk_flops']):>11}"
            + "".join(f"{_num(m[k], 'B'):>11}" for k in BYTES_PER_WEIGHT)
        )
    return "\n".join(lines) + "\n"
