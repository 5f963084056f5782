"""Export wrappers: one ``nn.Module`` per engine graph, flat tensors in and out.

Each wrapper maps the flat inputs of docs/engines.md onto the reference modules' pure
functions and returns a flat tuple of outputs, in the order the spec lists them. KV
caches travel as ``*past`` varargs ``(key_0, value_0, key_1, value_1, ...)``, each
``[batch, kv_heads, past_sequence, head_dim]``; the vocoder's conv contexts likewise.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from venus.errors import ExportError
from venus.export.model.audio import AudioEncoder
from venus.export.model.backbone import DecoderStack
from venus.export.model.flow import ROPE_THETA, FlowDecoder
from venus.export.model.layers import rope_cos_sin
from venus.export.model.speech import SpeechDecoder
from venus.export.model.vision import VisionEncoder
from venus.export.model.vocoders import AnyVocoder

FLOW_TEMPERATURE = 1.0  # fixed in the graph: the noise input carries all randomness


def _pairs(past: tuple[Tensor, ...]) -> tuple[list[Tensor], list[Tensor]]:
    return list(past[0::2]), list(past[1::2])


def _flat(keys: list[Tensor], values: list[Tensor]) -> tuple[Tensor, ...]:
    out: list[Tensor] = []
    for k, v in zip(keys, values, strict=True):
        out += [k, v]
    return tuple(out)


class EmbeddingGraph(nn.Module):
    """input_ids int64 [batch, sequence] -> inputs_embeds [batch, sequence, hidden]."""

    def __init__(self, backbone: DecoderStack) -> None:
        super().__init__()
        self.embed_tokens = backbone.embed_tokens

    def forward(self, input_ids: Tensor) -> Tensor:
        out: Tensor = self.embed_tokens(input_ids)
        return out


class AudioEncoderGraph(nn.Module):
    """One chunk of ``AudioEncoder.step`` with its state as a tensor.

    mel [batch, n_mels, mel_frames], context [batch, context_frames, d_audio] (0 frames at
    stream start) -> tokens [batch, audio_tokens, hidden], new_context [batch,
    new_context_frames, d_audio] (the last ``left_context_chunks`` chunks' conv features).
    """

    def __init__(self, encoder: AudioEncoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.keep = encoder.cfg.left_context_chunks * encoder.frames_per_chunk

    def forward(self, mel: Tensor, context: Tensor) -> tuple[Tensor, Tensor]:
        enc = self.encoder
        window = torch.cat((context, enc.front_end(mel)), dim=1)
        tokens = enc.window_forward(window)
        # A negative start clamps to 0 (in torch and in ONNX Slice) while the window is short.
        new_context = window[:, -self.keep :] if self.keep else window[:, :0]
        return tokens, new_context


class VisionEncoderGraph(nn.Module):
    """pixels [batch, 3, size, size] RGB in [0, 1] -> tokens [batch, vision_tokens, hidden]."""

    def __init__(self, encoder: VisionEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, pixels: Tensor) -> Tensor:
        out: Tensor = self.encoder(pixels)
        return out


class BackboneGraph(nn.Module):
    """``Backbone.forward`` flattened (ONNX Runtime GenAI naming, see docs/engines.md).

    inputs_embeds [batch, sequence, hidden], attention_mask [batch, total_sequence],
    position_ids [batch, sequence], past (key, value) x layers -> logits [batch, sequence,
    vocab], hidden_states [batch, sequence, hidden], present (key, value) x layers.
    """

    def __init__(self, backbone: DecoderStack) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(
        self, inputs_embeds: Tensor, attention_mask: Tensor, position_ids: Tensor, *past: Tensor
    ) -> tuple[Tensor, ...]:
        keys, values = _pairs(past)
        logits, hidden, pk, pv = self.backbone(
            inputs_embeds, attention_mask, position_ids, keys, values
        )
        return (logits, hidden, *_flat(pk, pv))


class SpeechDecoderGraph(nn.Module):
    """One speech-decoder step: ``cond_proj(condition)`` then ``embed(input_ids)``, decoded.

    condition [batch, condition_length, backbone hidden] (length 0 on decode steps),
    input_ids [batch, sequence], attention_mask [batch, total_sequence], position_ids
    [batch, condition_length + sequence], past (key, value) x layers -> logits [batch,
    condition_length + sequence, speech_vocab], present (key, value) x layers.
    """

    def __init__(self, decoder: SpeechDecoder) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(
        self,
        condition: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        *past: Tensor,
    ) -> tuple[Tensor, ...]:
        d = self.decoder
        x = torch.cat((d.condition(condition), d.embed(input_ids)), dim=1)
        keys, values = _pairs(past)
        logits, _, pk, pv = d(x, attention_mask, position_ids, keys, values)
        return (logits, *_flat(pk, pv))


class FlowDecoderGraph(nn.Module):
    """One group of ``FlowDecoder.step``: what it computes for the tokens it emits.

    tokens int64 [batch, group + lookahead] (the group, then its lookahead tokens),
    token_mask [batch, group + lookahead] (0 for padding at the final flush), noise
    [batch, mel_bins, frames_per_token x group], prompt [batch, mel_bins, prompt_frames],
    past (key, value) x encoder layers [batch, heads, past_sequence, head_dim] -> mel
    [batch, mel_bins, frames_per_token x group], present (key, value) x encoder layers.
    Positions continue from ``past_sequence`` (tokens emitted before). Temperature 1.0.
    """

    def __init__(self, flow: FlowDecoder) -> None:
        super().__init__()
        self.flow = flow

    def forward(
        self, tokens: Tensor, token_mask: Tensor, noise: Tensor, prompt: Tensor, *past: Tensor
    ) -> tuple[Tensor, ...]:
        f = self.flow
        h = f.token_features(tokens, 0, token_mask)  # [batch, group, d]
        b, group = h.shape[0], h.shape[1]
        start = past[0].shape[2]
        pos = torch.arange(group, device=h.device)[None].expand(b, group) + start
        cos, sin = rope_cos_sin(pos, f.head_dim, ROPE_THETA)
        see_all = h.new_zeros(1, 1, 1, 1)  # this group and every earlier one
        keys, values = _pairs(past)
        present_k, present_v = [], []
        for layer, pk, pv in zip(f.layers, keys, values, strict=True):
            h, k, v = layer(h, cos, sin, pk, pv, see_all)
            present_k.append(k)
            present_v.append(v)
        mel = f.solve(f.to_mu(h), noise, prompt, FLOW_TEMPERATURE)
        return (mel, *_flat(present_k, present_v))


class VocoderGraph(nn.Module):
    """``Vocoder.stream``: mel [batch, mel_bins, frames], past_conv.{k} [batch, channels_k,
    context_k] -> pcm [batch, frames x hop], present_conv.{k} (same shapes as past_conv)."""

    def __init__(self, vocoder: AnyVocoder) -> None:
        super().__init__()
        self.vocoder = vocoder

    def forward(self, mel: Tensor, *past_conv: Tensor) -> tuple[Tensor, ...]:
        pcm, caches, _ = self.vocoder.stream(mel, list(past_conv))
        return (pcm, *caches)


class SineVocoderGraph(nn.Module):
    """``Vocoder.stream`` of a vocoder with a sine source: as ``VocoderGraph`` with the
    source's phase after the mel, past_phase [batch, 1] -> present_phase [batch, 1]."""

    def __init__(self, vocoder: AnyVocoder) -> None:
        super().__init__()
        self.vocoder = vocoder

    def forward(self, mel: Tensor, past_phase: Tensor, *past_conv: Tensor) -> tuple[Tensor, ...]:
        pcm, caches, phase = self.vocoder.stream(mel, list(past_conv), past_phase)
        if phase is None:
            raise ExportError("SineVocoderGraph needs a vocoder with a sine source")
        return (pcm, phase, *caches)
