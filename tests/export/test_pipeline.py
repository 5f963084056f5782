"""One chunk through every tiny component, as the frontend loop will run them."""

from __future__ import annotations

import torch

from venus.export.model.config import CONTROL_TOKENS, PRESETS
from venus.export.model.flow import chunk_noise
from venus.export.model.init import init_model
from venus.export.model.venus import VenusModel


def test_one_speaking_chunk_end_to_end() -> None:
    cfg = PRESETS["tiny"]()
    model = VenusModel(cfg).eval()
    init_model(model, seed=5)
    ids = cfg.special_token_ids
    bb = model.backbone
    assert model.vision_encoder is not None

    def marker(name: str) -> torch.Tensor:
        return bb.embed(torch.tensor([[ids[name]]]))

    with torch.no_grad():
        audio = model.audio_encoder.step(
            torch.randn(1, 80, cfg.mel_frames_per_chunk), model.audio_encoder.new_state(1)
        )
        image = model.vision_encoder(torch.rand(1, 3, 64, 64))
        chunk = torch.cat(
            [
                marker("<|chunk_start|>"),
                marker("<|audio_start|>"),
                audio,
                marker("<|audio_end|>"),
                marker("<|image_start|>"),
                image,
                marker("<|image_end|>"),
                marker("<|chunk_end|>"),
            ],
            dim=1,
        )
        assert chunk.shape[1] == cfg.audio_tokens_per_chunk + cfg.vision.queries + 6  # type: ignore[union-attr]
        cache = bb.new_cache(1)
        logits, _ = bb.step(chunk, cache)
        control = torch.tensor([ids[t] for t in CONTROL_TOKENS])
        decision = control[logits[0, -1, control].argmax()]
        assert int(decision) in control.tolist()

        # Speak: a few text tokens, their hidden states condition the speech decoder.
        text_hidden = []
        token = torch.tensor([[int(decision)]])
        for _ in range(4):
            logits, h = bb.step(bb.embed(token), cache)
            token = logits[:, -1:].argmax(-1)
            text_hidden.append(h)
        speech = model.speech_decoder.speak_chunk(
            torch.cat(text_hidden, 1),
            model.speech_decoder.new_cache(1),
            cfg.speech_tokens_per_chunk,
        )
        codes = speech.clamp(max=cfg.flow.codebook - 1)
        codes = torch.nn.functional.pad(codes, (0, cfg.speech_tokens_per_chunk - codes.shape[1]))
        noise = chunk_noise(cfg.flow, 1, codes.shape[1], seed=0, chunk_index=0)
        mel = model.flow_decoder.step(codes, noise, model.flow_decoder.new_state(1), final=True)
        pcm = model.vocoder.step(mel, model.vocoder.new_state(1))
    assert mel.shape == (1, 80, 50)
    assert pcm.shape == (1, cfg.vocoder.sample_rate)  # 1 s of 24 kHz audio
    assert torch.isfinite(pcm).all()
    assert float(pcm.abs().max()) <= 1.0
