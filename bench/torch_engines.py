"""``TorchEngines``: the torch reference model behind the interface the frontend uses.

The members of ``Engines`` the frontend loop uses (``root``, ``manifest``, ``tokenizer``,
``token_id``, ``audio``, ``vision``, ``backbone``, ``speech``, ``flow``, ``vocoder``), with
the same semantics and numpy in and out, run by the torch modules of ``venus.export.model``
(float32, no autograd), so ``venus bench chunk`` runs the same loop over the same chunks
on either. The manifest and tokenizer are the engines' own: the checkpoint must be the one
they were exported from. States mirror the engines' ones: KV caches are torch tensors
(evicting drops the middle and re-rotates the kept keys as ``engines.rope`` does,
``max_tokens`` is enforced as by the preallocated caches) and the flow draws its noise
from the state's seeded numpy generator exactly like ``engines.flow``, so fp32 engines
and this make the same decisions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from venus.engines import backbone, flow, speech
from venus.engines.backbone import BackboneOutput
from venus.engines.flow import FLOW_ROPE_THETA
from venus.engines.manifest import Manifest
from venus.engines.rope import Rope
from venus.engines.runners import Engines
from venus.engines.sampler import Sampler
from venus.engines.speech import SpeechChunk
from venus.engines.tokenizer import Tokenizer
from venus.errors import EngineError

if TYPE_CHECKING:  # torch is imported when a TorchEngines is opened, never at import time
    from torch import Tensor

    from venus.export.model.audio import AudioEncoder, AudioStreamState
    from venus.export.model.backbone import Backbone, KVCache
    from venus.export.model.flow import FlowDecoder, FlowState
    from venus.export.model.speech import SpeechDecoder
    from venus.export.model.venus import VenusModel
    from venus.export.model.vision import VisionEncoder
    from venus.export.model.vocoder import VocoderState
    from venus.export.model.vocoders import AnyVocoder

P = ParamSpec("P")
R = TypeVar("R")


def _no_grad(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` without autograd (thread-local in torch: token-to-wave has its own thread)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


def _t(x: NDArray[Any], dtype: type = np.float32) -> Tensor:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=dtype))


def _np(x: Tensor) -> NDArray[np.float32]:
    return cast("NDArray[np.float32]", x.detach().float().numpy())


def _room(what: str, held: int, new: int, capacity: int) -> None:
    """The engines' KV-cache capacity check (``KVCache.bind``), same message."""
    if held + new > capacity:
        raise EngineError(
            f"{what}: KV cache full ({held} tokens held + {new} new > capacity {capacity}); "
            "evict old chunks or reset the stream, or open it with a larger max_tokens"
        )


def _shape(x: NDArray[Any], want: tuple[int | None, ...], what: str) -> None:
    """EngineError unless ``x`` has ``want``'s rank and sizes (None: any size)."""
    if x.ndim != len(want) or any(w not in (None, n) for w, n in zip(want, x.shape, strict=True)):
        shown = ", ".join("n" if w is None else str(w) for w in want)
        raise EngineError(f"{what} has shape {x.shape}; expected [{shown}]")


def _drop_middle(cache: KVCache, first: int, last: int, rope: Rope | None) -> int:
    """``KVCache.keep`` on torch tensors: keep the first / last tokens of every layer and,
    with a rope, move the last ones to the positions after the first (``BackboneState``)."""
    import torch

    if first < 0 or last < 0:
        raise EngineError(f"KV cache keep({first}, {last}): counts must be >= 0")
    held, kept = cache.length, first + last
    if kept >= held:
        return 0
    delta = kept - cache.positions
    for i, x in enumerate(cache.keys):
        tail = x[:, :, held - last :]
        if rope is not None:
            tail = _t(rope.rotate(_np(tail), delta))
        cache.keys[i] = torch.cat((x[:, :, :first], tail), dim=2)
    for i, x in enumerate(cache.values):
        cache.values[i] = torch.cat((x[:, :, :first], x[:, :, held - last :]), dim=2)
    cache.mask = cache.mask[:, :kept]
    if rope is not None:
        cache.positions = kept
    return held - kept


class TorchAudio:
    def __init__(self, module: AudioEncoder, n_mels: int, mel_frames: int) -> None:
        self.module, self.n_mels, self.mel_frames = module, n_mels, mel_frames

    def new_state(self, batch: int = 1) -> AudioStreamState:
        return self.module.new_state(batch)

    @_no_grad
    def step(self, mel: NDArray[Any], state: AudioStreamState) -> NDArray[np.float32]:
        _shape(mel, (state.context.shape[0], self.n_mels, self.mel_frames), "audio chunk")
        return _np(self.module.step(_t(mel), state))


