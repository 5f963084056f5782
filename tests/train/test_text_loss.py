"""The text and decision losses' weights on small generated sets: a reply's first chunk
counts ``reply_weight`` times, the target naming a call's tool ``call_weight`` times more,
those of its argument values ``argument_weight`` times more,
the decision an overlap event is decided in at least ``event_weight`` times, each checked
against the cross-entropy computed by hand from the backbone's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from support.layouts import byte_builder

from venus.export.model.config import PRESETS
from venus.export.model.init import init_model
from venus.export.model.venus import VenusModel
from venus.train.batch import Batch, collate, embeddings, forward_losses
from venus.train.data import load_examples, read_index
from venus.train.layout import IGNORE

CFG = PRESETS["tiny"]()
CONTROL = [CFG.special_token_ids[t] for t in ("<|listen|>", "<|speak|>", "<|turn_eos|>")]


def _model() -> VenusModel:
    model = VenusModel(CFG)
    init_model(model, 0)
    return model


def _batch(data: Path, samples: int | None = None) -> Batch:
    records = read_index(data)[:samples]
    return collate(load_examples(data, records, byte_builder(),
                                 image_size=CFG.vision.image_size))  # fmt: skip


def _one_category(tmp_path: Path, category: str, samples: int, min_s: float) -> Path:
    """A generated set (seed 2) of ``samples`` samples of one category, ``min_s`` to
    ``min_s + 5`` s long: delegation for calls, proactive duplex for overlap events."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    mix = dict.fromkeys(("offline_understanding", "proactive_duplex", "delegation"), 0.0)
    out = tmp_path / "set"
    run(parse_config({
        "samples": samples, "duration": {"min_s": min_s, "max_s": min_s + 5.0},
        "mix": {"category": mix | {category: 1.0}},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    }), out, seed=2)  # fmt: skip
    return out


def _logits(model: VenusModel, batch: Batch) -> torch.Tensor:
    """The backbone's teacher-forced logits, as ``forward_losses`` computes them."""
    emb = embeddings(model, batch)
    b, n = batch.ids.shape
    empty = model.backbone.new_cache(b)
    return model.backbone(emb, batch.mask, torch.arange(n)[None].expand(b, n),
                          empty.keys, empty.values)[0]  # fmt: skip


def test_a_replys_first_chunk_counts_reply_weight_times_in_the_text_loss(small_set: Path) -> None:
    model, batch = _model(), _batch(small_set, 2)
    text = (batch.labels != IGNORE) & ~batch.decision
    assert 0 < int(batch.opening.sum()) < int(text.sum())
    assert not bool((batch.opening & ~text).any())
    with torch.no_grad():
        plain = forward_losses(model, batch, CONTROL)
        weighted = forward_losses(model, batch, CONTROL, reply_weight=5.0)
        logits = _logits(model, batch)
    each = F.cross_entropy(logits[text], batch.labels[text], reduction="none")
    weight = 1.0 + 4.0 * batch.opening[text].float()
    assert float(plain.text) == pytest.approx(float(each.mean()), rel=1e-5)
    assert float(weighted.text) == pytest.approx(float((each * weight).sum() / weight.sum()),
                                                  rel=1e-5)  # fmt: skip
    assert plain.opening_tokens == int(batch.opening.sum()) > 0
    # one first token a reply: as many as the decisions that start one (speak, changing course)
    starts = batch.decision & batch.turn & (batch.labels == CONTROL[1])
    assert plain.first_tokens == int(starts.sum()) > 0
    first = F.pad(starts[:, :-1], (1, 0))  # the token after the decision that starts it
    assert bool((first <= batch.opening).all())
    right = logits[first].argmax(dim=1) == batch.labels[first]
    assert plain.first_right == int(right.sum())


def test_the_token_naming_a_calls_tool_counts_call_weight_times_more(tmp_path: Path) -> None:
    """``call_weight`` multiplies the weight of the choice targets (layout.py) on top of
    ``reply_weight``, and the losses count how often the tool named was the right one."""
    model, batch = _model(), _batch(_one_category(tmp_path, "delegation", 2, 8.0))
    text = (batch.labels != IGNORE) & ~batch.decision
    assert not bool((batch.choice & ~text).any())
    with torch.no_grad():
        plain = forward_losses(model, batch, CONTROL, reply_weight=2.0)
        weighted = forward_losses(model, batch, CONTROL, reply_weight=2.0, call_weight=3.0)
        logits = _logits(model, batch)
    each = F.cross_entropy(logits[text], batch.labels[text], reduction="none")
    weight = (1.0 + batch.opening[text].float()) * (1.0 + 2.0 * batch.choice[text].float())
    assert float(weighted.text) == pytest.approx(float((each * weight).sum() / weight.sum()),
                                                  rel=1e-5)  # fmt: skip
    assert float(weighted.text) != pytest.approx(float(plain.text), rel=1e-4)
    assert plain.choice_tokens == int(batch.choice.sum()) > 0
    right = logits[batch.choice].argmax(dim=1) == batch.labels[batch.choice]
    assert plain.choice_right == int(right.sum())


