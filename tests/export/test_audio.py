"""Audio encoder: parity with Hugging Face Whisper, streaming == one-shot, bounded window."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration, WhisperModel

from venus.errors import ExportError
from venus.export.convert.upstream import HFCheckpoint
from venus.export.convert.whisper import audio_config_from_whisper, whisper_tensors
from venus.export.model.audio import AudioEncoder
from venus.export.model.config import PRESETS, AudioEncoderConfig
from venus.export.model.layers import sinusoids

TOL = 1e-5


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


def tiny_whisper_config() -> WhisperConfig:
    """Odd sizes on purpose, unlike any real Whisper."""
    return WhisperConfig(
        d_model=36,
        encoder_attention_heads=3,
        encoder_layers=3,
        encoder_ffn_dim=52,
        decoder_layers=1,
        decoder_attention_heads=3,
        decoder_ffn_dim=52,
        num_mel_bins=80,
        max_source_positions=150,
        max_target_positions=16,
        vocab_size=100,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )


def perturb(model: torch.nn.Module, seed: int = 0) -> None:
    """Move every parameter off its init (zero biases, unit norms) so names are all tested."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def convert(path: Path, out_dim: int = 16) -> AudioEncoder:
    with HFCheckpoint(path) as ckpt:
        encoder = AudioEncoder(audio_config_from_whisper(ckpt.config), out_dim)
        result = encoder.load_state_dict(dict(whisper_tensors(ckpt)), strict=False)
    assert not result.unexpected_keys
    assert all(k.startswith("projector.") for k in result.missing_keys)
    return encoder.eval()


@pytest.mark.parametrize("kind", [WhisperForConditionalGeneration, WhisperModel])
def test_encode_utterance_matches_hf_whisper(tmp_path: Path, kind: type) -> None:
    torch.manual_seed(0)
    model = kind(tiny_whisper_config()).eval()
    perturb(model)
    model.save_pretrained(tmp_path)
    ours = convert(tmp_path)
    hf_encoder = model.get_encoder()
    mel = torch.randn(2, 80, 300)  # HF Whisper takes exactly 2 * max_source_positions frames
    with torch.no_grad():
        ref = hf_encoder(mel).last_hidden_state
        out = ours.encode_utterance(mel)
    assert out.shape == ref.shape == (2, 150, 36)
    assert rel_err(out, ref) <= TOL


def test_bf16_upstream_stays_bf16(tmp_path: Path) -> None:
    model = WhisperModel(tiny_whisper_config()).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    with HFCheckpoint(tmp_path) as ckpt:
        tensors = dict(whisper_tensors(ckpt))
    assert len(tensors) == 4 + 1 + 2 + 3 * 15  # convs, positions, final norm, layers
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    assert "layers.0.fc1.weight" in tensors


def test_config_errors_name_the_missing_keys() -> None:
    with pytest.raises(ExportError, match="encoder_ffn_dim"):
        audio_config_from_whisper({"num_mel_bins": 80, "d_model": 8})


def tiny_encoder(seed: int = 0) -> AudioEncoder:
    cfg = PRESETS["tiny"]()
    torch.manual_seed(seed)
    encoder = AudioEncoder(cfg.audio, cfg.backbone.hidden_size).eval()
    perturb(encoder, seed)
    encoder.reset_fixed()
    return encoder


def stream(encoder: AudioEncoder, mel: torch.Tensor) -> torch.Tensor:
    state = encoder.new_state(mel.shape[0])
    chunks = mel.split(encoder.mel_frames_per_chunk, dim=-1)
    with torch.no_grad():
        return torch.cat([encoder.step(c, state) for c in chunks], dim=1)


