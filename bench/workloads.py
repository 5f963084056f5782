"""One chunk of work per component, for the engines and for the torch reference alike.

Each workload is (prepare, run): ``prepare`` does the untimed set-up of a run (fresh
stream state, the context before the chunk), ``run`` the chunk itself. What a chunk is,
as in ``venus model info``: the audio encoder with its window full; one camera frame; a
backbone prefill of the chunk's tokens on top of ``context`` tokens, then ``DECODE_STEPS``
single-token steps; the speech decoder's condition and ``start``, then one step per speech
token; one flow chunk of speech tokens (final, from a fresh utterance); its mel through
the vocoder. Inputs are random but fixed by ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from venus.engines.manifest import Schedule
from venus.engines.runners import Engines

DECODE_STEPS = 5  # the control token and ~4 text tokens, as venus model info assumes
CONDITION_TOKENS = 4  # text hidden states conditioning one chunk of speech
MARKERS = 6  # chunk / audio / image start and end


@dataclass(frozen=True)
class Workload:
    prepare: Callable[[], None]
    run: Callable[[], None]


def prefill_tokens(s: Schedule) -> int:
    return s.audio_tokens + s.vision_tokens + MARKERS


def engine_workloads(engines: Engines, context: int, seed: int = 0) -> dict[str, Workload]:
    """The chunk workloads through the daemon's runtime (ONNX Runtime runners)."""
    rng = np.random.default_rng(seed)
    s = engines.manifest.schedule
    hidden = engines.backbone.hidden_size
    out: dict[str, Workload] = {}

    mel = rng.standard_normal((1, s.n_mels, s.mel_frames)).astype(np.float32)
    audio = engines.audio.new_state()
    left = engines.manifest.model_config.get("model", {}).get("audio", {})

    def audio_prepare() -> None:
        audio.reset()
        for _ in range(int(left.get("left_context_chunks", 2))):
            engines.audio.step(mel, audio)

    out["audio_encoder"] = Workload(audio_prepare, lambda: _ignore(engines.audio.step(mel, audio)))
    if engines.vision is not None:
        vision = engines.vision
        pixels = rng.random((1, 3, s.image_size, s.image_size), dtype=np.float32)
        out["vision_encoder"] = Workload(_nothing, lambda: _ignore(vision.encode(pixels)))

    before = rng.standard_normal((1, context, hidden)).astype(np.float32)
    chunk = rng.standard_normal((1, prefill_tokens(s), hidden)).astype(np.float32)
    state = engines.backbone.new_state(max_tokens=context + prefill_tokens(s) + DECODE_STEPS)
    token = np.zeros((1, 1), dtype=np.int64)

    def backbone_prepare() -> None:
        state.reset()
        state.positions = 0
        if context:
            engines.backbone.prefill(before, state)

    def backbone_run() -> None:
        engines.backbone.prefill(chunk, state)
        for _ in range(DECODE_STEPS):
            engines.backbone.step(token, state)

    out["backbone"] = Workload(backbone_prepare, backbone_run)

    cond = rng.standard_normal((1, CONDITION_TOKENS, hidden)).astype(np.float32)
    empty = np.zeros((1, 0, hidden), dtype=np.float32)
    start = np.array([[s.speech_start_token]], dtype=np.int64)
    speech = engines.speech.new_state(max_tokens=CONDITION_TOKENS + 1 + s.speech_tokens)

    def speech_run() -> None:
        engines.speech.forward(cond, start, speech)
        for _ in range(s.speech_tokens - 1):  # the first token came from the prefill
            engines.speech.forward(empty, token, speech)

    out["speech_decoder"] = Workload(speech.reset, speech_run)

    codes = rng.integers(0, s.speech_codebook, (1, s.speech_tokens), dtype=np.int64)
    flow = engines.flow.new_state(seed=seed)
    out["flow_decoder"] = Workload(
        lambda: flow.reset(seed), lambda: _ignore(engines.flow.step(codes, flow, final=True))
    )

    frames = s.speech_tokens * s.mel_frames_out
    mel_out = rng.standard_normal((1, engines.flow.mel_bins, frames)).astype(np.float32)
    voc = engines.vocoder.new_state()
    out["vocoder"] = Workload(voc.reset, lambda: _ignore(engines.vocoder.step(mel_out, voc)))
    return out


def torch_workloads(
    model: Any, schedule: Schedule, context: int, seed: int = 0
) -> dict[str, Workload]:
    """The same chunk workloads through the torch reference (``venus.export``)."""
    import torch

    from venus.export.model.flow import chunk_noise

    torch.manual_seed(seed)
    s, cfg = schedule, model.cfg
    hidden = cfg.backbone.hidden_size
    out: dict[str, Workload] = {}
    mel = torch.randn(1, s.n_mels, s.mel_frames)
    audio: dict[str, Any] = {}

    def audio_prepare() -> None:
        audio["state"] = model.audio_encoder.new_state(1)
        for _ in range(cfg.audio.left_context_chunks):
            model.audio_encoder.step(mel, audio["state"])

    out["audio_encoder"] = Workload(
        audio_prepare, lambda: _ignore(model.audio_encoder.step(mel, audio["state"]))
    )
    if model.vision_encoder is not None:
        pixels = torch.rand(1, 3, s.image_size, s.image_size)
        out["vision_encoder"] = Workload(_nothing, lambda: _ignore(model.vision_encoder(pixels)))

    bb = model.backbone
    before = torch.randn(1, context, hidden)
    chunk = torch.randn(1, prefill_tokens(s), hidden)
    token = torch.zeros(1, 1, dtype=torch.int64)
    cache: dict[str, Any] = {}

    def backbone_prepare() -> None:
        cache["kv"] = bb.new_cache(1)
        if context:
            bb.step(before, cache["kv"])

    def backbone_run() -> None:
        bb.step(chunk, cache["kv"])
        for _ in range(DECODE_STEPS):
            bb.step(bb.embed(token), cache["kv"])

    out["backbone"] = Workload(backbone_prepare, backbone_run)

    sd = model.speech_decoder
    cond = torch.randn(1, CONDITION_TOKENS, hidden)
    start = torch.tensor([[s.speech_start_token]])

    def speech_prepare() -> None:
        cache["speech"] = sd.new_cache(1)

    def speech_run() -> None:
        sd.step(torch.cat((sd.condition(cond), sd.embed(start)), 1), cache["speech"])
        for _ in range(s.speech_tokens - 1):
            sd.step(sd.embed(token), cache["speech"])

    out["speech_decoder"] = Workload(speech_prepare, speech_run)

    fd = model.flow_decoder
    codes = torch.randint(0, s.speech_codebook, (1, s.speech_tokens))
    noise = chunk_noise(cfg.flow, 1, s.speech_tokens, seed=seed, chunk_index=0)

    def flow_prepare() -> None:
        cache["flow"] = fd.new_state(1, s.speech_tokens)

    out["flow_decoder"] = Workload(
        flow_prepare, lambda: _ignore(fd.step(codes, noise, cache["flow"], final=True))
    )

    mel_out = torch.randn(1, cfg.vocoder.mel_bins, s.speech_tokens * s.mel_frames_out)

    def vocoder_prepare() -> None:
        cache["vocoder"] = model.vocoder.new_state(1)

    out["vocoder"] = Workload(
        vocoder_prepare, lambda: _ignore(model.vocoder.step(mel_out, cache["vocoder"]))
    )
    return out


def _nothing() -> None:
    return None


def _ignore(_value: object) -> None:
    return None
