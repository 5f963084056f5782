"""The addressee loss (train/addressee.py): whom each chunk's speech is for, from the
trajectory's turns, at the decision positions of a generated set; the loss computed by
hand from the backbone's hidden states; the head and the backbone learn it; a run with
it reports it and keeps it out of the checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from support.layouts import byte_builder

from venus.export.model.config import PRESETS
from venus.export.model.init import init_model
from venus.export.model.venus import VenusModel
from venus.train.addressee import (
    CLASSES,
    NONE,
    AddresseeHead,
    addressee_loss,
    balanced_accuracy,
    chunk_addressees,
    class_weights,
)
from venus.train.batch import Batch, collate, embeddings, forward_losses
from venus.train.data import cropped, load_examples, read_index

CFG = PRESETS["tiny"]()
CONTROL = [CFG.special_token_ids[t] for t in ("<|listen|>", "<|speak|>", "<|turn_eos|>")]
TO_ME, ASIDE, BACKCHANNEL, BACKGROUND = range(4)


def _turn(speaker: str, role: str, start: float, end: float) -> dict[str, object]:
    return {"speaker": speaker, "role": role, "start_s": start, "end_s": end, "text": "x"}


def test_each_chunk_is_labelled_with_the_last_ending_speech_it_hears() -> None:
    assert CLASSES[ASIDE] == "to someone else"
    turns = [
        _turn("user", "question", 0.5, 2.3),
        _turn("assistant", "answer", 2.5, 7.9),
        _turn("user", "aside", 3.2, 4.1),  # ends in chunk 4, where the TV has begun
        _turn("background", "tv_line", 4.5, 5.5),
        _turn("user", "backchannel", 6.2, 6.6),
        _turn("other", "aside", 8.0, 9.0),  # ends on chunk 9's boundary: not in it
    ]
    assert chunk_addressees(turns, 10, 1.0) == (
        TO_ME, TO_ME, TO_ME, ASIDE, BACKGROUND, BACKGROUND, BACKCHANNEL, NONE, ASIDE, NONE,
    )  # fmt: skip
    assert chunk_addressees(turns, 3, 2.0) == (TO_ME, ASIDE, BACKGROUND)  # 2 s chunks


def test_the_classes_count_alike_and_are_scored_by_their_mean_recall() -> None:
    # 6 scored chunks: 3 to the assistant, 2 asides, 1 backchannel, no background
    weights = class_weights([(TO_ME, NONE, TO_ME, ASIDE), (ASIDE, TO_ME, BACKCHANNEL)])
    assert weights.tolist() == pytest.approx([6 / 12, 6 / 8, 6 / 4, 1.0])
    assert balanced_accuracy([3, 2, 1, 0], [3, 1, 0, 0]) == pytest.approx((1 + 0.5 + 0) / 3)
    assert balanced_accuracy([0, 0, 0, 0], [0, 0, 0, 0]) == 0.0


def test_the_labels_sit_at_the_decisions_of_their_chunks_whole_and_cropped(
    duplex_set: Path,
) -> None:
    build = byte_builder()
    examples = load_examples(duplex_set, read_index(duplex_set), build,
                             image_size=CFG.vision.image_size)  # fmt: skip
    seen: set[int] = set()
    for e in examples:
        t = json.loads((duplex_set / "samples" / e.sample_id / "trajectory.json").read_text())
        want = chunk_addressees(t["turns"], len(t["chunks"]), t["chunk_s"])
        assert e.addressed == want
        seen.update(want)
        start = e.crops[len(e.crops) // 2]
        for ex in (e, cropped(e, start, build)):
            batch = collate([ex])
            at = batch.decision[0].nonzero()[:, 0]
            assert batch.addressed is not None
            assert batch.addressed[0, at].tolist() == list(ex.addressed)
            assert int((batch.addressed[0] != NONE).sum()) == sum(c != NONE for c in ex.addressed)
        assert cropped(e, start, build).addressed == want[start:]
    assert {TO_ME, NONE} <= seen and len(seen - {NONE}) >= 3  # events of other kinds too


def _model() -> VenusModel:
    model = VenusModel(CFG)
    init_model(model, 0)
    return model


def test_the_loss_is_the_heads_cross_entropy_at_the_decisions_and_it_learns(
    duplex_set: Path,
) -> None:
    examples = load_examples(duplex_set, read_index(duplex_set), byte_builder(),
                             image_size=CFG.vision.image_size)  # fmt: skip
    batch = collate(examples)
    weights = class_weights(e.addressed for e in examples)
    assert float(weights.max()) > 1.0 > float(weights[TO_ME])  # questions are many
    model, head = _model(), AddresseeHead(CFG.backbone.hidden_size, weights)
    with torch.no_grad():
        plain = forward_losses(model, batch, CONTROL)
        with_it = forward_losses(model, batch, CONTROL, addressee=head, addressee_weight=2.0)
        hidden = _hidden(model, batch)
        assert batch.addressed is not None
        scored = batch.decision & (batch.addressed != NONE)
        logits = head(hidden[scored])
        target = batch.addressed[scored]
        each = F.cross_entropy(logits, target, reduction="none")
        by_hand = (each * weights[target]).sum() / weights[target].sum()
    assert plain.addressee is None
    assert with_it.addressee is not None
    assert float(with_it.addressee) == pytest.approx(float(by_hand), rel=1e-5)
    assert float(with_it.total) == pytest.approx(float(plain.total) + 2.0 * float(by_hand),
                                                 rel=1e-5)  # fmt: skip
    assert plain.addressed == () and sum(with_it.addressed) == int(scored.sum()) > 0
    right = logits.argmax(dim=1) == target
    for k in range(len(CLASSES)):
        assert with_it.addressed[k] == int((target == k).sum())
        assert with_it.addressed_right[k] == int((right & (target == k)).sum())
    # trained on it alone, the backbone and the head learn to say whom the speech is for
    params = [*model.backbone.parameters(), *model.audio_encoder.parameters(),
              *head.parameters()]  # fmt: skip
    optim = torch.optim.Adam(params, lr=3e-3)
    first = float(by_hand)
    for _ in range(30):
        optim.zero_grad()
        _addressee_only(model, head, batch).backward()  # type: ignore[no-untyped-call]
        optim.step()
    with torch.no_grad():
        after = forward_losses(model, batch, CONTROL, addressee=head, addressee_weight=1.0)
    assert after.addressee is not None and float(after.addressee) < 0.5 * first
    assert balanced_accuracy(after.addressed, after.addressed_right) > balanced_accuracy(
        with_it.addressed, with_it.addressed_right
    )


def _hidden(model: VenusModel, batch: Batch) -> torch.Tensor:
    """The backbone's teacher-forced hidden states, as ``forward_losses`` computes them."""
    emb = embeddings(model, batch)
    b, n = batch.ids.shape
    empty = model.backbone.new_cache(b)
    hidden: torch.Tensor = model.backbone(
        emb, batch.mask, torch.arange(n)[None].expand(b, n), empty.keys, empty.values
    )[1]
    return hidden


