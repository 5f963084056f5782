"""`venus train` on a small generated set: the recipe's errors, a resumed run equal to an
uninterrupted one, the checkpoint `venus export` reads, and (slow) a shortened recipe that
learns: the loss falls and the control accuracy rises above chance."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support.layouts import byte_builder
from support.states import assert_same_states

from venus.train.config import TrainConfig, TrainConfigError, parse_train_config


@pytest.mark.parametrize(
    "data, match",
    [
        ({"train": {"stepz": 3}}, r"unknown key train\.stepz"),
        ({"optimizer": {}}, r"unknown section \[optimizer\]"),
        ({"train": {"steps": "many"}}, r"train\.steps must be a int"),
        ({"train": {"steps": 0}}, r"train\.steps must be at least 1"),
        ({"model": {"preset": "venus-9b"}}, r"model\.preset must be one of tiny, tiny-audio"),
        ({"data": {"validation": 1.0}}, r"data\.validation must be in \[0, 1\)"),
        ({"model": {"steps": 3}}, r"unknown key model\.steps"),
        ({"train": {"speech_sampling": 1.5}}, r"train\.speech_sampling must be in \[0, 1\]"),
        ({"train": {"mel_warp": 0.5}}, r"train\.mel_warp must be in \[0, 0\.5\)"),
        ({"train": {"mel_freq_masks": 1.0}}, r"train\.mel_freq_masks must be a int"),
        ({"train": {"listen_only": True}}, r"train\.listen_only .*set train\.ctc_weight > 0"),
        ({"train": {"event_weight": 0}}, r"train\.event_weight must be positive"),
        ({"train": {"after_weight": -1}}, r"train\.after_weight must be positive"),
        ({"train": {"addressee_weight": -0.5}}, r"train\.addressee_weight must be >= 0"),
        ({"train": {"keep": "best"}}, r"train\.keep must be one of last, balanced_events"),
        (
            {"train": {"keep": "balanced_events", "listen_only": True, "ctc_weight": 1.0}},
            r"train\.keep = balanced_events: a listen_only run decides no overlap events",
        ),
    ],
)
def test_bad_recipes_name_the_key(data: dict[str, object], match: str) -> None:
    with pytest.raises(TrainConfigError, match=match):
        parse_train_config(data, "recipe.toml")


def test_a_recipe_reads_back_what_it_wrote() -> None:
    cfg = parse_train_config({"train": {"steps": 5, "learning_rate": 1}, "model": {"seed": 3}})
    assert cfg.learning_rate == 1.0 and cfg.steps == 5 and cfg.seed == 3
    assert parse_train_config(cfg.to_toml_dict()) == cfg


def quick(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=2, warmup_steps=1, checkpoint_every=2,
                       validation=0.34, threads=1)  # fmt: skip


def test_a_stopped_run_resumes_to_the_same_weights(small_set: Path, tmp_path: Path) -> None:
    from venus.train.loop import train

    lines: list[str] = []
    cfg = dataclasses.replace(quick(4), mel_warp=0.1, mel_gain_db=6.0, mel_freq_masks=2)
    whole = train(cfg, small_set, tmp_path / "whole", lines.append)
    assert whole.steps == 4 and whole.resumed_from == 0
    assert "heard_cer" not in whole.metrics  # no listening head without train.ctc_weight
    assert 0 <= whole.metrics["opening_accuracy"] <= 1
    assert 0 <= whole.metrics["reading_accuracy"] <= 1  # a result read out (layout.reading)
    first = train(cfg, small_set, tmp_path / "parts", lines.append, stop_after=3)
    assert first.steps == 3  # stopped between checkpoints: the state is step 2's
    metrics = json.loads((tmp_path / "parts" / "train" / "metrics.json").read_text())
    assert metrics["step"] == 2 and (tmp_path / "parts" / "config.json").is_file()
    second = train(cfg, small_set, tmp_path / "parts", lines.append)
    assert second.resumed_from == 2 and second.steps == 4
    assert any("resuming" in line for line in lines)
    assert_same_states(tmp_path / "whole", tmp_path / "parts", ("model",))
    history = (tmp_path / "parts" / "train" / "history.jsonl").read_text().splitlines()
    assert [json.loads(h)["step"] for h in history if "loss" in json.loads(h)] == [1, 2, 3, 4]
    png = tmp_path / "parts" / "train" / "loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # where each start trained: the first, and the resume at step 2
    starts = (tmp_path / "parts" / "train" / "machines.jsonl").read_text().splitlines()
    machines = [json.loads(line) for line in starts]
    assert [m["step"] for m in machines] == [0, 2]
    assert all(m["cpu"] and m["torch"] == torch.__version__ and m["device"] == "cpu"
               for m in machines)  # fmt: skip
    # run again once finished: the last figures at once, no sample loaded, no step taken
    again: list[str] = []
    third = train(cfg, small_set, tmp_path / "parts", again.append)
    assert (third.steps, third.resumed_from, third.metrics) == (4, 4, second.metrics)
    assert third.baseline == second.baseline
    assert not any("loading samples" in line for line in again), again
    assert any("has run all 4 steps" in line for line in again)
    assert (tmp_path / "parts" / "train" / "machines.jsonl").read_text().splitlines() == starts


def test_another_recipe_into_the_same_out_is_refused(small_set: Path, tmp_path: Path) -> None:
    from venus.train.loop import train

    with torch.no_grad():  # a caller's grad mode (venus bench turns it off) is not ours
        train(quick(2), small_set, tmp_path / "ck", lambda _l: None)
    with pytest.raises(TrainConfigError, match="another recipe, data, voice, --init or --val-data"):
        train(quick(3), small_set, tmp_path / "ck", lambda _l: None)


@pytest.mark.slow  # trains, then exports: about 70 s
def test_the_checkpoint_exports_and_its_tokenizer_is_the_trained_one(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main
    from venus.engines.tokenizer import Tokenizer

    recipe = tmp_path / "recipe.toml"
    recipe.write_text("[train]\nsteps = 2\nbatch_size = 2\nwarmup_steps = 1\n"
                      "checkpoint_every = 1\nthreads = 1\n[data]\nvalidation = 0.34\n")  # fmt: skip
    ck = tmp_path / "ck"
    assert main(["train", "--config", str(recipe), "--data", str(small_set), "--out", str(ck)]) == 0
    assert "control accuracy" in capsys.readouterr().out
    assert main(["export", str(ck), "--out", str(tmp_path / "engines")]) == 0
    tok = Tokenizer.open(tmp_path / "engines" / "tokenizer.json", text_vocab=512)
    ids = tok.encode("the weather tomorrow")
    assert len(ids) < len("the weather tomorrow")  # merges: fewer tokens than bytes
    assert tok.decode(ids) == "the weather tomorrow"
    assert main(["train", "--data", str(tmp_path / "nothing"), "--out", str(ck)]) == 1
    assert "no index.jsonl" in capsys.readouterr().err


def test_the_shipped_recipe_and_its_sets_load_and_keep_the_voices_apart() -> None:
    """scripts/make-venus-tiny's inputs: the held-out set's voices are not the training's."""
    from venus.datagen.config import load_config
    from venus.train.config import load_train_config

    recipes = Path(__file__).resolve().parents[2] / "train" / "recipes"
    recipe = load_train_config(recipes / "venus-tiny.toml")
    assert recipe.preset == "tiny" and recipe.steps >= 1000
    gpu = load_train_config(recipes / "venus-small-gpu.toml")  # DEVICE=cuda's
    assert gpu.preset == "small" and gpu.batch_size > recipe.batch_size
    cpu = load_train_config(recipes / "venus-small-cpu.toml")  # the same, a session at a time
    assert dataclasses.replace(cpu, checkpoint_every=gpu.checkpoint_every) == gpu
    assert cpu.checkpoint_every < gpu.checkpoint_every
    heldout = load_config(recipes / "heldout-set.toml")
    assert heldout.speech.formant == (1.0, 1.0)  # the held-out voices are the engines' own
    # venus-tiny's training set, and the tenth to twelfth rounds' (make-venus-tiny TRAIN_SET=)
    for name in (
        "train-set.toml",
        "train-set-38-voices.toml",
        "train-set-formants.toml",
        "train-set-formants-15.toml",
    ):
        train_set = load_config(recipes / name)
        assert train_set.samples > heldout.samples, name
        # make-venus-tiny cuts its validation set by turning this line on (sed)
        assert not train_set.output.full_duplex_bench, name
        lines = (recipes / name).read_text("utf-8").splitlines()
        assert "full_duplex_bench = false" in lines, name
        for engine in ("espeak_voices", "flite_voices"):
            ours, theirs = getattr(train_set.speech, engine), getattr(heldout.speech, engine)
            assert ours and theirs and not set(ours) & set(theirs), name
        # nor does a training voice have a held-out voice's espeak-ng variant (the variant
        # is the voice's timbre; the language only its accent)
        held = {v.partition("+")[2] for v in heldout.speech.espeak_voices} - {""}
        shared = [v for v in train_set.speech.espeak_voices if v.partition("+")[2] in held]
        assert held and not shared, f"{name}: voices with a held-out variant: {shared}"
        # the assistant speaks alike in both (its voice at the middle of each set's ranges)
        assert train_set.speech.assistant_voice == heldout.speech.assistant_voice, name
        for key in ("rate_wpm", "pitch"):
            ours, theirs = getattr(train_set.speech, key), getattr(heldout.speech, key)
            assert sum(ours) // 2 == sum(theirs) // 2, f"{name}: {key}"
    # the call's tool weighted (the thirteenth round's finding), and the listening stage it
    # starts from: the same preset, seed and split, so that its validation turns are held out
    assert recipe.call_weight > 1 and not recipe.listen_only
    listen = load_train_config(recipes / "venus-tiny-listen.toml")
    assert listen.listen_only and (listen.preset, listen.seed, listen.validation) == (
        recipe.preset, recipe.seed, recipe.validation)  # fmt: skip
    # the thirty-sixth round's: the same stage twice as long, and nothing else changed
    listen_long = load_train_config(recipes / "venus-tiny-listen-long.toml")
    assert listen_long.steps == 2 * listen.steps
    assert dataclasses.replace(listen_long, steps=listen.steps) == listen
    # the sixteenth round's variant: venus-tiny's recipe with the overlap events weighted
    events = load_train_config(recipes / "venus-tiny-events.toml")
    assert recipe.event_weight == 1.0 < events.event_weight
    assert dataclasses.replace(events, event_weight=1.0) == recipe
    # the seventeenth round's: the carrying on just after a hold weighted
    after = load_train_config(recipes / "venus-tiny-after.toml")
    assert recipe.after_weight == 1.0 < after.after_weight
    assert dataclasses.replace(after, after_weight=1.0) == recipe
    # the eighteenth round's: the addressee loss beside the decisions
    addressee = load_train_config(recipes / "venus-tiny-addressee.toml")
    assert recipe.addressee_weight == 0.0 < addressee.addressee_weight
    assert dataclasses.replace(addressee, addressee_weight=0.0) == recipe
    # the nineteenth round's: the same recipe on a wider backbone (tiny's ears)
    wide = load_train_config(recipes / "venus-tiny-wide.toml")
    assert (recipe.preset, wide.preset) == ("tiny", "tiny-wide")
    assert dataclasses.replace(wide, preset="tiny") == recipe
    # the twenty-second round's: longer, the step best on a validation set of its own
    long = load_train_config(recipes / "venus-tiny-wide-long.toml")
    assert long.steps > wide.steps and (wide.keep, long.keep) == ("last", "balanced_events")
    assert dataclasses.replace(long, steps=wide.steps, keep="last") == wide
    # scripts/gpu-round's: the same at four times the batch, for fewer steps
    gpu_wide = load_train_config(recipes / "venus-tiny-wide-gpu.toml")
    assert gpu_wide.batch_size == 4 * long.batch_size and gpu_wide.steps < long.steps
    assert dataclasses.replace(gpu_wide, batch_size=long.batch_size, steps=long.steps) == long