def test_streaming_equals_one_shot_and_reset_replays() -> None:
    encoder = tiny_encoder()
    assert encoder.cfg.left_context_chunks + 1 < 5
    mel = torch.randn(2, 80, 500)  # 5 chunks of 1 s
    state = encoder.new_state(2)
    with torch.no_grad():
        streamed = torch.cat([encoder.step(c, state) for c in mel.split(100, dim=-1)], dim=1)
        one_shot = encoder.encode_chunks(mel)
        assert state.chunks == 5
        assert state.context.shape == (2, 2 * 50, 64)  # bounded: left_context_chunks chunks
        state.reset()
        assert state.chunks == 0 and state.context.shape[1] == 0
        replayed = torch.cat([encoder.step(c, state) for c in mel.split(100, dim=-1)], dim=1)
    assert streamed.shape == (2, 50, 64)
    assert rel_err(streamed, one_shot) <= TOL
    assert torch.equal(streamed, replayed)


@pytest.mark.parametrize(("left", "mel_frames"), [(0, 100), (3, 100), (4, 20)])
def test_streaming_equals_one_shot_for_any_window(left: int, mel_frames: int) -> None:
    cfg = AudioEncoderConfig(
        d_model=16, layers=2, heads=2, ffn_dim=32, max_positions=300, left_context_chunks=left
    )
    torch.manual_seed(1)
    encoder = AudioEncoder(cfg, 8, mel_frames_per_chunk=mel_frames).eval()
    mel = torch.randn(3, 80, (left + 3) * mel_frames)
    state = encoder.new_state(3)
    with torch.no_grad():
        streamed = torch.cat([encoder.step(c, state) for c in mel.split(mel_frames, -1)], 1)
        one_shot = encoder.encode_chunks(mel)
    assert state.context.shape[1] == left * mel_frames // 2
    assert rel_err(streamed, one_shot) <= TOL


def test_streaming_differs_from_whole_utterance_and_forgets_old_chunks() -> None:
    encoder = tiny_encoder()
    mel = torch.randn(1, 80, 500)
    with torch.no_grad():
        whole = encoder.project(encoder.encode_utterance(mel))
    streamed = stream(encoder, mel)
    assert whole.shape == streamed.shape
    assert rel_err(streamed, whole) > 1e-3  # per-chunk conv padding and the bounded window

    # Chunk 0 leaves every window after left_context_chunks + 1 chunks: changing it moves
    # the whole-utterance tokens of chunk 4 but not the streamed ones.
    changed = mel.clone()
    changed[..., :100] = torch.randn(1, 80, 100)
    with torch.no_grad():
        whole_changed = encoder.project(encoder.encode_utterance(changed))
    streamed_changed = stream(encoder, changed)
    assert torch.equal(streamed_changed[:, 30:], streamed[:, 30:])
    assert not torch.equal(streamed_changed[:, :10], streamed[:, :10])
    assert rel_err(whole_changed[:, 40:], whole[:, 40:]) > 1e-4


def test_window_longer_than_position_table_is_refused() -> None:
    cfg = AudioEncoderConfig(d_model=16, layers=1, heads=2, ffn_dim=32, max_positions=120)
    with pytest.raises(ExportError, match="max_positions"):
        AudioEncoder(cfg, 16)  # 3 chunks x 50 frames > 120


def test_tiny_chunk_gives_ten_tokens_and_sinusoid_positions() -> None:
    cfg = PRESETS["tiny"]()
    encoder = AudioEncoder(cfg.audio, cfg.backbone.hidden_size)
    with torch.no_grad():
        encoder.embed_positions.weight.normal_()
    encoder.reset_fixed()
    table = sinusoids(cfg.audio.max_positions, cfg.audio.d_model)
    assert torch.equal(encoder.embed_positions.weight, table)
    assert {"projector.0.weight", "projector.2.weight"} <= set(encoder.state_dict())
    with torch.no_grad():
        tokens = encoder.step(torch.randn(1, 80, cfg.mel_frames_per_chunk), encoder.new_state())
    assert tokens.shape == (1, cfg.audio_tokens_per_chunk, cfg.backbone.hidden_size)
    assert tokens.shape[1] == 10
