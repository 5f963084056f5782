"""The tiny model's voice: speech codes -> flow decoder -> mel -> vocoder -> 24 kHz PCM,
trained on a `venus datagen` set's assistant speech (``venus train-voice``), so that
`venus train` only has to teach the speech decoder which codes to emit.

**Mel space.** The flow decoder emits, and the vocoder reads, the *normalised* output
mel: ``(ln mel - mean) / std`` per bin, with the codebook's ``MelStats``
(``units.safetensors``). The flow starts from unit noise at t = 0, so its target has the
noise's scale; the daemon's zero prompt before a reply's first group is the mean mel; the
vocoder's random init is calibrated on unit-variance input. Digital silence sits near -4
(0 to -10 by bin) in these units. The daemon passes the flow's mel straight to the
vocoder, so the space never leaves the model: a trained vocoder needs the stats only to
train, a Griffin-Lim one (``export/model/griffin_lim.py``) holds them as its only tensors.

**Units of training: replies.** Each assistant turn of a sample, from its first chunk to
the chunk it ends in (turns start on chunk boundaries), with the codes ``chunk_units``
gives (the whole sample's mel, encoded). `venus train` teaches the same codes one chunk
earlier, in the chunk that decides them (``decided_units``).

**Sine source.** A vocoder with ``source`` "sine" (``vocoder_source.py``) is trained with
the f0 of the real audio (``pitch.track_f0``, per mel frame) driving its excitation
(teacher forcing) and an f0 loss teaching its head, which drives it at inference.

VOICE/ holds ``units.safetensors`` (the codebook), ``voice.json`` (the flow decoder's and
vocoder's configs, the step, the latest measurement), ``flow_decoder.safetensors`` and
``vocoder.safetensors`` (each module's ``state_dict``) and ``train/`` (voice_run.py).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from numpy.typing import NDArray
from pydantic import TypeAdapter, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from venus.export.model.config import (
    FlowDecoderConfig,
    ModelConfig,
    VocoderConfig,
    vocoder_to_dict,
)
from venus.export.model.flow import ROPE_THETA, FlowDecoder, chunk_noise, token_groups
from venus.export.model.layers import rope_cos_sin
from venus.export.model.venus import VenusModel
from venus.export.model.vocoder import Vocoder
from venus.export.model.vocoder_source import F0Prediction
from venus.export.model.vocoders import AnyVocoder
from venus.train.data import TrainDataError, trajectory
from venus.train.pitch import f0_losses, track_f0
from venus.train.speech_units import (
    ASSISTANT_WAV,
    FRAME_PAD,  # the output mel's framing, shared with log_mel below
    FRAMES_PER_TOKEN,
    HOP,
    LOG_FLOOR,
    N_FFT,
    TOKENS_PER_S,
    Codebook,
    frame_window,
    mel_filters,
    output_mel,
    read_speech,
)

__all__ = [
    "FLOW_FILE", "UNITS_FILE", "VOCODER_FILE", "VOICE_JSON", "Reply", "Voice", "Window",
    "encoder_batch", "flow_losses", "load_replies", "load_voice", "load_voice_weights", "log_mel",
    "mrstft_loss", "reference_text", "save_units", "save_voice", "speak", "vocode",
    "vocoder_losses",
]  # fmt: skip

FORMAT: Final = "venus-voice"
FORMAT_VERSION: Final = 1
VOICE_JSON: Final = "voice.json"
UNITS_FILE: Final = "units.safetensors"
FLOW_FILE: Final = "flow_decoder.safetensors"
VOCODER_FILE: Final = "vocoder.safetensors"
MEL_SPACE: Final = "normalised: (ln mel - units mean) / units std, per bin (units.safetensors)"
PCM_SCALE: Final = 32767.0  # replies are held as int16 (half the memory of float32)

_FLOW: Final = TypeAdapter(FlowDecoderConfig)
_VOCODER: Final = TypeAdapter(VocoderConfig)
_PAUSE: Final = re.compile(r"\[pause \d+\]")


@dataclass(frozen=True)
class Reply:
    """One assistant turn, from its first chunk to the chunk it ends in."""

    sample_id: str
    text: str  # what the assistant said (the trajectory's turn)
    cut: bool  # the user cut it: its audio stops before its text does
    pcm: NDArray[np.int16]  # 24 kHz, HOP * FRAMES_PER_TOKEN samples a code
    z: NDArray[np.float32]  # [80, 2n] normalised output mel
    codes: NDArray[np.int64]  # [n]
    f0: NDArray[np.float32] | None = None  # [2n] Hz, 0 unvoiced (pitch.track_f0), if tracked

    def audio(self) -> NDArray[np.float32]:
        out: NDArray[np.float32] = self.pcm.astype(np.float32) / PCM_SCALE
        return out


def reference_text(text: str) -> str:
    """A turn's text as words (the ``[pause N]`` marks the synthesizer reads removed)."""
    return " ".join(_PAUSE.sub(" ", text).split())