def _chunk(decision: str, delegate: int = 0, results: int = 0) -> dict[str, Any]:
    return {"decision": decision, "text": "hi" if decision != "listen" else "",
            "delegate": ['{"name": "x"}'] * delegate, "results": ["done"] * results}  # fmt: skip


def test_crops_start_where_no_reply_or_call_is_cut() -> None:
    from venus.train.data import crop_starts

    chunks = [_chunk("listen"), _chunk("listen"), _chunk("speak"), _chunk("turn_eos"),
              _chunk("listen"), _chunk("speak", delegate=1), _chunk("turn_eos"),
              _chunk("listen"), _chunk("listen", results=1), _chunk("speak"),
              _chunk("turn_eos"), _chunk("listen"), _chunk("listen"), _chunk("listen")]  # fmt: skip
    calls = [{"call_chunk": 5, "result_chunk": 8, "cancel_chunk": None}]
    # 3, 4, 6, 7, 10, 11: the chunk before speaks (a reply would be cut in two);
    # 6-8: chunk 8's result answers chunk 5's call; 5 keeps the call with its result;
    # past 10, fewer than 4 chunks are left.
    assert crop_starts(chunks, calls) == [1, 2, 5, 9]
    assert crop_starts(chunks, calls, min_chunks=2) == [1, 2, 5, 9, 12]
    # A cancel refers to its call too, even when the call never gets a result.
    cancelled = [{"call_chunk": 1, "result_chunk": None, "cancel_chunk": 9}]
    assert crop_starts(chunks, cancelled) == [1]
    assert crop_starts(chunks) == [1, 2, 5, 8, 9]