def _addressee_only(model: VenusModel, head: AddresseeHead, batch: Batch) -> torch.Tensor:
    """The addressee loss alone, with the gradient path through the backbone."""
    assert batch.addressed is not None
    rows, cols = batch.decision.nonzero(as_tuple=True)
    labels = batch.addressed[rows, cols]
    return addressee_loss(head, _hidden(model, batch)[rows, cols], labels)[0]


def test_a_run_with_it_reports_it_and_exports_without_the_head(
    duplex_set: Path, tmp_path: Path
) -> None:
    from venus.train.config import TrainConfig
    from venus.train.loop import train

    cfg = TrainConfig(steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2,
                      validation=0.34, threads=1, addressee_weight=1.0)  # fmt: skip
    lines: list[str] = []
    out = tmp_path / "ckpt"
    train(cfg, duplex_set, out, lines.append)
    line = next(x for x in lines if x.startswith("train: validation at step 2"))
    assert "whom speech is for" in line
    metrics = json.loads((out / "train" / "metrics.json").read_text())["validation"]
    assert metrics["addressed"] > 0 and 0 <= metrics["addressee_accuracy"] <= 1
    assert 0 <= metrics["aside_recall"] <= 1
    history = (out / "train" / "history.jsonl").read_text().splitlines()
    steps = [json.loads(x) for x in history if '"loss"' in x]
    assert len(steps) == 2 and all(r["addressee_loss"] > 0 for r in steps)
    state = torch.load(out / "train" / "state.pt", weights_only=False)
    assert set(state["addressee"]) == {"proj.weight", "proj.bias", "weights"}
    assert float(state["addressee"]["weights"].max()) > 1.0  # weighted by the training split
    # `venus validate` takes the head from the run's state beside the checkpoint
    from venus.train.check import validate

    figures = validate(out, duplex_set, lambda _l: None)
    assert figures["addressed"] > metrics["addressed"]  # every sample, not the split
    assert 0 <= figures["addressee_accuracy"] <= 1 and "aside_recall" in figures
    # the checkpoint is the model's alone (the head is training's)
    plain = tmp_path / "plain"
    train(dataclasses.replace(cfg, addressee_weight=0.0), duplex_set, plain, lambda _l: None)
    assert (out / "model.safetensors.index.json").read_text() == (
        plain / "model.safetensors.index.json"
    ).read_text()
    assert state is not None and torch.load(plain / "train" / "state.pt",
                                            weights_only=False)["addressee"] is None  # fmt: skip
