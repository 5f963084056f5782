"""The Griffin-Lim vocoder (``VocoderConfig.kind = "griffin_lim"``): real speech through
its mel comes back intelligible to the offline recogniser, each streaming step is final and
sized like its mel, a steady tone keeps its pitch, silence stays silent, its config is
written only for that kind, and its ONNX graph in the engine runner matches torch."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soxr
import torch
from conftest import TinyExport
from support.vocoder_graph import exported_vocoder

from venus.datagen import tts
from venus.evaluation.asr import NO_ERRORS, PocketSphinx, word_errors
from venus.export.model.config import PRESETS, VocoderConfig, config_from_dict, config_to_dict
from venus.export.model.griffin_lim import GriffinLimVocoder
from venus.export.model.venus import VenusModel
from venus.export.model.vocoders import make_vocoder
from venus.train.speech_units import LOG_FLOOR, output_mel

HOP, SR = 480, 24000
SENTENCES = (
    "William Shakespeare wrote Romeo and Juliet.",
    "In Brazil people speak Portuguese.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "Bees collect nectar from flowers and turn it into honey.",
)


def config(iterations: int = 16) -> VocoderConfig:
    return replace(PRESETS["tiny"]().vocoder, kind="griffin_lim", iterations=iterations)


@cache
def speech() -> tuple[tuple[str, np.ndarray], ...]:
    """The assistant's voice (flite kal16) saying each sentence, at the vocoder's 24 kHz."""
    voice = tts.Voice("flite", "kal16")
    return tuple(
        (text, soxr.resample(tts.synthesize(text, voice), 16000, SR).astype(np.float32))
        for text in SENTENCES
    )


def vocoder_for(mels: list[np.ndarray], iterations: int = 16) -> GriffinLimVocoder:
    """A Griffin-Lim vocoder normalised as a voice fitted on ``mels`` would be."""
    frames = np.concatenate(mels, axis=1)
    vocoder = GriffinLimVocoder(config(iterations))
    vocoder.set_stats(
        torch.from_numpy(frames.mean(axis=1)), torch.from_numpy(frames.std(axis=1) + 1e-2)
    )
    return vocoder


def stream(vocoder: GriffinLimVocoder, z: np.ndarray, sizes: list[int]) -> np.ndarray:
    """``z`` [80, frames] fed in chunks of ``sizes`` (cycled) -> PCM."""
    state, parts, at, k = vocoder.new_state(), [], 0, 0
    with torch.no_grad():
        while at < z.shape[1]:
            size = sizes[k % len(sizes)]
            parts.append(vocoder.step(torch.from_numpy(z[None, :, at : at + size]), state)[0])
            at, k = at + size, k + 1
    return torch.cat(parts).numpy()


def normalised(vocoder: GriffinLimVocoder, mel: np.ndarray) -> np.ndarray:
    return ((mel - vocoder.mean.numpy()[:, None]) / vocoder.std.numpy()[:, None]).astype(np.float32)


def test_speech_through_its_mel_is_heard() -> None:
    """The tiny voice's target: word error rate below 0.3 on the assistant's own speech
    (PocketSphinx, the recogniser `venus eval asr` uses), streamed in 1 s chunks."""
    asr = PocketSphinx()
    mels = [output_mel(pcm) for _, pcm in speech()]
    vocoder = vocoder_for(mels)
    original, rebuilt = NO_ERRORS, NO_ERRORS
    for (text, pcm), mel in zip(speech(), mels, strict=True):
        out = stream(vocoder, normalised(vocoder, mel), [50])
        assert out.shape == (mel.shape[1] * HOP,)
        assert 0.05 < np.abs(out).max() <= 1.0
        original = original + word_errors(text, asr.transcribe(pcm, SR).text)
        rebuilt = rebuilt + word_errors(text, asr.transcribe(out, SR).text)
    assert original.wer is not None and original.wer <= 0.2, original
    assert rebuilt.wer is not None and rebuilt.wer < 0.3, rebuilt


def test_each_step_is_final_and_sized_like_its_mel() -> None:
    """A step emits hop samples a mel frame, and what it emits no later step changes:
    the first chunks' output is the same whatever follows."""
    _, pcm = speech()[0]
    mel = output_mel(pcm)
    vocoder = vocoder_for([mel], iterations=4)
    z = normalised(vocoder, mel)
    whole = stream(vocoder, z, [20, 0, 7, 1, 33])  # an empty step changes nothing
    assert whole.shape == (z.shape[1] * HOP,)
    head = stream(vocoder, z[:, :28], [20, 7, 1])
    np.testing.assert_array_equal(whole[: len(head)], head)
    other = stream(vocoder, z, [50])  # other chunks: another, equally loud, wave
    assert other.shape == whole.shape
    assert abs(np.std(other) / np.std(whole) - 1.0) < 0.2