def test_a_crop_never_opens_on_a_reply_to_words_it_cut_off() -> None:
    """With the turns, a crop starts before the words the next reply answers: not at the
    reply itself, not in the gap between question and reply, not inside a user's turn."""
    from venus.train.data import crop_starts

    chunks = [_chunk("listen"), _chunk("listen"), _chunk("listen"), _chunk("speak"),
              _chunk("turn_eos"), _chunk("listen"), _chunk("listen"), _chunk("listen"),
              _chunk("speak"), _chunk("turn_eos"), _chunk("listen"), _chunk("listen"),
              _chunk("listen"), _chunk("listen")]  # fmt: skip
    turns = [
        {"speaker": "user", "role": "question", "start_s": 0.5, "end_s": 2.4},
        {"speaker": "assistant", "role": "answer", "start_s": 4.0, "end_s": 6.0},
        {"speaker": "user", "role": "backchannel", "start_s": 4.2, "end_s": 4.6},
        {"speaker": "background", "role": "tv_line", "start_s": 5.5, "end_s": 7.5},
        {"speaker": "user", "role": "question", "start_s": 6.2, "end_s": 7.6},
        {"speaker": "assistant", "role": "answer", "start_s": 9.0, "end_s": 11.0},
    ]
    # without the turns, every chunk after a listening one (and 4 left)
    assert crop_starts(chunks) == [1, 2, 3, 6, 7, 8]
    # 1, 2: inside or after the first question, before its answer (chunk 3); 3: the answer
    # itself; 7: inside the second question; 8: its answer. 6: before the second question
    # (the television across the cut is not the user's)
    assert crop_starts(chunks, turns=turns) == [6]
    # an aside is not what a reply answers: a crop that cut off the question and hears
    # only the aside before the answer is no start; were the aside a question, it is one
    chunks = [_chunk("listen")] * 4 + [_chunk("speak"), _chunk("turn_eos")] + [_chunk("listen")] * 4
    turns = [
        {"speaker": "user", "role": "question", "start_s": 0.5, "end_s": 1.8},
        {"speaker": "user", "role": "aside", "start_s": 2.2, "end_s": 2.8},
        {"speaker": "assistant", "role": "answer", "start_s": 5.0, "end_s": 6.0},
    ]
    assert crop_starts(chunks) == [1, 2, 3, 4]
    assert crop_starts(chunks, turns=turns) == []
    asked = [dict(t, role="question") if t["role"] == "aside" else t for t in turns]
    assert crop_starts(chunks, turns=asked) == [2]