def test_a_calls_argument_values_count_argument_weight_times_more(tmp_path: Path) -> None:
    """``argument_weight`` multiplies the weight of the argument targets (layout.py) on top
    of the others, and the losses count how many of them were right."""
    model, batch = _model(), _batch(_one_category(tmp_path, "delegation", 2, 8.0))
    text = (batch.labels != IGNORE) & ~batch.decision
    assert not bool((batch.argument & ~text).any())
    assert not bool((batch.argument & batch.choice).any())
    with torch.no_grad():
        plain = forward_losses(model, batch, CONTROL, reply_weight=2.0, call_weight=3.0)
        weighted = forward_losses(model, batch, CONTROL, reply_weight=2.0, call_weight=3.0,
                                  argument_weight=5.0)  # fmt: skip
        logits = _logits(model, batch)
    each = F.cross_entropy(logits[text], batch.labels[text], reduction="none")
    weight = ((1.0 + batch.opening[text].float()) * (1.0 + 2.0 * batch.choice[text].float())
              * (1.0 + 4.0 * batch.argument[text].float()))  # fmt: skip
    assert float(weighted.text) == pytest.approx(float((each * weight).sum() / weight.sum()),
                                                  rel=1e-5)  # fmt: skip
    assert float(weighted.text) != pytest.approx(float(plain.text), rel=1e-4)
    assert plain.argument_tokens == int(batch.argument.sum()) > int(batch.choice.sum())
    right = logits[batch.argument].argmax(dim=1) == batch.labels[batch.argument]
    assert plain.argument_right == int(right.sum())
    # one value a run of argument targets (a key lies between two values)
    starts = batch.argument & ~F.pad(batch.argument[:, :-1], (1, 0))
    assert plain.argument_values == int(starts.sum()) >= plain.choice_tokens
    assert plain.argument_values_right <= plain.argument_values


def test_an_overlap_events_decision_counts_at_least_event_weight_times(duplex_set: Path) -> None:
    """``event_weight`` raises the weight of the decisions an overlap event is decided in
    (layout.py ``event``) to at least itself, the yields (already ``turn_weight``) and
    the holds alike, and the losses count how often those were decided as the data's."""
    model, batch = _model(), _batch(duplex_set)
    assert not bool((batch.event & ~batch.decision).any())
    holds, yields = batch.event & ~batch.turn, batch.event & batch.turn
    assert int(holds.sum()) > 0 and int(yields.sum()) > 0
    with torch.no_grad():
        plain = forward_losses(model, batch, CONTROL, turn_weight=3.0)
        weighted = forward_losses(model, batch, CONTROL, turn_weight=3.0, event_weight=5.0)
        logits = _logits(model, batch)
    d = batch.decision
    d_logits = logits[d][:, CONTROL]
    target = (batch.labels[d][:, None] == torch.tensor(CONTROL)[None]).float().argmax(dim=1)
    each = F.cross_entropy(d_logits, target, reduction="none")
    turn, event = batch.turn[d].float(), batch.event[d].float()
    weight = 1.0 + 2.0 * turn + (5.0 - 1.0 - 2.0 * turn) * event  # 5 at every event, else 3 / 1
    assert float(weighted.decision) == pytest.approx(
        float((each * weight).sum() / weight.sum()), rel=1e-5
    )
    assert float(plain.decision) != pytest.approx(float(weighted.decision), rel=1e-4)
    assert plain.events == int(batch.event.sum()) and plain.holds == int(holds.sum())
    said = d_logits.argmax(dim=1) != 0  # the daemon speaks (speak or turn_eos)
    right = said == (target != 0)
    assert plain.events_right == int((right & batch.event[d]).sum())
    assert plain.holds_right == int((right & holds[d]).sum())
    # after_weight: the carrying on just after a hold, the same way
    after = batch.after[d]
    assert int(after.sum()) > 0 and not bool((batch.after & ~batch.decision).any())
    with torch.no_grad():
        both = forward_losses(
            model, batch, CONTROL, turn_weight=3.0, event_weight=5.0, after_weight=7.0
        )
    weight = torch.where(after, weight.clamp(min=7.0), weight)
    assert float(both.decision) == pytest.approx(
        float((each * weight).sum() / weight.sum()), rel=1e-5
    )
    assert plain.afters == int(after.sum())
    assert plain.afters_right == int((right & after).sum())


def test_an_argument_value_is_right_when_all_its_tokens_are() -> None:
    """``_runs_wrong``: the wrong tokens of each run of marked targets (one value each)."""
    from venus.train.batch import _runs_wrong

    marked = torch.tensor([0, 1, 1, 0, 1, 0, 1, 1, 1]).bool()
    right = torch.tensor([1, 1, 0, 1, 1, 0, 0, 1, 0]).bool()
    assert _runs_wrong(marked, right).tolist() == [1, 0, 2]
    assert _runs_wrong(torch.zeros(3).bool(), torch.ones(3).bool()).tolist() == []
