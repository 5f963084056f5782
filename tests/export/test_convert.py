"""`venus convert` end to end: tiny upstream transformers models -> a Venus checkpoint."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import (
    Qwen3Config,
    Qwen3ForCausalLM,
    Siglip2VisionConfig,
    Siglip2VisionModel,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

from venus.export.checkpoint import INDEX, load_model

VENUS = Path(sys.executable).with_name("venus")
TOL = 1e-5


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=89,
            hidden_size=40,
            intermediate_size=66,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            tie_word_embeddings=False,
            max_position_embeddings=512,
        )
    ).to(torch.bfloat16).save_pretrained(root / "qwen3")
    (root / "qwen3" / "tokenizer.json").write_text("{}")
    WhisperForConditionalGeneration(
        WhisperConfig(
            vocab_size=60,
            num_mel_bins=80,
            d_model=36,
            encoder_layers=2,
            encoder_attention_heads=3,
            encoder_ffn_dim=52,
            decoder_layers=1,
            decoder_attention_heads=3,
            decoder_ffn_dim=20,
            max_source_positions=150,
            max_target_positions=32,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        )
    ).save_pretrained(root / "whisper")
    Siglip2VisionModel(
        Siglip2VisionConfig(
            hidden_size=30,
            intermediate_size=44,
            num_hidden_layers=2,
            num_attention_heads=3,
            num_patches=16,
            patch_size=8,
        )
    ).save_pretrained(root / "siglip2")
    return {"qwen3": root / "qwen3", "whisper": root / "whisper", "siglip2": root / "siglip2"}


def convert(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), "convert", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def omni_args(upstream: dict[str, Path]) -> list[str]:
    """Every upstream part, a 48 px image, the tiny speech side, seed 7."""
    return [
        *("--qwen3", str(upstream["qwen3"]), "--whisper", str(upstream["whisper"])),
        *("--siglip2", str(upstream["siglip2"]), "--image-size", "48"),
        *("--speech-size", "tiny", "--seed", "7"),
    ]


@pytest.fixture(scope="module")
def omni(upstream: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("conv") / "omni"
    done = convert(out, *omni_args(upstream))
    assert done.returncode == 0, done.stderr
    return out


def test_converted_backbone_matches_transformers(omni: Path, upstream: dict[str, Path]) -> None:
    model = load_model(omni)
    assert model.cfg.frontend == "omni"
    hf = Qwen3ForCausalLM.from_pretrained(upstream["qwen3"], dtype=torch.float32).eval()
    ids = torch.randint(0, 89, (1, 9))
    with torch.no_grad():
        ref = hf(ids).logits
        logits, _ = model.backbone.step(model.backbone.embed(ids), model.backbone.new_cache(1))
    assert rel_err(logits[..., :89], ref) <= TOL


def test_converted_audio_encoder_matches_transformers(
    omni: Path, upstream: dict[str, Path]
) -> None:
    model = load_model(omni)
    hf = WhisperForConditionalGeneration.from_pretrained(upstream["whisper"]).get_encoder().eval()
    mel = torch.randn(1, 80, 300)
    with torch.no_grad():
        ref = hf(mel).last_hidden_state
        ours = model.audio_encoder.encode_utterance(mel)
    assert rel_err(ours, ref) <= TOL


def test_bf16_stays_bf16_and_dtypes_are_recorded(omni: Path) -> None:
    index = json.loads((omni / INDEX).read_text())
    assert index["metadata"]["component_dtypes"]["backbone"] == "bfloat16"
    assert index["metadata"]["component_dtypes"]["audio_encoder"] == "float32"
    # What has no upstream takes the backbone's dtype.
    assert index["metadata"]["component_dtypes"]["speech_decoder"] == "bfloat16"
    with safe_open(str(omni / "backbone-00001.safetensors"), framework="pt") as f:
        assert f.get_tensor("backbone.norm.weight").dtype == torch.bfloat16


def test_tokenizer_files_are_copied(omni: Path) -> None:
    assert (omni / "tokenizer.json").read_text() == "{}"


def test_conversion_is_reproducible(omni: Path, upstream: dict[str, Path], tmp_path: Path) -> None:
    again = convert(tmp_path / "again", *omni_args(upstream))
    assert again.returncode == 0, again.stderr
    assert digests(tmp_path / "again") == digests(omni)


def test_without_siglip_it_is_an_audio_frontend(upstream: dict[str, Path], tmp_path: Path) -> None:
    done = convert(
        tmp_path / "audio",
        "--qwen3",
        str(upstream["qwen3"]),
        "--whisper",
        str(upstream["whisper"]),
        "--speech-size",
        "tiny",
    )
    assert done.returncode == 0, done.stderr
    model = load_model(tmp_path / "audio")
    assert model.cfg.frontend == "audio"
    assert model.vision_encoder is None


def test_speech_side_is_taken_from_a_given_checkpoint(
    omni: Path, upstream: dict[str, Path], tmp_path: Path
) -> None:
    speech = tmp_path / "speech"
    subprocess.run(
        [
            str(VENUS),
            "init",
            "--config",
            "tiny",
            "--seed",
            "11",
            "--out",
            str(speech),
            "--dtype",
            "bfloat16",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    done = convert(
        tmp_path / "out",
        "--qwen3",
        str(upstream["qwen3"]),
        "--whisper",
        str(upstream["whisper"]),
        "--speech",
        str(speech),
    )
    assert done.returncode == 0, done.stderr
    ours, donor = load_model(tmp_path / "out"), load_model(speech)
    for part in ("flow_decoder", "vocoder"):
        for (n1, t1), (n2, t2) in zip(
            getattr(ours, part).state_dict().items(),
            getattr(donor, part).state_dict().items(),
            strict=True,
        ):
            assert n1 == n2 and torch.equal(t1, t2), n1
    # The speech decoder's conditioning projection is sized for the new backbone: re-initialised.
    assert ours.speech_decoder.cond_proj.weight.shape[1] == 40


def test_missing_upstream_is_a_clear_error(upstream: dict[str, Path], tmp_path: Path) -> None:
    done = convert(
        tmp_path / "x", "--qwen3", str(tmp_path / "nope"), "--whisper", str(upstream["whisper"])
    )
    assert done.returncode == 1
    assert "nope/config.json: no such file" in done.stderr