def test_a_cropped_example_is_the_sample_started_there(small_set: Path, tmp_path: Path) -> None:
    """A crop equals a sample whose audio and trajectory begin at the crop: the same
    layout, the same log-mel but for the first two frames (the front end's carry of 240
    samples reaches 80 into the second; equal there too where the cut falls in a pause)."""
    import shutil
    import wave

    from venus.train.data import cropped, load_examples, read_index, trajectory

    build = byte_builder()
    records = read_index(small_set)
    examples = load_examples(small_set, records, build, image_size=32)
    example = max(examples, key=lambda e: len(e.crops))
    assert example.crops and example.frames is not None
    start = example.crops[-1]
    crop = cropped(example, start, build)
    assert crop.start == start and crop.frame_index == example.frame_index[start:]

    # The same sample cut on disk at the crop, without its video.
    t = trajectory(small_set, example.sample_id)
    cut = tmp_path / "cut"
    folder = cut / "samples" / example.sample_id
    folder.mkdir(parents=True)
    with wave.open(str(small_set / "samples" / example.sample_id / t["files"]["input"])) as w:
        params, rate = w.getparams(), w.getframerate()
        w.readframes(round(start * t["chunk_s"] * rate))
        rest = w.readframes(w.getnframes())
    with wave.open(str(folder / t["files"]["input"]), "wb") as w:
        w.setparams(params)
        w.writeframes(rest)
    t["chunks"] = t["chunks"][start:]
    t["files"]["video"] = None
    (folder / "trajectory.json").write_text(json.dumps(t))
    shutil.copy(small_set / "index.jsonl", cut / "index.jsonl")
    [direct] = load_examples(cut, [r for r in records if r["sample_id"] == example.sample_id],
                             build, image_size=0)  # fmt: skip
    audio_only = cropped(dataclasses.replace(example, frame_index=(-1,) * len(example.chunks)),
                         start, build)  # fmt: skip
    assert audio_only.layout.ids == direct.layout.ids
    assert audio_only.layout.labels == direct.layout.labels
    assert audio_only.layout.slot == direct.layout.slot

    def targets(e: Any) -> list[int]:
        return [label for label in e.layout.labels if label >= 0]

    assert targets(crop) == targets(direct)  # the frames move the targets, change none
    assert audio_only.mel.shape == direct.mel.shape
    np.testing.assert_allclose(audio_only.mel[:, 2:], direct.mel[:, 2:], atol=1e-4)


