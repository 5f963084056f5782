"""Overlaps the reply outlasts (``events.reply_outlasts_s``): a backchannel, aside or
background line the assistant talks through ends that long before its reply does, so
carrying on is heard past Full-Duplex-Bench v1.5's grace end and the data's own assistant
passes every such cut. At 0 (the default) nothing is drawn: plans as before the key."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import pytest

from venus.datagen.config import GenerationConfig, GenerationConfigError, parse_config
from venus.datagen.plan import Plan
from venus.datagen.planner import plan_sample
from venus.datagen.realize import outlast_problem, realize
from venus.datagen.runner import run
from venus.evaluation.metrics import DEFAULT_RULES, Behaviour
from venus.evaluation.reference import reference_scores
from venus.evaluation.score import find_samples

SEED = 3
DUPLEX = {"mix": {"category": {"offline_understanding": 0.0, "proactive_duplex": 1.0,
                               "delegation": 0.0}}}  # fmt: skip
OUTLAST_S = 2.0
OUTLAST = parse_config({**DUPLEX, "events": {"reply_outlasts_s": OUTLAST_S}})
# a small set in which the data's assistant fails 3 of 8 cuts by default (stops by the grace end)
SET_SEED = 1
# the first 60 plans of DUPLEX (seed 3), pinned before reply_outlasts_s existed
DEFAULT_PLANS_SHA256 = "ad2b384c2decbc73ba3882bbe4535c03728a1a692cdfd201745c878c82257730"


@cache
def planned(config: GenerationConfig, index: int) -> Plan:
    return plan_sample(config, index, SEED)


def reply_end_s(plan: Plan, turn: int) -> float:
    reply = plan.turns[turn]
    return reply.cut_at_s if reply.cut_at_s is not None else reply.end_s


def talked_through(plans: list[Plan]) -> list[tuple[Plan, int, float]]:
    """(plan, event index, seconds the reply goes on past the event) of every overlap the
    assistant talks through."""
    return [
        (p, k, reply_end_s(p, e.over_turn) - p.turns[e.turn].end_s)
        for p in plans
        for k, e in enumerate(p.events)
        if e.action == "continue_speaking" and e.over_turn is not None
    ]


def test_the_default_plans_as_before_the_key_existed() -> None:
    digest = hashlib.sha256()
    for i in range(60):
        digest.update(planned(parse_config(DUPLEX), i).to_json().encode())
    assert digest.hexdigest() == DEFAULT_PLANS_SHA256
    assert parse_config({**DUPLEX, "events": {"reply_outlasts_s": 0.0}}) == parse_config(DUPLEX)


def test_every_overlap_talked_through_ends_that_long_before_its_reply() -> None:
    before = talked_through([planned(parse_config(DUPLEX), i) for i in range(80)])
    after = talked_through([planned(OUTLAST, i) for i in range(80)])
    assert any(tail < OUTLAST_S for _, _, tail in before)  # what the key is for
    short = [(p.to_json()[:80], k, tail) for p, k, tail in after if tail < OUTLAST_S]
    assert not short
    # drawn earlier into the reply where it can be, dropped only where it cannot
    assert len(after) >= 0.75 * len(before), (len(after), len(before))


def test_an_interruption_after_one_leaves_the_carrying_on_heard() -> None:
    found = 0
    for i in range(120):
        plan = planned(OUTLAST, i)
        for e in plan.events:
            if e.action != "continue_speaking":
                continue
            later = [x for x in plan.events if x.over_turn == e.over_turn and x.turn > e.turn]
            for x in later:
                gap = plan.turns[x.turn].start_s - plan.turns[e.turn].end_s
                assert gap >= OUTLAST_S - 1e-6, (i, e, x, gap)
                found += 1
    assert found >= 3, "too few events after one talked through; the planner changed"


def test_a_realized_sample_is_checked_as_heard() -> None:
    index = next(i for i in range(40) if talked_through([planned(OUTLAST, i)]))
    realization = realize(OUTLAST, index, SEED)
    assert outlast_problem(realization, OUTLAST_S) is None
    assert outlast_problem(realization, 0.0) is None  # the default checks nothing
    problem = outlast_problem(realization, 60.0)  # no reply goes on a minute past one
    assert problem is not None
    assert "events.reply_outlasts_s = 60.0" in problem and "before its reply does" in problem


def _posed_continuations(config: GenerationConfig, out: Path) -> list[Behaviour]:
    """The data's own assistant's label on every posed continuation cut of a small set."""
    run(config, out / "set", seed=SET_SEED)
    refs = find_samples(out / "set")
    scores = reference_scores(refs, out / "ref", DEFAULT_RULES)
    assert scores is not None
    return [s.overlap.label for s in scores
            if s.overlap is not None and s.action == "continue_speaking"]  # fmt: skip


def test_the_datas_assistant_passes_every_overlap_it_talks_through(tmp_path: Path) -> None:
    """Synthesized, cut and scored as `venus eval duplex` scores them: with the key, the
    data's reply is heard past the grace end of every backchannel, aside and background
    line; without it, some are not."""
    small = {
        "samples": 8,
        "duration": {"min_s": 16.0, "max_s": 24.0},
        "mix": {**DUPLEX["mix"], "events": {"backchannel": 0.5, "other_directed": 0.3,
                                            "background": 0.2, "interruption": 0.0}},
        "output": {"full_duplex_bench": True, "timeline_plots": 0},
    }  # fmt: skip
    before = _posed_continuations(parse_config(small), tmp_path / "before")
    after = _posed_continuations(
        parse_config({**small, "events": {"reply_outlasts_s": OUTLAST_S}}), tmp_path / "after"
    )
    assert Behaviour.RESUME in before and set(before) != {Behaviour.RESUME}
    assert len(after) >= 4 and set(after) == {Behaviour.RESUME}, after


@pytest.mark.parametrize("value", [-0.5, 5.5])
def test_an_out_of_range_value_is_refused_by_name(value: float) -> None:
    with pytest.raises(GenerationConfigError, match=r"events\.reply_outlasts_s"):
        parse_config({"events": {"reply_outlasts_s": value}})