class TorchVision:
    def __init__(self, module: VisionEncoder, image_size: int) -> None:
        self.module, self.image_size = module, image_size

    @_no_grad
    def encode(self, pixels: NDArray[Any]) -> NDArray[np.float32]:
        _shape(pixels, (None, 3, self.image_size, self.image_size), "camera frame")
        return _np(self.module(_t(pixels)))


@dataclass
class TorchCache:
    """One stream's decoder KV cache (torch tensors) and the capacity the engines would
    have preallocated: the backbone's and the speech decoder's state."""

    cache: KVCache
    capacity: int
    rope: Rope | None = None

    @property
    def length(self) -> int:
        return self.cache.length

    @property
    def positions(self) -> int:
        """The next position id."""
        return self.cache.positions

    def reset(self) -> None:
        self.cache.reset()

    def evict(self, keep_first: int, keep_last: int) -> int:
        """As ``BackboneState.evict``: drop the middle, renumber the kept last tokens."""
        return _drop_middle(self.cache, keep_first, keep_last, self.rope)


class TorchBackbone:
    def __init__(self, module: Backbone) -> None:
        self.module = module
        self.hidden_size = module.shape.hidden

    def new_state(
        self, batch: int = 1, max_tokens: int = backbone.DEFAULT_MAX_TOKENS
    ) -> TorchCache:
        shape = self.module.shape
        rope = Rope(shape.head_dim, shape.rope_theta)
        return TorchCache(self.module.new_cache(batch), max_tokens, rope)

    @_no_grad
    def embed(self, input_ids: NDArray[np.integer[Any]]) -> NDArray[np.float32]:
        _shape(np.asarray(input_ids), (None, None), "token ids")
        return _np(self.module.embed(_t(input_ids, np.int64)))

    @_no_grad
    def prefill(self, embeds: NDArray[Any], state: TorchCache) -> BackboneOutput:
        batch = state.cache.mask.shape[0]
        _shape(embeds, (batch, None, self.hidden_size), "backbone embeddings")
        _room("backbone", state.length, embeds.shape[1], state.capacity)
        logits, hidden = self.module.step(_t(embeds), state.cache)
        return BackboneOutput(logits=_np(logits), hidden=_np(hidden))

    def step(self, input_ids: NDArray[np.integer[Any]], state: TorchCache) -> BackboneOutput:
        return self.prefill(self.embed(input_ids), state)