def test_batches_crop_the_configured_share(small_set: Path) -> None:
    from venus.train.data import load_examples, read_index
    from venus.train.loop import _batch, _Run

    build = byte_builder()
    examples = load_examples(small_set, read_index(small_set), build, image_size=0)
    run = _Run(Path("."), "", None, None, None, examples, [], [], build)  # type: ignore[arg-type]
    for share, low, high in ((0.0, 0, 0), (1.0, 1, 1), (0.5, 0.2, 0.8)):
        cfg = TrainConfig(batch_size=6, crop=share)
        starts = [e.start for step in range(20) for e in _batch(run, step, cfg)]
        eligible = [s for step in range(20) for s in [0] * 6]
        cut = sum(s > 0 for s in starts) / len(eligible)
        with_crops = sum(bool(e.crops) for e in examples) / len(examples)
        assert low * with_crops - 1e-9 <= cut <= high * with_crops + 1e-9, (share, cut)
    cfg = TrainConfig(batch_size=6, crop=0.5)
    assert [e.start for e in _batch(run, 3, cfg)] == [e.start for e in _batch(run, 3, cfg)]


@pytest.mark.slow  # trains a voice, then exports: about 70 s
def test_with_a_voice_the_speech_decoder_learns_and_the_engines_speak_its_units(
    small_set: Path, tmp_path: Path
) -> None:
    """`venus train --voice`: the speech decoder is trained on the voice's units (its
    loss in the history, its weights moved), the voice's flow decoder and vocoder (with
    their own sizes) go into the checkpoint, and the exported engines decode speech."""
    from venus.cli import main
    from venus.export.checkpoint import load_model
    from venus.train.loop import train
    from venus.train.voice_config import parse_voice_config
    from venus.train.voice_run import train_voice

    voice_cfg = parse_voice_config({
        "data": {"validation": 0.34},
        "units": {"k": 32, "iterations": 5},
        "flow": {"steps": 1, "batch": 2, "warmup_steps": 1, "window_s": 2.0,
                 "d_model": 32, "ffn_dim": 64},
        "vocoder": {"steps": 1, "batch": 2, "warmup_steps": 1, "segment_s": 0.4,
                    "channels": 16, "kernels": [3], "dilations": [1, 3]},
        "train": {"checkpoint_every": 1, "threads": 1},
        "eval": {"utterances": 0},
    })  # fmt: skip
    voice = tmp_path / "voice"
    train_voice(voice_cfg, small_set, voice, lambda _l: None)
    lines: list[str] = []
    ck = tmp_path / "ck"
    sampled = dataclasses.replace(quick(3), speech_sampling=0.5)  # scheduled sampling on the way
    train(sampled, small_set, ck, lines.append, voice=voice)
    assert any("speech accuracy" in line and "closed loop" in line for line in lines)
    history = [json.loads(h) for h in (ck / "train" / "history.jsonl").read_text().splitlines()]
    assert all("speech_loss" in h for h in history if "loss" in h)
    last = history[-1]["validation"]
    assert 0 <= last["speech_closed_accuracy"] <= 1 and "speech_accuracy" in last
    from venus.train.check import validate  # on another set, with the voice's units

    figures = validate(ck, small_set, lines.append, voice=voice)
    assert figures["speech_tokens"] > last["speech_tokens"]  # every sample, not the split
    assert 0 <= figures["speech_closed_accuracy"] <= 1
    other = tmp_path / "other-voice"  # the same codebook, trained further: another voice
    shutil.copytree(voice, other)
    doc = json.loads((other / "voice.json").read_text())
    (other / "voice.json").write_text(json.dumps(doc | {"step": doc["step"] + 1}))
    with pytest.raises(TrainConfigError, match=r"other-voice: step \d+, .* was trained with step"):
        validate(ck, small_set, lines.append, voice=other)
    from venus.train.voice_id import units_file_sha  # what runs before 2026-12-05 recorded

    metrics = json.loads((ck / "train" / "metrics.json").read_text())
    metrics["voice"]["units"] = units_file_sha(voice)
    (ck / "train" / "metrics.json").write_text(json.dumps(metrics))
    validate(ck, small_set, lines.append, voice=voice)  # still this voice

    model = load_model(ck)
    assert model.cfg.vocoder.channels == 16 and model.cfg.flow.d_model == 32
    from safetensors.torch import load_file

    vocoder = load_file(str(voice / "vocoder.safetensors"))
    mine = model.vocoder.state_dict()
    assert all(torch.equal(mine[k], vocoder[k]) for k in vocoder)  # the voice's, unchanged
    state = torch.load(ck / "train" / "state.pt", weights_only=False)["model"]
    from venus.export.model.init import init_model
    from venus.export.model.venus import VenusModel

    initial = VenusModel(model.cfg)
    init_model(initial, 0)
    moved = [k for k in state if k.startswith("speech_decoder.")
             and not torch.equal(state[k], initial.state_dict()[k])]  # fmt: skip
    assert moved, "the speech decoder was not trained"

    with pytest.raises(TrainConfigError, match="another recipe, data, voice, --init or --val-data"):
        train(sampled, small_set, ck, lines.append)  # the same run without its voice
    doc = json.loads((voice / "voice.json").read_text())
    (voice / "voice.json").write_text(json.dumps({**doc, "step": doc["step"] + 1}))
    with pytest.raises(TrainConfigError, match="another recipe, data, voice, --init or --val-data"):
        train(sampled, small_set, ck, lines.append, voice=voice)  # the voice trained on
    (voice / "voice.json").write_text(json.dumps(doc))
    engines = tmp_path / "engines"
    assert main(["export", str(ck), "--out", str(engines)]) == 0
    trained = json.loads((engines / "manifest.json").read_text())["trained"]  # provenance
    assert trained["by"] == "venus train" and trained["step"] == trained["steps"] == 3
    assert trained["preset"] == "tiny"
    assert trained["validation"]["speech_closed_accuracy"] == pytest.approx(
        last["speech_closed_accuracy"], abs=1e-4
    )
    sample = next((small_set / "samples").iterdir())
    out = tmp_path / "run"
    assert main(["run", "--engines", str(engines), "--offline", str(sample / "input.wav"),
                 "--out", str(out)]) == 0  # fmt: skip
    assert (out / "output.wav").is_file()  # the voice's sizes run in the daemon


