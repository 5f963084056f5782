"""`train.keep`: the checkpoint holds the validated step a run kept (train/keep.py), and
the balanced event accuracy that chooses it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from venus.train.config import TrainConfig


def test_balanced_events_weigh_the_holds_and_the_rest_apiece() -> None:
    from venus.train.validation import balanced_events

    sums = {"e": 4.0, "e_right": 3.0, "h": 3.0, "h_right": 3.0}  # every hold, no yield
    assert balanced_events(sums) == 0.5  # the plain event accuracy would say 0.75
    assert balanced_events(sums | {"e_right": 1.0, "h_right": 0.0}) == 0.5
    assert balanced_events(sums | {"e": 3.0}) == 1.0  # no yields: the plain accuracy
    assert balanced_events({"e": 0.0, "e_right": 0.0, "h": 0.0, "h_right": 0.0}) == 0.0


def test_keep_balanced_events_keeps_the_best_validation(tmp_path: Path) -> None:
    """train.keep = "balanced_events": the checkpoint is the validation step that scored
    best (the earliest of equals), its weights that step's, while state.pt goes on."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run
    from venus.train.loop import train
    from venus.train.validation import validation_line

    mix = dict.fromkeys(("offline_understanding", "proactive_duplex", "delegation"), 0.0)
    data = tmp_path / "set"  # 16 proactive-duplex samples: holds and yields held out
    run(parse_config({
        "samples": 16, "duration": {"min_s": 20.0, "max_s": 25.0},
        "mix": {"category": mix | {"proactive_duplex": 1.0}},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    }), data, seed=2)  # fmt: skip
    lines: list[str] = []
    cfg = TrainConfig(steps=8, batch_size=2, warmup_steps=1, checkpoint_every=1,
                      learning_rate=0.02, validation=0.5, threads=1)  # fmt: skip
    best = train(dataclasses.replace(cfg, keep="balanced_events"), data,
                 tmp_path / "best", lines.append)  # fmt: skip
    scored = [json.loads(h) for h in (tmp_path / "best" / "train" / "history.jsonl").open()]
    scores = {r["step"]: r["validation"]["balanced_event_accuracy"]
              for r in scored if "validation" in r and r["step"] > 0}  # fmt: skip
    first = scored[0]["validation"]
    assert len(scores) == 8 and first["events"] > first["holds"] > 0
    assert len(set(scores.values())) > 1, scores  # a choice to make
    want = max(scores, key=lambda s: (scores[s], -s))
    metrics = json.loads((tmp_path / "best" / "train" / "metrics.json").read_text())
    assert metrics["step"] == want == best.kept and metrics["kept_by"] == "balanced_events"
    assert best.metrics["balanced_event_accuracy"] == scores[want] and best.steps == 8
    assert ("stays step" in "\n".join(lines)) == (want < 8)
    assert "the rest" in validation_line(want, best.metrics)
    state = torch.load(tmp_path / "best" / "train" / "state.pt", weights_only=False)
    assert state["step"] == 8 and state["kept"]["step"] == want  # resumes from the last
    # the same recipe kept to the last, stopped at that step: the same weights
    train(cfg, data, tmp_path / "last", lines.append, stop_after=want)
    from safetensors.torch import load_file

    for part in ("backbone", "audio_encoder"):
        a = load_file(tmp_path / "best" / f"{part}-00001.safetensors")
        b = load_file(tmp_path / "last" / f"{part}-00001.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part
    # the run's last step beside the kept one: OUT/last, exportable, with its own metrics
    last = tmp_path / "best" / "last"
    if want == 8:
        assert not last.exists()
        return
    from venus.export.checkpoint import load_model

    doc = json.loads((last / "train" / "metrics.json").read_text())
    assert doc["step"] == 8 and doc["beside"] == want and "kept_by" not in doc
    assert doc["validation"]["balanced_event_accuracy"] == scores[8]
    assert "wrote the last step as" in "\n".join(lines)
    weights = load_model(last).state_dict()
    assert all(torch.equal(weights[k], v) for k, v in state["model"].items())
    assert not all(torch.equal(weights[k], v) for k, v in load_model(tmp_path / "best")
                   .state_dict().items())  # fmt: skip
    assert torch.load(last / "train" / "state.pt", weights_only=False)["step"] == 8
    assert (last / "train" / "recipe.toml").read_text() == (
        tmp_path / "best" / "train" / "recipe.toml").read_text()  # fmt: skip
    # the engines' manifest says which of the two it was made from
    from venus.export.onnx.manifest import training_record

    record, kept = training_record(last), training_record(tmp_path / "best")
    assert record is not None and kept is not None
    assert (record["step"], record["beside"]) == (8, want) and "beside" not in kept