def test_a_steady_tone_keeps_its_pitch_and_silence_stays_silent() -> None:
    """Within one bin of the vocoder's 480-point STFT (50 Hz): the mel's bands are no
    finer there."""
    t = np.arange(SR) / SR
    tone = (0.3 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)
    mel = output_mel(tone)
    vocoder = vocoder_for([mel])
    out = stream(vocoder, normalised(vocoder, mel), [50])
    middle = out[SR // 4 : 3 * SR // 4]
    spectrum = np.abs(np.fft.rfft(middle * np.hanning(len(middle))))
    peak_hz = np.argmax(spectrum) * SR / len(middle)
    assert abs(peak_hz - 220.0) < SR / HOP, peak_hz
    silence = np.full_like(mel, np.log(LOG_FLOOR))
    quiet = stream(vocoder, normalised(vocoder, silence), [50])
    assert np.abs(quiet).max() < 1e-3


def test_its_config_is_written_only_for_that_kind() -> None:
    """The shipped engines' config has no kind; a Griffin-Lim one is written, read back and
    builds the weightless vocoder; a bad kind is named."""
    from venus.errors import ExportError

    cfg = PRESETS["tiny"]()
    assert "kind" not in config_to_dict(cfg)["model"]["vocoder"]
    gl = replace(cfg, vocoder=config(iterations=8))
    written = config_to_dict(gl)
    assert written["model"]["vocoder"]["kind"] == "griffin_lim"
    assert written["model"]["vocoder"]["iterations"] == 8
    assert config_from_dict(written, "test") == gl
    vocoder = make_vocoder(gl.vocoder)
    assert isinstance(vocoder, GriffinLimVocoder) and not list(vocoder.parameters())
    assert set(vocoder.state_dict()) == {"mean", "std"}  # what a voice sets and ships
    written["model"]["vocoder"]["source"] = "sine"
    with pytest.raises(ExportError, match="a griffin_lim vocoder has no source"):
        config_from_dict(written, "test")
    written["model"]["vocoder"]["kind"] = "wavenet"
    with pytest.raises(ExportError, match=r"model\.vocoder\.kind"):
        config_from_dict(written, "test")


def test_it_stays_float32_in_fp16_exports_and_tensorrt_builds(tiny_export: TinyExport) -> None:
    """Its phase search divides by magnitudes float16 cannot hold; the trained vocoder and
    every other graph still go to fp16."""
    from venus.engines.manifest import load_manifest
    from venus.export.onnx.build import component_precision
    from venus.export.tensorrt import fp32_only

    cfg = PRESETS["tiny"]()
    gl = replace(cfg, vocoder=config())
    assert component_precision("vocoder", "fp16", gl) == "fp32"
    assert component_precision("vocoder", "fp16", cfg) == "fp16"
    assert component_precision("flow_decoder", "fp16", gl) == "fp16"
    shipped = load_manifest(tiny_export.engines)  # untrained: a trained vocoder's config
    assert not fp32_only("vocoder", shipped)
    written = replace(shipped, model_config=config_to_dict(gl))
    assert fp32_only("vocoder", written) and not fp32_only("backbone", written)


@pytest.mark.slow  # about 60 s
def test_the_graph_in_the_engine_runner_matches_torch(
    tmp_path: Path, tiny_export: TinyExport
) -> None:
    """Exported like any vocoder (mel and two carried states in, pcm and the states out),
    it passes the export's verify check, and the runner streamed over uneven chunks gives
    torch's ``step``."""
    from venus.export.model.init import init_model

    cfg = PRESETS["tiny-audio"]()
    model = VenusModel(replace(cfg, vocoder=config())).eval()  # the recipe's 16 rounds
    init_model(model, 0)
    _, pcm = speech()[1]
    mel = output_mel(pcm)
    assert isinstance(model.vocoder, GriffinLimVocoder)
    model.vocoder.set_stats(torch.from_numpy(mel.mean(axis=1)), torch.from_numpy(mel.std(axis=1)))
    entry, runner = exported_vocoder(model, tmp_path, tiny_export.engines)
    assert [t.name for t in entry.inputs] == ["mel", "past_conv.0", "past_conv.1"]
    assert [t.name for t in entry.outputs] == ["pcm", "present_conv.0", "present_conv.1"]
    vocoder = model.vocoder
    state, ref_state = runner.new_state(), vocoder.new_state()
    z = normalised(vocoder, mel)
    at = 0
    with torch.no_grad():
        for n in (50, 7, 1, 30):
            chunk = np.ascontiguousarray(z[None, :, at : at + n])
            out = runner.step(chunk, state)
            ref = vocoder.step(torch.from_numpy(chunk), ref_state).numpy()
            assert out.shape == ref.shape == (1, n * HOP)
            # 16 rounds a chunk, carried from chunk to chunk, amplify float rounding: to
            # 1e-3 of the peak here; 1e-2 (-40 dB) is far below hearing, far above rounding
            assert np.abs(out - ref).max() <= 1e-2 * max(np.abs(ref).max(), 1e-3)
            at += n