def test_the_speech_decoder_learns_the_speech_its_chunk_decided(small_set: Path) -> None:
    """A chunk's text is heard from the next boundary (docs/timeline.md): the speech
    codes a speaking chunk is taught are the next second's audio, so a reply's first
    chunk has speech to say and the chunk before it none."""
    from venus.train.data import read_index, trajectory
    from venus.train.speech_units import SILENCE, chunk_units, decided_units, fit_units

    records = read_index(small_set)
    _stats, book = fit_units(small_set, records, 16, iterations=3)
    checked = 0
    for r in records:
        t = trajectory(small_set, r["sample_id"])
        wav = small_set / "samples" / r["sample_id"] / t["files"]["assistant"]
        chunks = t["chunks"]
        decided = decided_units(wav, len(chunks), t["chunk_s"], book)
        timed = chunk_units(wav, len(chunks) + 1, t["chunk_s"], book)
        assert decided.shape == (len(chunks), 25)
        np.testing.assert_array_equal(decided, timed[1:])
        for k in range(1, len(chunks)):
            if chunks[k]["decision"] != "listen" and chunks[k - 1]["decision"] == "listen":
                if not chunks[k]["text"]:
                    continue
                assert (decided[k] != SILENCE).any(), (r["sample_id"], k)  # its words
                # still quiet (the last code's window reaches 12 ms into the next second)
                assert (timed[k][:-1] == SILENCE).all(), (r["sample_id"], k)
                checked += 1
    assert checked >= 2


