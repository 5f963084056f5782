"""A shortened recipe from scratch (slow): the loss falls, the control accuracy on held-out
samples rises above chance, and the exported engines decide in the daemon as the
teacher-forced model does (the training layout is the daemon's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from venus.train.config import TrainConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, TrainConfig]:
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run
    from venus.train.loop import train

    root = tmp_path_factory.mktemp("recipe")
    config = parse_config({
        "samples": 32, "duration": {"min_s": 10.0, "max_s": 16.0},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    })  # fmt: skip
    run(config, root / "set", seed=5)
    cfg = TrainConfig(steps=120, batch_size=4, warmup_steps=10, checkpoint_every=60,
                      validation=0.25, learning_rate=4e-3)  # fmt: skip
    train(cfg, root / "set", root / "ck", lambda _line: None)
    return root / "set", root / "ck", cfg


def test_the_loss_falls_and_control_accuracy_rises_above_chance(trained) -> None:
    _data, ck, _cfg = trained
    rows = [json.loads(line) for line in (ck / "train" / "history.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
    metrics = json.loads((ck / "train" / "metrics.json").read_text())
    final, before = metrics["validation"], metrics["baseline"]
    assert final["control_accuracy"] > final["control_chance"] + 0.05, final
    assert final["text_accuracy"] > before["text_accuracy"] + 0.1
    assert final["decision_loss"] < before["decision_loss"]


def test_the_daemon_decides_as_the_teacher_forced_model(trained, tmp_path: Path) -> None:
    """Run the exported engines offline on held-out samples. Up to the first chunk where
    either the data or the run speaks, the daemon's context is the training layout's;
    its decisions there must be the teacher-forced model's."""
    from venus.cli import main
    from venus.export.checkpoint import load_model
    from venus.train.batch import collate, embeddings
    from venus.train.data import layout_builder, load_examples, read_index, trajectory
    from venus.train.sets import split
    from venus.train.tokenizer import load_tokenizer

    data, ck, cfg = trained
    engines = tmp_path / "engines"
    assert main(["export", str(ck), "--out", str(engines)]) == 0
    model = load_model(ck)
    tok = load_tokenizer(ck / "tokenizer.json")
    mc = model.cfg
    special = mc.special_token_ids
    control = [special[t] for t in ("<|listen|>", "<|speak|>", "<|turn_eos|>")]
    _train, held = split(read_index(data), cfg.validation, cfg.seed)
    build = layout_builder(
        special, lambda t: tok.encode(t, add_special_tokens=False).ids,
        audio_tokens=mc.audio_tokens_per_chunk, vision_tokens=mc.vision.queries,
        max_text_tokens=cfg.max_text_tokens,
    )  # fmt: skip
    examples = load_examples(data, held, build, image_size=mc.vision.image_size)
    compared = speaking = 0
    for ex in examples:
        batch = collate([ex])
        with torch.no_grad():
            emb = embeddings(model, batch)
            n = emb.shape[1]
            empty = model.backbone.new_cache(1)
            logits, *_ = model.backbone(emb, batch.mask, torch.arange(n)[None],
                                        empty.keys, empty.values)  # fmt: skip
        at = torch.nonzero(batch.decision[0]).flatten()
        forced = ["listen" if i == 0 else "speak"
                  for i in logits[0, at][:, control].argmax(dim=1).tolist()]  # fmt: skip
        t = trajectory(data, ex.sample_id)
        folder = data / "samples" / ex.sample_id
        video = ["--video", str(folder / t["files"]["video"])] if t["files"]["video"] else []
        out = tmp_path / ex.sample_id
        assert main(["run", "--engines", str(engines), "--offline", str(folder / "input.wav"),
                     *video, "--out", str(out)]) == 0  # fmt: skip
        ran = [json.loads(line)["decision"] for line in (out / "timeline.jsonl").open()]
        ran = ["listen" if d == "listen" else "speak" for d in ran]
        targets = ["listen" if c["decision"] == "listen" else "speak" for c in t["chunks"]]
        for k, (target, decided) in enumerate(zip(targets, ran, strict=True)):
            assert decided == forced[k], (ex.sample_id, k, ran[: k + 1], forced[: k + 1])
            compared += 1
            if target != "listen" or decided != "listen":
                speaking += decided == "speak"
                break
    assert compared >= 2 * len(examples) and speaking >= 1