class TorchSpeech:
    def __init__(self, module: SpeechDecoder, start_token: int, end_token: int) -> None:
        self.module, self.start_token, self.end_token = module, start_token, end_token
        self.cond_dim = module.cond_proj.in_features

    def new_state(self, max_tokens: int = speech.DEFAULT_MAX_TOKENS) -> TorchCache:
        shape = self.module.shape
        rope = Rope(shape.head_dim, shape.rope_theta)
        return TorchCache(self.module.new_cache(1), max_tokens, rope)

    @_no_grad
    def forward(
        self, condition: NDArray[Any], input_ids: NDArray[np.int64], state: TorchCache
    ) -> NDArray[np.float32]:
        """Append condition [1, c, cond_dim] then ids [1, s] -> logits [1, c + s, vocab]."""
        import torch

        new = condition.shape[1] + input_ids.shape[1]
        _room("speech_decoder", state.length, new, state.capacity)
        m = self.module
        x = torch.cat((m.condition(_t(condition)), m.embed(_t(input_ids, np.int64))), dim=1)
        logits, _ = m.step(x, state.cache)
        return _np(logits)

    def speak(
        self, hidden: NDArray[Any], state: TorchCache, sampler: Sampler, max_tokens: int
    ) -> SpeechChunk:
        """``SpeechDecoderRunner.speak``: the same loop (``engines.speech.speak_loop``)."""
        _shape(hidden, (1, None, self.cond_dim), "speech condition")
        need = hidden.shape[1] + 1 + max_tokens  # as SpeechState.make_room
        if state.length + need > state.capacity:
            keep = min(state.capacity // 2, state.capacity - need)
            _drop_middle(state.cache, 0, keep, state.rope)

        def forward(condition: NDArray[Any], ids: NDArray[np.int64]) -> NDArray[Any]:
            return self.forward(condition, ids, state)

        return speech.speak_loop(
            forward, hidden, self.start_token, self.end_token, sampler, max_tokens
        )


@dataclass
class TorchFlowState:
    inner: FlowState
    rng: np.random.Generator
    seed: int
    capacity: int

    @property
    def finished(self) -> bool:
        return self.inner.finished

    @property
    def emitted_tokens(self) -> int:
        return self.inner.emitted_tokens

    def reset(self, seed: int | None = None) -> None:
        self.inner.reset()
        self.seed = self.seed if seed is None else seed
        self.rng = np.random.default_rng(self.seed)


class TorchFlow:
    def __init__(self, module: FlowDecoder, chunk_tokens: int) -> None:
        self.module, self.chunk_tokens = module, chunk_tokens
        cfg = module.cfg
        self.lookahead, self.frames_per_token = cfg.lookahead_tokens, cfg.frames_per_token
        self.mel_bins = cfg.mel_bins

    def new_state(
        self, batch: int = 1, seed: int = 0, max_tokens: int = flow.DEFAULT_MAX_TOKENS
    ) -> TorchFlowState:
        inner = self.module.new_state(batch, self.chunk_tokens)
        return TorchFlowState(inner, np.random.default_rng(seed), seed, max_tokens)

    @_no_grad
    def step(
        self,
        tokens: NDArray[np.integer[Any]],
        state: TorchFlowState,
        final: bool = False,
        noise: NDArray[Any] | None = None,
        temperature: float = 1.0,
    ) -> NDArray[np.float32]:
        """``FlowRunner.step``: the same checks, the same noise draws from ``state.rng``."""
        if state.finished:
            raise EngineError("the flow stream already ended (final=True); call state.reset()")
        batch, m = tokens.shape
        if m > self.chunk_tokens or (not final and m != self.chunk_tokens):
            raise EngineError(
                f"flow step got {m} tokens; feed chunks of {self.chunk_tokens} (the final "
                "chunk may be shorter)"
            )
        frames_in = m * self.frames_per_token
        if noise is None:
            noise = state.rng.standard_normal((batch, self.mel_bins, frames_in), np.float32)
        _shape(noise, (batch, self.mel_bins, frames_in), "flow noise")
        held = state.inner.pending_tokens.shape[1] + m
        emit = held if final else held - self.lookahead
        had = state.emitted_tokens
        if emit > 0 and had + emit > state.capacity:  # as FlowState.make_room
            keep = min(state.capacity // 2, state.capacity - emit)
            rope = Rope(int(state.inner.keys[0].shape[3]), FLOW_ROPE_THETA)
            for i, k in enumerate(state.inner.keys):
                state.inner.keys[i] = _t(rope.rotate(_np(k[:, :, had - keep :]), keep - had))
                state.inner.values[i] = state.inner.values[i][:, :, had - keep :]
        _room("flow_decoder", state.emitted_tokens, emit, state.capacity)
        mel = self.module.step(_t(tokens, np.int64), _t(noise), state.inner, final, temperature)
        return _np(mel)


class TorchVocoder:
    def __init__(self, module: AnyVocoder) -> None:
        self.module, self.mel_bins = module, module.cfg.mel_bins

    def new_state(self, batch: int = 1) -> VocoderState:
        return self.module.new_state(batch)

    @_no_grad
    def step(self, mel: NDArray[Any], state: VocoderState) -> NDArray[np.float32]:
        _shape(mel, (None, self.mel_bins, None), "vocoder mel")
        return _np(self.module.step(_t(mel), state))


@dataclass(frozen=True)
class TorchEngines:
    """The torch reference behind the members of ``Engines`` the frontend uses."""

    root: Path  # the checkpoint
    manifest: Manifest  # the engines'
    tokenizer: Tokenizer  # the engines'
    audio: TorchAudio
    vision: TorchVision | None
    backbone: TorchBackbone
    speech: TorchSpeech
    flow: TorchFlow
    vocoder: TorchVocoder

    @classmethod
    def open(cls, checkpoint: Path, engines: Engines) -> TorchEngines:
        """Load ``checkpoint`` (float32), which must be the one ``engines`` came from.

        Raises BenchError when it is another checkpoint or torch is not installed.
        """
        from venus.bench.engines import open_reference

        model = cast("VenusModel", open_reference(checkpoint, engines))
        s = engines.manifest.schedule
        return cls(
            root=checkpoint,
            manifest=engines.manifest,
            tokenizer=engines.tokenizer,
            audio=TorchAudio(model.audio_encoder, s.n_mels, s.mel_frames),
            vision=TorchVision(model.vision_encoder, s.image_size)
            if model.vision_encoder is not None
            else None,
            backbone=TorchBackbone(model.backbone),
            speech=TorchSpeech(model.speech_decoder, s.speech_start_token, s.speech_end_token),
            flow=TorchFlow(model.flow_decoder, s.speech_tokens),
            vocoder=TorchVocoder(model.vocoder),
        )

    def token_id(self, name: str) -> int:
        """The id of special token ``name`` (e.g. ``<|listen|>``)."""
        try:
            return self.manifest.special_tokens[name]
        except KeyError:
            raise EngineError(f"{self.root}: the manifest has no special token {name!r}") from None