def test_a_run_saved_before_a_key_existed_still_resumes() -> None:
    """Resuming compares recipes parsed: a key added since reads as its default."""
    import tomli_w

    from venus.train.runlog import same_recipe

    cfg = TrainConfig(steps=7)
    table = cfg.to_toml_dict()
    saved = tomli_w.dumps(table)
    del table["train"]["reply_weight"], table["train"]["ctc_weight"]  # an older run's recipe
    older = tomli_w.dumps(table)
    assert "reply_weight" not in older
    assert same_recipe(saved, parse_train_config, cfg)
    assert same_recipe(older, parse_train_config, cfg)
    assert not same_recipe(older, parse_train_config, TrainConfig(steps=8))
    assert not same_recipe("[train]\nstepz = 7\n", parse_train_config, cfg)
    assert not same_recipe("not = [toml", parse_train_config, cfg)


def test_scheduled_sampling_ramps_to_its_share_and_draws_the_same_on_a_resume() -> None:
    from venus.train.schedule import sampling_share, step_draws

    cfg = TrainConfig(steps=100, speech_sampling=0.4)
    assert [sampling_share(s, cfg) for s in (0, 25, 50, 99)] == [0.0, 0.2, 0.4, 0.4]
    assert (
        sampling_share(60, TrainConfig(steps=100)) == 0.0
        and step_draws(3, TrainConfig(), torch.device("cpu")) is None
    )
    where = torch.device("cpu")
    first, again, other = (torch.rand(8, generator=step_draws(s, cfg, where)) for s in (7, 7, 8))
    assert torch.equal(first, again) and not torch.equal(first, other)