def load_replies(
    data: Path, records: Sequence[dict[str, Any]], codebook: Codebook, chunk_tokens: int,
    progress: Callable[[int, int], None] = lambda _d, _t: None, *, pitch: bool = False,
) -> list[Reply]:  # fmt: skip
    """Every assistant turn of the records' samples (module doc); ``pitch``: with its f0
    (for a vocoder with a sine source)."""
    out: list[Reply] = []
    per_chunk = chunk_tokens * FRAMES_PER_TOKEN * HOP
    for n, r in enumerate(records, start=1):
        t = trajectory(data, r["sample_id"])
        chunk_s = float(t["chunk_s"])
        if round(chunk_s * TOKENS_PER_S) != chunk_tokens:
            raise TrainDataError(
                f"{data}: sample {r['sample_id']} has {chunk_s} s chunks; the model's flow "
                f"groups are {chunk_tokens} codes ({chunk_tokens / TOKENS_PER_S} s)"
            )
        chunks = len(t["chunks"])
        pcm = np.zeros(chunks * per_chunk, np.float32)
        speech = read_speech(data / "samples" / r["sample_id"] / ASSISTANT_WAV)[: len(pcm)]
        pcm[: len(speech)] = speech
        mel = output_mel(pcm)
        codes, z = codebook.encode(mel), codebook.stats.normalise(mel)
        f0 = track_f0(pcm, mel.shape[1]) if pitch else None
        for turn in t["turns"]:
            if turn["speaker"] != "assistant":
                continue
            end_s = turn["cut_at_s"] if turn["cut_at_s"] is not None else turn["end_s"]
            first = math.floor(turn["start_s"] / chunk_s + 1e-6)
            last = min(chunks, math.ceil(end_s / chunk_s - 1e-6))
            if last <= first:
                continue
            a, b = first * chunk_tokens, last * chunk_tokens
            wave = np.clip(pcm[a * per_chunk // chunk_tokens : b * per_chunk // chunk_tokens],
                           -1.0, 1.0)  # fmt: skip
            out.append(Reply(
                r["sample_id"], turn["text"], turn["cut_at_s"] is not None,
                np.round(wave * PCM_SCALE).astype(np.int16),
                np.ascontiguousarray(z[:, a * FRAMES_PER_TOKEN : b * FRAMES_PER_TOKEN]),
                codes[a:b].copy(),
                None if f0 is None else f0[a * FRAMES_PER_TOKEN : b * FRAMES_PER_TOKEN].copy(),
            ))  # fmt: skip
        progress(n, len(records))
    return out


# -- VOICE/ ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Voice:
    """A trained voice's description: the codebook and the two components' configs."""

    codebook: Codebook
    flow: FlowDecoderConfig
    vocoder: VocoderConfig
    step: int

    def model_config(self, base: ModelConfig) -> ModelConfig:
        """``base`` (a preset) with this voice's flow decoder and vocoder."""
        return replace(base, flow=self.flow, vocoder=self.vocoder)


def _replace_file(path: Path, write: Callable[[Path], object]) -> None:
    """``path`` written whole or not at all, readable by others (safetensors writes 0600:
    the daemon's service user reads what is exported from it)."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    mask = os.umask(0)
    os.umask(mask)
    tmp.chmod(0o666 & ~mask)
    os.replace(tmp, path)


def save_units(out: Path, codebook: Codebook) -> None:
    _replace_file(out / UNITS_FILE, codebook.save)


def _save_weights(path: Path, module: torch.nn.Module) -> None:
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(path), {"format": "pt"})


def save_voice(
    out: Path, flow: FlowDecoder, vocoder: AnyVocoder, step: int, metrics: dict[str, Any]
) -> None:
    """The flow decoder's and vocoder's weights and configs into ``out`` (beside its
    ``units.safetensors``), each file replaced whole."""
    _replace_file(out / FLOW_FILE, lambda p: _save_weights(p, flow))
    _replace_file(out / VOCODER_FILE, lambda p: _save_weights(p, vocoder))
    doc = {
        "format": FORMAT, "version": FORMAT_VERSION, "step": step, "mel": MEL_SPACE,
        "flow_decoder": _FLOW.dump_python(flow.cfg, mode="json"),
        "vocoder": vocoder_to_dict(vocoder.cfg),
        "metrics": metrics,
    }  # fmt: skip
    _replace_file(out / VOICE_JSON, lambda p: p.write_text(json.dumps(doc, indent=2) + "\n"))


def load_voice(path: Path) -> Voice:
    """VOICE/'s codebook and configs, checked (the weights: ``load_voice_weights``)."""
    source = path / VOICE_JSON
    try:
        doc = json.loads(source.read_text("utf-8"))
    except FileNotFoundError:
        raise TrainDataError(
            f"{source}: no such file; make the voice with `venus train-voice`"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise TrainDataError(f"{source}: cannot be read ({e})") from e
    if not isinstance(doc, dict) or (doc.get("format"), doc.get("version")) != (
        FORMAT, FORMAT_VERSION,
    ):  # fmt: skip
        raise TrainDataError(
            f"{source}: not a {FORMAT} version {FORMAT_VERSION} file; train the voice again"
        )
    try:
        flow = _FLOW.validate_python(doc.get("flow_decoder"))
        vocoder = _VOCODER.validate_python(doc.get("vocoder"))
    except ValidationError as e:
        raise TrainDataError(f"{source}: invalid component config ({e})") from e
    codebook = Codebook.load(path / UNITS_FILE)
    if codebook.size > flow.codebook or flow.frames_per_token != FRAMES_PER_TOKEN:
        raise TrainDataError(
            f"{source}: {codebook.size} codes for a flow decoder of {flow.codebook} codes and "
            f"{flow.frames_per_token} frames a code (expected <= {flow.codebook}, "
            f"{FRAMES_PER_TOKEN})"
        )
    return Voice(codebook, flow, vocoder, int(doc.get("step", 0)))


def load_voice_weights(model: VenusModel, path: Path) -> None:
    """Load VOICE/'s flow decoder and vocoder into ``model``, whose config must be the
    voice's (``Voice.model_config``)."""
    for module, name in ((model.flow_decoder, FLOW_FILE), (model.vocoder, VOCODER_FILE)):
        try:
            state = load_file(str(path / name))
        except (OSError, SafetensorError) as e:
            raise TrainDataError(f"{path / name}: cannot be read ({e})") from e
        try:
            module.load_state_dict(state)
        except RuntimeError as e:
            raise TrainDataError(
                f"{path / name}: does not fit the model; build it with "
                f"Voice.model_config ({str(e).splitlines()[0]})"
            ) from e


# -- losses --------------------------------------------------------------------------------

MRSTFT: Final = ((512, 120), (1024, 240), (2048, 480))  # (n_fft = window, hop) at 24 kHz
MAG_FLOOR: Final = 1e-5  # STFT magnitude floor before the log (digital silence)
NEG: Final = torch.finfo(torch.float32).min
FAR: Final = 1 << 30  # group id of padding: no real position attends to it


@dataclass(frozen=True)
class Window:
    """Flow training: groups ``[first, first + count)`` of ``reply`` (``token_groups``)."""

    reply: Reply
    first: int
    count: int


def _encode(flow: FlowDecoder, tokens: Tensor, mask: Tensor, gid: Tensor) -> Tensor:
    """The token encoder as ``FlowDecoder.forward`` runs it, on a padded batch: tokens and
    mask [B, T + L] (L = lookahead), gid [B, T] (a position sees the groups up to its own;
    padding has ``FAR``) -> mu [B, 2T, mel_bins]."""
    b, t = gid.shape
    h = flow.token_features(tokens, 0, mask)
    attn = torch.where(gid[:, None, :] <= gid[:, :, None], 0.0, NEG)[:, None]
    cos, sin = rope_cos_sin(torch.arange(t)[None].expand(b, t), flow.head_dim, ROPE_THETA)
    empty = h.new_zeros(b, flow.cfg.heads, 0, flow.head_dim)
    for layer in flow.layers:
        h, _, _ = layer(h, cos, sin, empty, empty, attn)
    return flow.to_mu(h)


def encoder_batch(
    codes: Sequence[NDArray[np.int64]], ends: Sequence[int], chunk_tokens: int, lookahead: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The encoder's padded batch for replies' ``codes`` up to ``ends`` (a group's end)
    -> tokens and mask [B, T + lookahead] (the real lookahead after the end, masked
    padding past the reply's, as the daemon's final flush), gid [B, T] (the group of each
    position as ``FlowDecoder.forward`` numbers them over the whole reply; ``FAR`` past
    the end)."""
    t_max = max(ends)
    tokens = torch.zeros(len(codes), t_max + lookahead, dtype=torch.long)
    mask = torch.zeros(len(codes), t_max + lookahead)
    gid = torch.full((len(codes), t_max), FAR, dtype=torch.long)
    for i, (c, end) in enumerate(zip(codes, ends, strict=True)):
        real = min(len(c), end + lookahead)
        tokens[i, :real] = torch.from_numpy(c[:real])
        mask[i, :real] = 1.0
        last = len(token_groups(len(c), chunk_tokens, lookahead)) - 1
        gid[i, :end] = ((torch.arange(end) + lookahead) // chunk_tokens).clamp(max=last)
    return tokens, mask, gid


def flow_losses(
    flow: FlowDecoder, windows: Sequence[Window], chunk_tokens: int, gen: torch.Generator
) -> tuple[Tensor, Tensor]:
    """(velocity MSE, prior L1) of a batch of windows, each group as the daemon runs it: the
    encoder over the reply up to the window's end (its real lookahead, masked padding past
    the reply's end), then per group x_t = (1 - t) noise + t mel, t ~ U[0, 1), target
    velocity mel - noise, with the previous group's real mel as the prompt (zeros before a
    reply's first group, as after the daemon's reset). The prior: mu against the mel."""
    cfg = flow.cfg
    look, fpt, p = cfg.lookahead_tokens, cfg.frames_per_token, cfg.prompt_frames
    spans = [token_groups(len(w.reply.codes), chunk_tokens, look)[w.first : w.first + w.count]
             for w in windows]  # fmt: skip
    codes = [w.reply.codes for w in windows]
    tokens, mask, gid = encoder_batch(codes, [s[-1][1] for s in spans], chunk_tokens, look)
    mu = _encode(flow, tokens, mask, gid)
    buckets: dict[int, list[tuple[Tensor, Tensor, Tensor]]] = {}  # frames -> (mu, mel, prompt)
    for i, (w, chosen) in enumerate(zip(windows, spans, strict=True)):
        z = torch.from_numpy(w.reply.z)
        for a, b in chosen:
            prompt = F.pad(z[:, max(0, a * fpt - p) : a * fpt], (max(0, p - a * fpt), 0))
            if a == 0:
                prompt = torch.zeros_like(prompt)
            buckets.setdefault((b - a) * fpt, []).append(
                (mu[i, a * fpt : b * fpt], z[:, a * fpt : b * fpt].T, prompt.T)
            )
    se, l1, count = mu.new_zeros(()), mu.new_zeros(()), 0
    for frames in sorted(buckets):
        m, x1, pr = (torch.stack(parts) for parts in zip(*buckets[frames], strict=True))
        t = torch.rand(len(m), generator=gen)
        x0 = torch.randn(x1.shape, generator=gen)
        xt = (1 - t[:, None, None]) * x0 + t[:, None, None] * x1
        v = flow.estimator(xt, t, m, pr)
        se = se + (v - (x1 - x0)).pow(2).sum()
        l1 = l1 + (m - x1).abs().sum()
        count += x1.numel()
    return se / count, l1 / count


def _magnitude(x: Tensor, n_fft: int, hop: int, window: Tensor, center: bool = True) -> Tensor:
    spec = torch.stft(x, n_fft, hop, window=window, center=center, return_complex=True)
    return torch.view_as_real(spec).pow(2).sum(-1).clamp(min=MAG_FLOOR**2).sqrt()


def log_mel(pcm: Tensor) -> Tensor:
    """``speech_units.output_mel`` in torch, differentiable: PCM [B, s] -> [B, 80, s // HOP]."""
    frames = pcm.shape[-1] // HOP
    x = F.pad(pcm[..., : frames * HOP], (FRAME_PAD, N_FFT - HOP - FRAME_PAD))
    window = torch.from_numpy(frame_window()).float()
    spectrum = _magnitude(x, N_FFT, HOP, window, center=False)
    mel = torch.from_numpy(mel_filters()).float() @ spectrum
    return torch.log(mel.clamp(min=LOG_FLOOR))


def mrstft_loss(out: Tensor, target: Tensor) -> Tensor:
    """Multi-resolution STFT loss (``MRSTFT``): spectral convergence plus log-magnitude L1,
    the mean over the resolutions. PCM [B, s]."""
    total = out.new_zeros(())
    for n_fft, hop in MRSTFT:
        window = torch.hann_window(n_fft)
        y, x = _magnitude(out, n_fft, hop, window), _magnitude(target, n_fft, hop, window)
        total = total + torch.linalg.norm(y - x) / torch.linalg.norm(x).clamp(min=MAG_FLOOR)
        total = total + (y.log() - x.log()).abs().mean()
    return total / len(MRSTFT)


def vocoder_losses(
    vocoder: Vocoder, replies: Sequence[Reply], starts: Sequence[tuple[int, int]],
    frames: int, context: int,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(MR-STFT loss, log-mel L1, f0 loss) of segments of ``frames`` frames at (reply,
    frame) ``starts``, each after ``context`` frames of the mel before it (zeros before
    the reply, the daemon's reset), which the losses do not count. With a sine source the
    tracked f0 drives the excitation (teacher forcing) and the f0 loss (``pitch.f0_losses``,
    L1 + BCE) teaches the head; without one the f0 loss is 0."""
    source = vocoder.source
    mel = torch.zeros(len(starts), replies[0].z.shape[0], context + frames)
    f0 = torch.zeros(len(starts), context + frames)
    wave = torch.zeros(len(starts), frames * HOP)
    for i, (r, f) in enumerate(starts):
        z, pcm = replies[r].z, replies[r].audio()
        a = max(0, f - context)
        part = z[:, a : f + frames]
        at = context - (f - a)
        mel[i, :, at : at + part.shape[1]] = torch.from_numpy(part)
        if source is not None:
            f0[i, at : at + part.shape[1]] = torch.from_numpy(_f0(replies[r])[a : f + frames])
        seg = pcm[f * HOP : (f + frames) * HOP]
        wave[i, : len(seg)] = torch.from_numpy(seg)
    if source is None:
        out, f0_loss = vocoder(mel), mel.new_zeros(())
    else:
        out = vocoder(mel, f0)
        l1, bce = f0_losses(_tail(source.head(mel), context), f0[:, context:])
        f0_loss = l1 + bce
    out = out[:, context * HOP :]
    return mrstft_loss(out, wave), (log_mel(out) - log_mel(wave)).abs().mean(), f0_loss


def _f0(reply: Reply) -> NDArray[np.float32]:
    if reply.f0 is None:
        raise TrainDataError("a vocoder with a sine source needs replies loaded with pitch=True")
    return reply.f0


def _tail(pred: F0Prediction, context: int) -> F0Prediction:
    return F0Prediction(pred.log_f0[:, context:], pred.voicing[:, context:])


@torch.no_grad()
def vocode(vocoder: AnyVocoder, mel: Tensor, frames: int) -> Tensor:
    """Mel [B, 80, n] through the vocoder ``frames`` at a time, as the daemon feeds it ->
    PCM [B, n * HOP] (the one-shot wave for a HiFi-GAN vocoder; Griffin-Lim's differs)."""
    state = vocoder.new_state(mel.shape[0])
    return torch.cat(
        [vocoder.step(mel[..., a : a + frames], state) for a in range(0, mel.shape[-1], frames)],
        dim=-1,
    )


def speak(
    flow: FlowDecoder, vocoder: AnyVocoder, codes: NDArray[np.int64], chunk_tokens: int,
    seed: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """A reply's codes through the flow decoder and the vocoder as the daemon streams them
    (groups of ``chunk_tokens``, seeded noise per chunk, the last chunk final; each group's
    mel to the vocoder) -> (normalised mel [80, 2n], PCM [2n * HOP])."""
    state = flow.new_state(1, chunk_tokens)
    voice = vocoder.new_state(1)
    tokens = torch.from_numpy(codes)[None]
    mels, pcm = [], []
    for k, start in enumerate(range(0, tokens.shape[1], chunk_tokens)):
        part = tokens[:, start : start + chunk_tokens]
        noise = chunk_noise(flow.cfg, 1, part.shape[1], seed, k)
        final = start + chunk_tokens >= tokens.shape[1]
        mels.append(flow.step(part, noise, state, final=final))
        if mels[-1].shape[-1]:
            pcm.append(vocoder.step(mels[-1], voice))
    return torch.cat(mels, dim=-1)[0], torch.cat(pcm, dim=-1)[0]
