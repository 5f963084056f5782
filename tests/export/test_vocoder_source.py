"""The vocoder's sine source (neural source-filter): the excitation's pitch and phase, a
vocoder with it streaming sample-exact, its config written only when set, and its ONNX
graph and engine runner carrying the phase (``past_phase`` / ``present_phase``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TinyExport
from support.vocoder_graph import exported_vocoder
from torch import Tensor

from venus.errors import ExportError
from venus.export.model.config import PRESETS, config_from_dict, config_to_dict
from venus.export.model.venus import VenusModel
from venus.export.model.vocoder import Vocoder
from venus.export.model.vocoder_source import PHASE_STEPS, sine_excitation

HOP, SR = 480, 24000


def sine_vocoder(harmonics: int = 4) -> Vocoder:
    """The tiny vocoder with a sine source, its head voiced throughout (the phase counts
    everywhere) and its f0 following the mel."""
    torch.manual_seed(0)
    vocoder = Vocoder(replace(PRESETS["tiny"]().vocoder, source="sine", harmonics=harmonics))
    assert vocoder.source is not None
    with torch.no_grad():
        vocoder.source.head.proj.bias[1] = 4.0
    return vocoder.eval()


def stream(vocoder: Vocoder, mel: Tensor, sizes: list[int]) -> Tensor:
    state = vocoder.new_state(mel.shape[0])
    parts, at = [], 0
    with torch.no_grad():
        for n in sizes:
            parts.append(vocoder.step(mel[..., at : at + n], state))
            at += n
    assert at == mel.shape[-1]
    return torch.cat(parts, dim=-1)


def test_the_excitation_has_the_pitch_and_its_harmonics() -> None:
    f0 = torch.full((1, 50), 200.0)
    sines, _ = sine_excitation(f0, torch.zeros(1, 1), HOP, SR, 3)
    assert sines.shape == (1, 3, 50 * HOP)
    for k in range(3):
        spectrum = torch.fft.rfft(sines[0, k]).abs()
        assert int(spectrum.argmax()) * SR / sines.shape[-1] == 200.0 * (k + 1)
    assert float(sines.abs().max()) == pytest.approx(1.0, abs=1e-3)


def test_unvoiced_frames_and_harmonics_past_nyquist_are_silent() -> None:
    f0 = torch.tensor([[0.0, 5000.0, 0.0]])
    sines, _ = sine_excitation(f0, torch.zeros(1, 1), HOP, SR, 3)
    frame = sines.reshape(1, 3, 3, HOP)
    assert not frame[:, :, 0].any() and not frame[:, :, 2].any()
    assert frame[0, 0, 1].abs().max() > 0.9 and frame[0, 1, 1].abs().max() > 0.9  # 5, 10 kHz
    assert not frame[0, 2, 1].any()  # 15 kHz: past Nyquist


def test_the_excitation_streams_exactly_over_minutes() -> None:
    """Chunks of any size, carrying the phase, give the one-shot sines bit for bit (the
    frames' cycles are whole 1/PHASE_STEPS, which float32 sums exactly)."""
    gen = torch.Generator().manual_seed(1)
    f0 = 60 + 400 * torch.rand(2, 6000, generator=gen)  # two minutes
    f0[:, ::5] = 0.0
    whole, after = sine_excitation(f0, torch.zeros(2, 1), HOP, SR, 8)
    phase, at, parts = torch.zeros(2, 1), 0, []
    sizes = torch.randint(1, 40, (1000,), generator=gen).tolist()
    while at < f0.shape[1]:
        n = sizes.pop()
        part, phase = sine_excitation(f0[:, at : at + n], phase, HOP, SR, 8)
        parts.append(part)
        at += n
    assert torch.equal(torch.cat(parts, dim=-1), whole)
    assert torch.equal(phase, after)
    assert bool(((after * PHASE_STEPS) == (after * PHASE_STEPS).round()).all())


def test_the_head_predicts_f0_from_the_mel_frame_by_frame() -> None:
    """The fixture's head is voiced throughout with an f0 that varies (so that the
    streaming tests of test_token2wave.py exercise the phase); its streamed output equals
    a one-shot one in chunks of a single frame too."""
    vocoder = sine_vocoder()
    mel = torch.randn(2, 80, 20, generator=torch.Generator().manual_seed(3))
    assert vocoder.source is not None
    with torch.no_grad():
        f0 = vocoder.source.head(mel).hz()
        ref = vocoder(mel)
    assert bool((f0 > 0).all()) and float(f0.std()) > 1.0
    streamed = stream(vocoder, mel, [1] * 20)
    assert float((streamed - ref).abs().max() / ref.abs().max()) <= 1e-5


def test_the_given_f0_drives_a_sine_vocoder() -> None:
    """Training's teacher forcing: the f0 given replaces the head's; a vocoder without a
    source refuses one."""
    vocoder = sine_vocoder()
    mel = torch.randn(1, 80, 60, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        low, high = (
            vocoder(mel, torch.full((1, 60), 100.0)),
            vocoder(mel, torch.full((1, 60), 200.0)),
        )
    assert (low - high).abs().max() > 1e-3 * low.abs().max()
    plain = Vocoder(PRESETS["tiny"]().vocoder)
    with pytest.raises(ValueError, match="f0 given to a vocoder without a source"):
        plain(mel, torch.full((1, 60), 100.0))


def test_a_config_without_a_source_is_written_as_before(tiny_export: TinyExport) -> None:
    """The untrained tiny engines' config is what the preset writes (no source fields); a
    sine source is written and read back; a bad one is named."""
    shipped = json.loads((tiny_export.engines / "manifest.json").read_text())["model_config"]
    assert config_to_dict(PRESETS["tiny"]()) == shipped
    assert "source" not in shipped["model"]["vocoder"]
    cfg = PRESETS["tiny"]()
    sine = replace(cfg, vocoder=replace(cfg.vocoder, source="sine", harmonics=6))
    written = config_to_dict(sine)
    assert written["model"]["vocoder"]["source"] == "sine"
    assert written["model"]["vocoder"]["harmonics"] == 6
    assert config_from_dict(written, "test") == sine
    odd = replace(cfg, vocoder=replace(cfg.vocoder, harmonics=6))  # no source, not default
    assert config_from_dict(config_to_dict(odd), "test") == odd
    written["model"]["vocoder"]["source"] = "noise"
    with pytest.raises(ExportError, match=r"model\.vocoder\.source"):
        config_from_dict(written, "test")


def test_the_sine_vocoder_exports_and_its_runner_streams_the_phase(
    tmp_path: Path, tiny_export: TinyExport
) -> None:
    """The ONNX graph takes and gives the phase, passes the verify check, and the engine
    runner streamed over uneven chunks matches torch's ``step`` and one-shot."""
    from venus.export.model.init import init_model

    cfg = PRESETS["tiny-audio"]()
    model = VenusModel(replace(cfg, vocoder=replace(cfg.vocoder, source="sine"))).eval()
    init_model(model, 0)
    assert model.vocoder.source is not None
    with torch.no_grad():  # voiced throughout: the phase counts everywhere
        model.vocoder.source.head.proj.bias[1] = 4.0
    entry, runner = exported_vocoder(model, tmp_path, tiny_export.engines)
    convs = len(model.vocoder.convs)
    assert [t.name for t in entry.inputs][:3] == ["mel", "past_phase", "past_conv.0"]
    assert [t.name for t in entry.outputs][:3] == ["pcm", "present_phase", "present_conv.0"]
    assert len(entry.inputs) == len(entry.outputs) == convs + 2
    vocoder = model.vocoder
    state, ref_state = runner.new_state(), vocoder.new_state()
    rng = np.random.default_rng(3)
    chunks = [rng.standard_normal((1, 80, n)).astype(np.float32) for n in (7, 1, 50, 13)]
    pieces = []
    with torch.no_grad():
        for mel in chunks:
            pcm = runner.step(mel, state)
            ref = vocoder.step(torch.from_numpy(mel), ref_state).numpy()
            assert np.abs(pcm - ref).max() <= 1e-4 * np.abs(ref).max()
            pieces.append(pcm)
        one_shot = vocoder(torch.from_numpy(np.concatenate(chunks, axis=2))).numpy()
    assert state.phase is not None and ref_state.phase is not None
    np.testing.assert_allclose(state.phase, ref_state.phase.numpy(), atol=1e-6)
    assert np.abs(np.concatenate(pieces, axis=1) - one_shot).max() <= 1e-4 * np.abs(one_shot).max()
    state.reset()
    assert not state.phase.any() and all(not c.any() for c in state.caches)
