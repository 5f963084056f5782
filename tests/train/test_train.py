"""`venus train` on a small generated set: the recipe's errors, a resumed run equal to an
uninterrupted one, the checkpoint `venus export` reads, and (slow) a shortened recipe that
learns: the loss falls and the control accuracy rises above chance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from venus.train.config import TrainConfig, TrainConfigError, parse_train_config


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    config = parse_config({
        "samples": 6, "duration": {"min_s": 8.0, "max_s": 12.0},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    })  # fmt: skip
    out = tmp_path_factory.mktemp("train") / "set"
    run(config, out, seed=2)
    return out


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
    whole = train(quick(4), small_set, tmp_path / "whole", lines.append)
    assert whole.steps == 4 and whole.resumed_from == 0
    first = train(quick(4), small_set, tmp_path / "parts", lines.append, stop_after=3)
    assert first.steps == 3  # stopped between checkpoints: the state is step 2's
    metrics = json.loads((tmp_path / "parts" / "train" / "metrics.json").read_text())
    assert metrics["step"] == 2 and (tmp_path / "parts" / "config.json").is_file()
    second = train(quick(4), small_set, tmp_path / "parts", lines.append)
    assert second.resumed_from == 2 and second.steps == 4
    assert any("resuming" in line for line in lines)
    a = torch.load(tmp_path / "whole" / "train" / "state.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "parts" / "train" / "state.pt", weights_only=False)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    history = (tmp_path / "parts" / "train" / "history.jsonl").read_text().splitlines()
    assert [json.loads(h)["step"] for h in history if "loss" in json.loads(h)] == [1, 2, 3, 4]
    png = tmp_path / "parts" / "train" / "loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_another_recipe_into_the_same_out_is_refused(small_set: Path, tmp_path: Path) -> None:
    from venus.train.loop import train

    with torch.no_grad():  # a caller's grad mode (venus bench turns it off) is not ours
        train(quick(2), small_set, tmp_path / "ck", lambda _l: None)
    with pytest.raises(TrainConfigError, match="another recipe or data"):
        train(quick(3), small_set, tmp_path / "ck", lambda _l: None)


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
    train_set = load_config(recipes / "train-set.toml")
    heldout = load_config(recipes / "heldout-set.toml")
    assert train_set.samples > heldout.samples
    for engine in ("espeak_voices", "flite_voices"):
        ours, theirs = getattr(train_set.speech, engine), getattr(heldout.speech, engine)
        assert ours and theirs and not set(ours) & set(theirs)
