"""`venus train-voice` on a small generated set: the recipe's errors, the flow decoder
trained on the groups the daemon runs, losses that fall on one reply, a resumed run equal
to an uninterrupted one, and a VOICE that loads into the model with its configs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from support.states import assert_same_states
from support.voices import quick

from venus.train.data import TrainDataError
from venus.train.voice_config import VoiceConfigError, parse_voice_config

RECIPES = Path(__file__).resolve().parents[2] / "train" / "recipes"


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "data, match",
    [
        ({"flow": {"stepz": 3}}, r"unknown key flow\.stepz; did you mean steps\?"),
        ({"optimizer": {}}, r"unknown section \[optimizer\]"),
        ({"vocoder": {"steps": "many"}}, r"vocoder\.steps must be a int"),
        ({"vocoder": {"kernels": 3}}, r"vocoder\.kernels must be a list of int"),
        ({"vocoder": {"dilations": []}}, r"vocoder\.dilations must be a non-empty list"),
        ({"flow": {"window_s": 2.5}}, r"flow\.window_s must be a whole number"),
        ({"flow": {"d_model": 30}}, r"flow\.d_model must be a positive multiple of flow\.heads"),
        ({"units": {"k": 7000}}, r"units\.k must be in \[2, 6561\]"),
        ({"train": {"preset": "venus-9b"}}, r"preset must be one of tiny, tiny-audio, tiny-wide"),
        ({"flow": {"steps": 0}, "vocoder": {"steps": 0}}, r"flow\.steps or vocoder\.steps"),
        (
            {"vocoder": {"source": "noise"}},
            r"vocoder\.source must be one of none, sine, not 'noise'",
        ),
        ({"vocoder": {"harmonics": 0}}, r"vocoder\.harmonics must be in \[1, 64\]"),
        ({"vocoder": {"f0_weight": -1}}, r"vocoder\.f0_weight must be >= 0"),
        ({"vocoder": {"kind": "wavenet"}}, r"vocoder\.kind must be one of hifigan, griffin_lim"),
        ({"vocoder": {"kind": "griffin_lim", "iterations": 0}}, r"vocoder\.iterations must be"),
        (
            {"vocoder": {"kind": "griffin_lim", "source": "sine"}},
            r"vocoder\.source needs vocoder\.kind = \"hifigan\"",
        ),
        (
            {"flow": {"steps": 0}, "vocoder": {"kind": "griffin_lim"}},
            r"flow\.steps or vocoder\.steps",
        ),
    ],
)
def test_bad_recipes_name_the_key(data: dict[str, object], match: str) -> None:
    with pytest.raises(VoiceConfigError, match=match):
        parse_voice_config(data, "voice.toml")


def test_a_recipe_reads_back_what_it_wrote_and_the_shipped_one_loads() -> None:
    from venus.train.voice_config import load_voice_config

    cfg = parse_voice_config({"flow": {"learning_rate": 1, "steps": 5},
                              "vocoder": {"kernels": [3, 5]}})  # fmt: skip
    assert cfg.flow.learning_rate == 1.0 and cfg.vocoder.kernels == (3, 5) and cfg.steps == 3000
    assert parse_voice_config(cfg.to_toml_dict()) == cfg
    assert load_voice_config(RECIPES / "voice.toml").train.preset == "tiny"


def test_the_torch_mel_is_the_output_mel() -> None:
    from venus.train.speech_units import output_mel
    from venus.train.voice import log_mel

    pcm = (np.random.default_rng(0).standard_normal(24000 + 123) * 0.1).astype(np.float32)
    pcm[:4000] = 0.0  # digital silence: the log floor
    got = log_mel(torch.from_numpy(pcm)[None])[0].numpy()
    assert got.shape == (80, 50)
    np.testing.assert_allclose(got, output_mel(pcm), atol=2e-4)


def test_training_sees_the_groups_the_daemon_runs() -> None:
    """The padded batch of training windows gives the encoder what the one-shot path
    gives it: solving each group from the batch's mu reproduces ``FlowDecoder.forward``,
    for whole replies of two lengths and for a window that ends mid-reply."""
    from venus.export.model.config import PRESETS
    from venus.export.model.flow import FlowDecoder, token_groups, utterance_noise
    from venus.export.model.init import init_component
    from venus.train.voice import _encode, encoder_batch

    cfg = PRESETS["tiny"]().flow
    flow = FlowDecoder(cfg).eval()
    init_component(flow, 0, "flow_decoder")
    look = cfg.lookahead_tokens
    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 64, n) for n in (100, 40, 100)]
    # the first ends in a group of 28 codes (72-100); the third stops after [0, 22), [22, 47)
    ends = [100, 40, 47]
    with torch.no_grad():
        mu = _encode(flow, *encoder_batch(codes, ends, 25, look))
        for row, (c, end) in enumerate(zip(codes, ends, strict=True)):
            noise = utterance_noise(cfg, 1, len(c), seed=row)
            want = flow(torch.from_numpy(c)[None], noise)[..., : 2 * end]
            prompt, got = torch.zeros(1, cfg.mel_bins, cfg.prompt_frames), []
            for a, b in token_groups(len(c), 25, look):
                if b > end:
                    break
                mel = flow.solve(mu[row : row + 1, 2 * a : 2 * b], noise[..., 2 * a : 2 * b],
                                 prompt, 1.0)  # fmt: skip
                prompt = torch.cat((prompt, mel), -1)[..., -cfg.prompt_frames :]
                got.append(mel)
            torch.testing.assert_close(torch.cat(got, -1), want, atol=1e-5, rtol=1e-5)


def test_losses_fall_on_one_reply(small_set: Path) -> None:
    """Overfitting one reply: the flow matching and MR-STFT losses fall under 70% of their
    start (each measured on the same draws before and after)."""
    from venus.export.model.config import PRESETS, VocoderConfig
    from venus.export.model.flow import FlowDecoder, token_groups
    from venus.export.model.init import init_component
    from venus.export.model.vocoder import Vocoder
    from venus.train.data import read_index
    from venus.train.speech_units import fit_units
    from venus.train.voice import Window, flow_losses, load_replies, vocoder_losses

    records = read_index(small_set)
    _, book = fit_units(small_set, records, 32, iterations=5)
    reply = max(load_replies(small_set, records[:3], book, 25), key=lambda r: len(r.codes))
    windows = [
        Window(reply, g, 1) for g in range(min(4, len(token_groups(len(reply.codes), 25, 3))))
    ]
    flow = FlowDecoder(PRESETS["tiny"]().flow)
    vocoder = Vocoder(VocoderConfig(channels=32, resblock_kernels=(3,), resblock_dilations=(1,)))
    init_component(flow, 0, "flow_decoder")
    init_component(vocoder, 0, "vocoder")
    segments = [(0, f) for f in range(0, reply.z.shape[1] - 25, 25)][:4]

    def flow_loss() -> float:
        with torch.no_grad():
            fm, prior = flow_losses(flow, windows, 25, torch.Generator().manual_seed(7))
        return float(fm + prior)

    def vocoder_loss() -> float:
        with torch.no_grad():
            return float(vocoder_losses(vocoder, [reply], segments, 25, 8)[0])

    before = flow_loss(), vocoder_loss()
    opt_f = torch.optim.AdamW(flow.parameters(), lr=1e-3)
    opt_v = torch.optim.AdamW(vocoder.parameters(), lr=1e-3)
    for step in range(50):
        fm, prior = flow_losses(flow, windows, 25, torch.Generator().manual_seed(step))
        opt_f.zero_grad()
        (fm + prior).backward()  # type: ignore[no-untyped-call]
        opt_f.step()
        stft, mel, _ = vocoder_losses(vocoder, [reply], segments, 25, 8)
        opt_v.zero_grad()
        (stft + mel).backward()  # type: ignore[no-untyped-call]
        opt_v.step()
    after = flow_loss(), vocoder_loss()
    assert after[0] < 0.7 * before[0], (before, after)
    assert after[1] < 0.7 * before[1], (before, after)


def test_the_f0_of_a_tone_is_tracked_at_each_frame() -> None:
    """A 150 Hz tone with overtones after 0.3 s of silence, at the output mel's frames."""
    from venus.train.pitch import track_f0

    t = np.arange(24000) / 24000
    tone = sum(0.3 / k * np.sin(2 * np.pi * 150 * k * t) for k in range(1, 5))
    pcm = np.concatenate((np.zeros(7200), tone)).astype(np.float32)
    f0 = track_f0(pcm, len(pcm) // 480)
    assert f0.shape == (65,) and f0.dtype == np.float32
    assert not f0[:13].any()  # silence: unvoiced
    np.testing.assert_allclose(f0[18:62], 150.0, rtol=0.01)
    assert not track_f0(pcm[:500], 1).any()  # shorter than one analysis: unvoiced


def test_a_sine_source_learns_the_f0_of_one_reply(small_set: Path) -> None:
    """The replies carry their tracked f0; the f0 head's loss falls under half its start
    while the waveform losses are taught with the tracked f0."""
    from venus.export.model.config import VocoderConfig
    from venus.export.model.init import init_component
    from venus.export.model.vocoder import Vocoder
    from venus.train.data import read_index
    from venus.train.speech_units import fit_units
    from venus.train.voice import load_replies, vocoder_losses

    records = read_index(small_set)
    _, book = fit_units(small_set, records, 32, iterations=5)
    replies = load_replies(small_set, records[:3], book, 25, pitch=True)
    reply = max(replies, key=lambda r: len(r.codes))
    assert reply.f0 is not None and reply.f0.shape == (reply.z.shape[1],)
    assert (
        0.1 < float((reply.f0 > 0).mean()) < 0.95 and 60 < np.median(reply.f0[reply.f0 > 0]) < 400
    )
    assert load_replies(small_set, records[:1], book, 25)[0].f0 is None
    vocoder = Vocoder(VocoderConfig(channels=32, resblock_kernels=(3,), resblock_dilations=(1,),
                                    source="sine", harmonics=4))  # fmt: skip
    init_component(vocoder, 0, "vocoder")
    segments = [(0, f) for f in range(0, reply.z.shape[1] - 25, 25)][:4]
    plain = Vocoder(VocoderConfig(channels=32, resblock_kernels=(3,), resblock_dilations=(1,)))
    assert float(vocoder_losses(plain, [reply], segments, 25, 8)[2]) == 0.0
    with torch.no_grad():
        before = float(vocoder_losses(vocoder, [reply], segments, 25, 8)[2])
    opt = torch.optim.AdamW(vocoder.parameters(), lr=3e-3)
    for _ in range(30):
        stft, mel, f0 = vocoder_losses(vocoder, [reply], segments, 25, 8)
        opt.zero_grad()
        (stft + mel + f0).backward()  # type: ignore[no-untyped-call]
        opt.step()
    with torch.no_grad():
        after = float(vocoder_losses(vocoder, [reply], segments, 25, 8)[2])
    assert after < 0.5 * before, (before, after)


def test_a_stopped_run_resumes_to_the_same_weights(small_set: Path, tmp_path: Path) -> None:
    from venus.train.voice_run import train_voice

    lines: list[str] = []
    whole = train_voice(quick(4), small_set, tmp_path / "whole", lines.append)
    assert whole.steps == 4 and whole.resumed_from == 0
    first = train_voice(quick(4), small_set, tmp_path / "parts", lines.append, stop_after=3)
    assert first.steps == 3  # stopped between checkpoints: the state is step 2's
    assert json.loads((tmp_path / "parts" / "voice.json").read_text())["step"] == 2
    second = train_voice(quick(4), small_set, tmp_path / "parts", lines.append)
    assert second.resumed_from == 2 and second.steps == 4
    assert any("resuming" in line for line in lines)
    assert_same_states(tmp_path / "whole", tmp_path / "parts", ("flow", "vocoder"))
    history = (tmp_path / "parts" / "train" / "history.jsonl").read_text().splitlines()
    rows = [json.loads(h) for h in history]
    assert [r["step"] for r in rows if "flow_loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in rows if "vocoder_loss" in r] == [1, 2, 3]  # its steps: 3
    starts = (tmp_path / "parts" / "train" / "machines.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in starts] == [0, 2]  # the start and the resume
    png = tmp_path / "parts" / "train" / "loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # run again once finished: the last measurement at once, no reply loaded
    again: list[str] = []
    third = train_voice(quick(4), small_set, tmp_path / "parts", again.append)
    assert (third.steps, third.resumed_from, third.metrics) == (4, 4, second.metrics)
    assert not any("loading replies" in line for line in again), again
    assert any("has run all 4 steps" in line for line in again)
    # the data's own error comes first, not the state's "another recipe or data"
    with pytest.raises(TrainDataError, match=r"no index\.jsonl"):
        train_voice(quick(4), tmp_path / "nothing", tmp_path / "parts", again.append)


def test_the_first_samples_of_a_larger_set_train_the_smaller_set_s_voice(
    small_set: Path, tmp_path: Path
) -> None:
    """data.samples (`venus train-voice --samples N`): a set drawn at the same seed with more
    samples begins with the smaller one's, so its first N train the same voice (what lets
    make-venus-tiny's 6,000-sample set keep the 2,400-sample set's voice)."""
    from safetensors.torch import load_file

    from venus.datagen.config import parse_config
    from venus.datagen.runner import run
    from venus.train.voice_config import with_samples
    from venus.train.voice_run import train_voice

    four = tmp_path / "four"  # small_set's config (tests/train/conftest.py) with 4 samples
    run(parse_config({
        "samples": 4, "duration": {"min_s": 8.0, "max_s": 12.0},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    }), four, seed=2)  # fmt: skip
    index = (small_set / "index.jsonl").read_text().splitlines()
    assert (four / "index.jsonl").read_text().splitlines() == index[:4]
    cfg, lines = quick(2), []
    first = train_voice(with_samples(cfg, 4), small_set, tmp_path / "first", lines.append)
    train_voice(cfg, four, tmp_path / "of-four", lines.append)
    assert first.steps == 2
    assert_same_states(tmp_path / "first", tmp_path / "of-four", ("flow", "vocoder"))
    units = load_file(tmp_path / "first" / "units.safetensors")
    same = load_file(tmp_path / "of-four" / "units.safetensors")
    assert units.keys() == same.keys() and all(torch.equal(units[k], same[k]) for k in units)
    # the whole set is another voice: the codes are fitted on six samples' speech
    train_voice(cfg, small_set, tmp_path / "all", lines.append)
    other = load_file(tmp_path / "all" / "units.safetensors")
    assert not all(torch.equal(units[k], other[k]) for k in units)
    with pytest.raises(VoiceConfigError, match=r"6 samples; data\.samples .* first 7"):
        train_voice(with_samples(cfg, 7), small_set, tmp_path / "seven", lines.append)
    with pytest.raises(VoiceConfigError, match=r"data\.samples must be >= 0"):
        with_samples(cfg, -1)


def test_the_voice_loads_into_the_model_and_is_measured(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the CLI, with a sine source: VOICE's weights load into a `VenusModel` built
    with its configs; the held-out measurement runs (word error rates with PocketSphinx,
    when installed; the f0 head's agreement); another recipe into the same VOICE is
    refused."""
    import tomli_w

    from venus.cli import main
    from venus.export.model.config import PRESETS
    from venus.export.model.venus import VenusModel
    from venus.train.data import TrainDataError
    from venus.train.speech_units import Codebook
    from venus.train.voice import load_voice, load_voice_weights

    recipe = tmp_path / "voice.toml"
    recipe.write_text(tomli_w.dumps(quick(2, utterances=1, source="sine").to_toml_dict()))
    out = tmp_path / "voice"
    args = ["train-voice", "--config", str(recipe), "--data", str(small_set), "--out", str(out)]
    assert main(args) == 0
    assert "held-out word error rate" in capsys.readouterr().out
    voice = load_voice(out)
    assert voice.step == 2 and voice.flow.d_model == 32 and voice.vocoder.channels == 16
    assert voice.vocoder.source == "sine"
    assert voice.codebook.size == 32
    assert np.array_equal(
        voice.codebook.centroids, Codebook.load(out / "units.safetensors").centroids
    )
    model = VenusModel(voice.model_config(PRESETS["tiny"]()))
    load_voice_weights(model, out)
    state = torch.load(out / "train" / "state.pt", weights_only=False)
    for name, tensor in model.flow_decoder.state_dict().items():
        assert torch.equal(tensor, state["flow"][name])
    for name, tensor in model.vocoder.state_dict().items():
        assert torch.equal(tensor, state["vocoder"][name])
    metrics = json.loads((out / "train" / "metrics.json").read_text())["validation"]
    assert metrics["chain_mel_l1"] > 0 and metrics["vocoder_rtf"] > 0
    assert 0 <= metrics["voicing_agreement"] <= 1  # the sine source's f0 head, measured
    try:
        import jiwer  # noqa: F401
        import pocketsphinx  # noqa: F401
    except ImportError:
        assert metrics["wer_chain"] is None
    else:
        assert all(metrics[k] >= 0 for k in ("wer_original", "wer_vocoder", "wer_chain"))
    wrong = VenusModel(PRESETS["tiny"]())  # the preset's sizes: the voice does not fit
    with pytest.raises(TrainDataError, match="does not fit the model"):
        load_voice_weights(wrong, out)
    recipe.write_text(tomli_w.dumps(quick(3, utterances=1).to_toml_dict()))
    assert main(args) == 1
    assert "another recipe or data" in capsys.readouterr().err


def test_a_griffin_lim_voice_trains_its_flow_alone_and_ships_the_mel_statistics(
    small_set: Path, tmp_path: Path
) -> None:
    """kind = "griffin_lim": the steps train the flow decoder only (no vocoder losses, no
    vocoder optimiser); the vocoder's tensors are the codebook's per-bin mean and std; it
    loads into a model built with the voice's configs, and the chain is measured."""
    from venus.export.model.config import PRESETS
    from venus.export.model.griffin_lim import GriffinLimVocoder
    from venus.export.model.venus import VenusModel
    from venus.train.voice import load_voice, load_voice_weights
    from venus.train.voice_run import train_voice

    cfg = quick(3, utterances=1, kind="griffin_lim")
    assert cfg.steps == 3 and cfg.vocoder_steps == 0
    result = train_voice(cfg, small_set, tmp_path / "voice", lambda _line: None)
    assert result.steps == 3
    rows = [json.loads(h) for h in
            (tmp_path / "voice" / "train" / "history.jsonl").read_text().splitlines()]  # fmt: skip
    assert [r["step"] for r in rows if "flow_loss" in r] == [1, 2, 3]
    assert not any("vocoder_loss" in r for r in rows)
    state = torch.load(tmp_path / "voice" / "train" / "state.pt", weights_only=False)
    assert "opt_v" not in state and set(state["vocoder"]) == {"mean", "std"}
    voice = load_voice(tmp_path / "voice")
    assert voice.vocoder.kind == "griffin_lim"
    model = VenusModel(voice.model_config(PRESETS["tiny"]()))
    load_voice_weights(model, tmp_path / "voice")
    assert isinstance(model.vocoder, GriffinLimVocoder)
    assert np.allclose(model.vocoder.mean.numpy(), voice.codebook.stats.mean)
    assert np.allclose(model.vocoder.std.numpy(), voice.codebook.stats.std)
    assert not np.allclose(model.vocoder.std.numpy(), 1.0)  # not the untouched defaults
    assert not np.allclose(model.vocoder.mean.numpy(), 0.0)
    metrics = json.loads((tmp_path / "voice" / "train" / "metrics.json").read_text())
    assert metrics["validation"]["chain_mel_l1"] > 0


def test_the_codebook_s_identity_is_its_content_not_its_bytes(tmp_path: Path) -> None:
    """The safetensors writer orders a file's metadata at random: the same codebook saved
    by two processes may differ by a byte. ``units_sha`` (what a run records of its voice)
    reads the content; ``units_file_sha`` (what runs recorded before) the bytes."""
    from venus.train.speech_units import Codebook, MelStats
    from venus.train.voice import UNITS_FILE, save_units
    from venus.train.voice_id import units_file_sha, units_sha

    rng = np.random.default_rng(0)
    stats = MelStats(np.zeros(80, np.float32), np.ones(80, np.float32))
    book = Codebook(stats, rng.standard_normal((4, 160)).astype(np.float32))
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    save_units(a, book)
    raw = (a / UNITS_FILE).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__")
    flipped = json.dumps({"__metadata__": dict(reversed(meta.items())), **header},
                         separators=(",", ":")).encode()  # fmt: skip
    flipped += b" " * (n - len(flipped))  # the writer pads the header to 8 bytes
    (b / UNITS_FILE).write_bytes(raw[:8] + flipped + raw[8 + n :])
    assert Codebook.load(b / UNITS_FILE).centroids.tobytes() == book.centroids.tobytes()
    assert units_file_sha(a) != units_file_sha(b)
    assert units_sha(a) == units_sha(b)
    save_units(c, Codebook(stats, book.centroids[::-1].copy()))  # another codebook
    assert units_sha(c) != units_sha(a)
