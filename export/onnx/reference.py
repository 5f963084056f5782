"""Torch reference outputs for a graph's inputs, computed with the models' public APIs.

Not through the export wrappers: each reference runs what the daemon's engines must
reproduce (``AudioEncoder.step`` with its stream state, ``FlowDecoder.step`` on a
``FlowState``, ``SpeechDecoder.step`` on a ``KVCache``...), so a parity check covers
both the ONNX conversion and the wrappers' mapping of the flat inputs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from venus.errors import ExportError
from venus.export.model.audio import AudioStreamState
from venus.export.model.backbone import KVCache
from venus.export.model.flow import FlowState
from venus.export.model.venus import VenusModel
from venus.export.model.vocoder import VocoderState


def _past(inputs: dict[str, Tensor], layers: int) -> tuple[list[Tensor], list[Tensor]]:
    keys = [inputs[f"past_key_values.{i}.key"] for i in range(layers)]
    values = [inputs[f"past_key_values.{i}.value"] for i in range(layers)]
    return keys, values


def _present(keys: list[Tensor], values: list[Tensor]) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        out[f"present.{i}.key"], out[f"present.{i}.value"] = k, v
    return out


@torch.no_grad()
def reference(
    name: str, model: VenusModel, inputs: dict[str, Tensor], padding: int = 0
) -> dict[str, Tensor]:
    """The outputs graph ``name`` must give for ``inputs`` -> {output name: tensor}.

    ``padding`` (flow decoder): how many trailing tokens are masked-out padding (0 for a
    non-final group, ``lookahead_tokens`` for the final flush).
    """
    if name == "embedding":
        return {"inputs_embeds": model.backbone.embed(inputs["input_ids"])}
    if name == "audio_encoder":
        state = AudioStreamState(context=inputs["context"])
        tokens = model.audio_encoder.step(inputs["mel"], state)
        return {"tokens": tokens, "new_context": state.context}
    if name == "vision_encoder":
        if model.vision_encoder is None:
            raise ExportError("an audio-frontend model has no vision encoder")
        return {"tokens": model.vision_encoder(inputs["pixels"])}
    if name == "backbone":
        bb = model.backbone
        keys, values = _past(inputs, bb.shape.layers)
        logits, hidden, pk, pv = bb(
            inputs["inputs_embeds"], inputs["attention_mask"], inputs["position_ids"], keys, values
        )
        return {"logits": logits, "hidden_states": hidden, **_present(pk, pv)}
    if name == "speech_decoder":
        return _speech(model, inputs)
    if name == "flow_decoder":
        return _flow(model, inputs, padding)
    if name == "vocoder":
        vstate = VocoderState(
            caches=[inputs[f"past_conv.{k}"] for k in range(len(model.vocoder.convs))],
            phase=inputs.get("past_phase"),  # a sine source's
        )
        pcm = model.vocoder.step(inputs["mel"], vstate)
        phase = {} if vstate.phase is None else {"present_phase": vstate.phase}
        return {"pcm": pcm} | phase | {f"present_conv.{k}": c for k, c in enumerate(vstate.caches)}
    raise ExportError(f"no reference for a graph named {name!r}")


def _speech(model: VenusModel, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """``SpeechDecoder.step`` on a cache holding the past: positions and mask follow it."""
    sd = model.speech_decoder
    keys, values = _past(inputs, sd.shape.layers)
    past = keys[0].shape[2]
    cache = KVCache(keys, values, positions=past, mask=inputs["attention_mask"][:, :past])
    x = torch.cat((sd.condition(inputs["condition"]), sd.embed(inputs["input_ids"])), dim=1)
    logits, _ = sd.step(x, cache)
    return {"logits": logits, **_present(cache.keys, cache.values)}


def _flow(model: VenusModel, inputs: dict[str, Tensor], padding: int) -> dict[str, Tensor]:
    """``FlowDecoder.step`` emitting exactly this group.

    Non-final: the group and its lookahead arrive as one chunk; step emits the group and
    holds the lookahead back. Final: the group's tokens arrive as the final chunk and step
    pads the lookahead with zeros, which the graph's ``token_mask`` reproduces.
    """
    flow = model.flow_decoder
    lookahead, fpt = flow.cfg.lookahead_tokens, flow.cfg.frames_per_token
    if padding not in (0, lookahead):
        raise ExportError(f"flow padding must be 0 or lookahead_tokens ({lookahead})")
    tokens, noise = inputs["tokens"], inputs["noise"]
    b, group = tokens.shape[0], tokens.shape[1] - lookahead
    keys, values = _past(inputs, len(flow.layers))
    state = FlowState(
        keys=keys,
        values=values,
        pending_tokens=tokens[:, :0],
        pending_noise=noise[..., :0],
        prompt=inputs["prompt"],
        chunk_tokens=max(group + lookahead, lookahead + 1),
    )
    if padding:
        mel = flow.step(tokens[:, :group], noise, state, final=True)
    else:
        held_back = noise.new_zeros(b, noise.shape[1], lookahead * fpt)  # never emitted here
        mel = flow.step(tokens, torch.cat((noise, held_back), dim=-1), state)
    return {"mel": mel, **_present(state.keys, state.values)}
