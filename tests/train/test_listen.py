"""``train.listen_only`` (train/listen.py): the audio encoder and its listening head
trained alone on the user's turns, then handed to the full recipe by ``--init``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.states import assert_same_states

from venus.train.config import TrainConfig, TrainConfigError


def quick(steps: int, **kw: object) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=3, warmup_steps=1, checkpoint_every=2,
                       validation=0.34, threads=1, ctc_weight=1.0, **kw)  # type: ignore[arg-type]  # fmt: skip


def heard(steps: int) -> TrainConfig:
    """A listen-only recipe with the log-mel augmentation (a resume must draw the same)."""
    return quick(steps, listen_only=True, mel_warp=0.1, mel_freq_masks=1)


def test_a_turns_segment_gives_the_frames_the_whole_sample_gives_over_the_turn() -> None:
    from venus.export.model.config import PRESETS
    from venus.export.model.init import init_model
    from venus.export.model.venus import VenusModel
    from venus.train.heard import Heard, turn_frames
    from venus.train.listen import segments

    model = VenusModel(PRESETS["tiny"]())
    init_model(model, 0)
    model.eval()
    left = model.audio_encoder.cfg.left_context_chunks
    mel = np.random.default_rng(0).standard_normal((80, 12 * 100)).astype(np.float32)
    early, late = Heard(0.4, 2.2, "hi", (9, 10)), Heard(6.3, 8.1, "ok", (16, 12))
    example = SimpleNamespace(sample_id="s", mel=mel, start=0, heard=(early, late))
    segs = segments([example], model)  # type: ignore[list-item]
    assert [s.heard.text for s in segs] == ["hi", "ok"]
    assert segs[0].mel.shape[1] == 3 * 100  # from the start (no earlier chunk) to 2.5 s
    assert segs[1].mel.shape[1] == (9 - (6 - left)) * 100  # the window's chunks before it
    with torch.no_grad():
        whole = model.audio_encoder.encode_chunk_frames(torch.from_numpy(mel)[None])[1][0]
        per = model.audio_encoder.frames_per_chunk
        for seg, turn in zip(segs, (early, late), strict=True):
            lo, hi = turn_frames(turn, 12, per, 1.0)
            s_lo, s_hi = turn_frames(seg.heard, seg.chunks, per, 1.0)
            assert s_hi - s_lo == hi - lo
            mine = model.audio_encoder.encode_chunk_frames(torch.from_numpy(seg.mel)[None])[1][0]
            torch.testing.assert_close(mine[s_lo:s_hi], whole[lo:hi], rtol=1e-5, atol=1e-5)


def test_a_listen_only_run_trains_the_encoder_and_head_alone_and_resumes(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.export.checkpoint import load_model
    from venus.train.loop import train

    lines: list[str] = []
    whole = train(heard(4), small_set, tmp_path / "whole", lines.append)
    assert set(whole.metrics) == {"ctc_loss", "heard_cer", "heard_turns"}
    assert whole.metrics["heard_turns"] > 0
    assert whole.metrics["ctc_loss"] < whole.baseline["ctc_loss"]  # the head learns
    assert any("user speech CER" in line and "turns)" in line for line in lines)
    steps = [json.loads(h) for h in (tmp_path / "whole" / "train" / "history.jsonl").open()]
    steps = [s for s in steps if "loss" in s]
    assert len(steps) == 4 and all("ctc_loss" in s and "text_loss" not in s for s in steps)
    # Only the audio encoder moved: the backbone is a fresh run's initial one.
    cold = train(quick(1, listen_only=True, learning_rate=1e-12), small_set,
                 tmp_path / "cold", lambda _l: None)  # fmt: skip
    assert cold.steps == 1
    mine, fresh = load_model(tmp_path / "whole"), load_model(tmp_path / "cold")
    for name in ("backbone", "vision_encoder", "speech_decoder"):
        a, b = getattr(mine, name).state_dict(), getattr(fresh, name).state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), name
    a, b = mine.audio_encoder.state_dict(), fresh.audio_encoder.state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)
    # ... and only it and the head are the optimiser's (CTC alone would leave others still).
    state = torch.load(tmp_path / "whole" / "train" / "state.pt", weights_only=False)
    optimised = sum(len(g["params"]) for g in state["optim"]["param_groups"])
    assert optimised == len(list(mine.audio_encoder.parameters())) + 2  # the head's weight, bias
    train(heard(4), small_set, tmp_path / "parts", lambda _l: None,
          stop_after=3)  # fmt: skip
    train(heard(4), small_set, tmp_path / "parts", lambda _l: None)
    assert_same_states(tmp_path / "whole", tmp_path / "parts", ("model", "listen"))


def test_the_full_recipe_starts_from_the_listen_only_encoder_and_head(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.export.checkpoint import load_model
    from venus.train.loop import train
    from venus.train.warm import take_listen_head

    said: list[str] = []
    train(quick(4, listen_only=True), small_set, tmp_path / "listen", lambda _l: None)
    # A step at a vanishing learning rate: what the run started from is what it saved.
    train(quick(1, learning_rate=1e-12), small_set, tmp_path / "full", said.append,
          init=tmp_path / "listen")  # fmt: skip
    assert any(line.startswith("train: the listening head from ") for line in said)
    heard = load_model(tmp_path / "listen").audio_encoder.state_dict()
    full = load_model(tmp_path / "full").audio_encoder.state_dict()
    for k in heard:
        torch.testing.assert_close(full[k], heard[k], rtol=0, atol=1e-6)
    was = torch.load(tmp_path / "listen" / "train" / "state.pt", weights_only=False)["listen"]
    now = torch.load(tmp_path / "full" / "train" / "state.pt", weights_only=False)["listen"]
    for k in was:
        torch.testing.assert_close(now[k], was[k], rtol=0, atol=1e-6)
    # The engines' manifest says what the run started from: the listen-only recipe.
    from venus.export.onnx.manifest import training_record
    from venus.train.config import parse_train_config

    record = training_record(tmp_path / "full")
    assert record is not None and record["init"]["step"] == 4
    assert parse_train_config(record["init"]["recipe"]) == quick(4, listen_only=True)
    assert parse_train_config(record["recipe"]) == quick(1, learning_rate=1e-12)
    assert training_record(tmp_path / "listen")["init"] is None  # type: ignore[index]
    # A checkpoint without its run state starts a fresh head; a damaged state is named.
    from venus.train.heard import ListenHead

    head = ListenHead(64)
    assert not take_listen_head(tmp_path, head)
    (tmp_path / "listen" / "train" / "state.pt").write_bytes(b"not a state")
    with pytest.raises(TrainConfigError, match=r"--init .*listen: .*state\.pt cannot be read"):
        take_listen_head(tmp_path / "listen", head)


def test_venus_train_says_a_listen_only_runs_figures_and_again_on_a_finished_run(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main

    recipe = tmp_path / "listen.toml"
    recipe.write_text(
        "[data]\nvalidation = 0.34\n[train]\nsteps = 2\nbatch_size = 3\nwarmup_steps = 1\n"
        "checkpoint_every = 2\nthreads = 1\nctc_weight = 1.0\nlisten_only = true\n"
    )
    args = ["train", "--config", str(recipe), "--data", str(small_set), "--out",
            str(tmp_path / "ck"), "--device", "cpu"]  # fmt: skip
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "2 steps; validation user speech CER" in said and "control" not in said
    cer = json.loads((tmp_path / "ck" / "train" / "metrics.json").read_text())["validation"]
    assert f"CER {100 * cer['heard_cer']:.1f}%" in said
    assert main(args) == 0  # resumed at its end: the last figures, not the first
    assert capsys.readouterr().out == said


def test_listen_only_augments_each_turn_with_the_steps_draws() -> None:
    from venus.export.model.config import PRESETS
    from venus.export.model.init import init_model
    from venus.export.model.venus import VenusModel
    from venus.train.augment import MelAugment
    from venus.train.heard import Heard, ListenHead
    from venus.train.listen import listen_losses, segments

    model = VenusModel(PRESETS["tiny"]())
    init_model(model, 0)
    head = ListenHead(model.cfg.audio.d_model)
    mel = np.random.default_rng(1).standard_normal((80, 8 * 100)).astype(np.float32)
    turns = (Heard(0.4, 2.2, "hi", (9, 10)), Heard(4.3, 6.1, "ok", (16, 12)))
    example = SimpleNamespace(sample_id="s", mel=mel, start=0, heard=turns)
    segs = segments([example], model)  # type: ignore[list-item]
    augment = MelAugment(warp=0.1, gain_db=6.0, freq_masks=2)

    def loss(augment: MelAugment, seed: int) -> float:
        draws = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            return float(listen_losses(model, head, segs, augment, draws).total)

    plain = loss(MelAugment(), 0)
    assert loss(augment, 0) == loss(augment, 0)  # the step's draws, again on a resume
    assert loss(augment, 0) != plain and loss(augment, 1) != loss(augment, 0)


def test_a_listening_stage_gives_its_encoder_to_a_wider_backbone_and_tiny_the_same(
    small_set: Path, tmp_path: Path
) -> None:
    """From a listening stage only the audio encoder below its projector is taken (what the
    listening loss reaches): tiny-wide (small's backbone, a wider projector) starts from
    tiny's stage, and tiny starts from every weight the stage saved, as when
    all were copied (the shipped recipe's start is unchanged)."""
    from venus.export.checkpoint import load_model
    from venus.export.model.config import PRESETS
    from venus.export.model.init import init_model
    from venus.export.model.venus import VenusModel
    from venus.train.loop import TRAINED, train
    from venus.train.warm import listened_only, warm_start

    train(quick(2, listen_only=True), small_set, tmp_path / "listen", lambda _l: None)
    train(quick(2), small_set, tmp_path / "whole", lambda _l: None)
    assert listened_only(tmp_path / "listen") and not listened_only(tmp_path / "whole")
    stage = load_model(tmp_path / "listen").state_dict()

    wide = VenusModel(PRESETS["tiny-wide"]())
    init_model(wide, 0)
    fresh = {k: v.clone() for k, v in wide.state_dict().items()}
    warm_start(wide, tmp_path / "listen", TRAINED)
    for k, v in wide.state_dict().items():
        heard = k.startswith("audio_encoder.") and not k.startswith("audio_encoder.projector.")
        want = stage[k] if heard else fresh[k]
        assert torch.equal(v, want), k
    assert (
        wide.backbone.cfg.hidden_size
        == 96
        != load_model(tmp_path / "listen").cfg.backbone.hidden_size
    )

    tiny = VenusModel(PRESETS["tiny"]())
    init_model(tiny, 0)
    warm_start(tiny, tmp_path / "listen", TRAINED)
    mine = tiny.state_dict()
    assert all(torch.equal(mine[k], stage[k]) for k in mine)
    # A whole run's checkpoint still gives every trained component; its backbone does not
    # fit tiny-wide's (nor its projector), and that is an error naming it.
    with pytest.raises(TrainConfigError, match=r"--init .*whole: \S+ is \(.*\) there and"):
        warm_start(VenusModel(PRESETS["tiny-wide"]()), tmp_path / "whole", TRAINED)
