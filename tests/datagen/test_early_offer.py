"""Results offered early (``delegation.early_offer_p``): ready while the user speaks, the
result is injected then and the assistant holds it until its announcement. The rule
(``early_offer_s``), the plan check, ``retime``, JSON, the chunk targets, and the default
planning exactly as before the key existed."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from functools import cache

import pytest

from venus.datagen.align import at_boundary, check_targets, chunk_targets, delegation_records
from venus.datagen.config import GenerationConfig, parse_config
from venus.datagen.plan import Delegation, Plan, PlanError, early_offer_s, plain_text, snap
from venus.datagen.plan_check import early_offer_problem
from venus.datagen.planner import plan_sample
from venus.datagen.realize import realize

SEED = 3
ONLY_DELEGATION = {"category": {"offline_understanding": 0.0, "proactive_duplex": 0.0,
                                "delegation": 1.0}}  # fmt: skip
HEAVY = {"mix": ONLY_DELEGATION, "delegation": {"failure_p": 0.4}}
# delegation plans whose every event is the user's aside while the work is pending: the
# scenario in which a result is ready while the user speaks and the assistant listens
ASIDES = {
    "mix": {**ONLY_DELEGATION, "events": {"backchannel": 0.0, "other_directed": 1.0,
                                          "background": 0.0, "interruption": 0.0}},
    "events": {"await_input_p": 1.0},
    "delegation": {"early_offer_p": 1.0},
}  # fmt: skip
EARLY = parse_config(ASIDES)
# the first 60 plans of HEAVY (seed 3), pinned before early_offer_p existed: at its default
# nothing is drawn. A change that moves the draws on purpose updates it.
DEFAULT_PLANS_SHA256 = "ac407ae084fe3ae431440915dcfa11729274a6a50877ecf1cf941a68c77a2c64"


@cache
def planned(config: GenerationConfig, index: int) -> Plan:
    return plan_sample(config, index, SEED)


def is_early(plan: Plan, d: Delegation) -> bool:
    """Offered before its announcement."""
    if d.announce_turn is None or d.result_at_s is None:
        return False
    return d.result_at_s < plan.turns[d.announce_turn].start_s


def early_plans(n: int = 80) -> list[tuple[Plan, Delegation]]:
    found = [(p, d) for i in range(n) for p in [planned(EARLY, i)] for d in p.delegations
             if is_early(p, d)]  # fmt: skip
    assert len(found) >= 3, "too few early offers; the planner changed"
    return found


# --- the default ------------------------------------------------------------------------------
def test_the_default_plans_as_before_the_key_existed() -> None:
    digest = hashlib.sha256()
    for i in range(60):
        digest.update(planned(parse_config(HEAVY), i).to_json().encode())
    assert digest.hexdigest() == DEFAULT_PLANS_SHA256
    zero = parse_config({**HEAVY, "delegation": {"failure_p": 0.4, "early_offer_p": 0.0}})
    assert zero == parse_config(HEAVY)
    for i in range(30):
        assert plan_sample(zero, i, SEED).to_json() == planned(parse_config(HEAVY), i).to_json()


def test_only_plans_with_an_early_offer_change() -> None:
    """Nothing is drawn where no result can be offered early, so the rest stay as they were."""
    always = parse_config({**HEAVY, "delegation": {"failure_p": 0.4, "early_offer_p": 1.0}})
    changed = 0
    for i in range(150):
        plan, default = planned(always, i), planned(parse_config(HEAVY), i)
        if any(is_early(plan, d) for d in plan.delegations):
            changed += 1  # where its results come, and nothing else (the audio is the same)
            assert replace(plan, delegations=default.delegations) == default
        else:
            assert plan.to_json() == default.to_json()
    assert changed >= 1


# --- the rule ---------------------------------------------------------------------------------
def test_early_offers_follow_the_rule_and_round_trip() -> None:
    for plan, d in early_plans():
        assert d.announce_turn is not None and d.result_at_s is not None
        ready_s = plan.turns[d.call_turn].start_s + d.result_after_s
        assert (
            d.result_at_s
            == snap(ready_s, plan.chunk_s)
            == early_offer_s(plan.turns, d, plan.chunk_s)
        )
        heard_s = d.result_at_s - plan.chunk_s  # the chunk the result is injected in
        assert any(t.speaker == "user" and t.start_s <= heard_s and t.end_s >= d.result_at_s
                   for t in plan.turns)  # fmt: skip
        announce_s = plan.turns[d.announce_turn].start_s
        assert not any(t.speaker == "assistant" and t.start_s < announce_s and t.end_s > heard_s
                       for i, t in enumerate(plan.turns) if i != d.announce_turn)  # fmt: skip
        assert Plan.from_json(plan.to_json()) == plan  # from_json re-runs the plan check
        assert plan.retime([t.duration_s for t in plan.turns]) == plan


def test_retime_keeps_an_early_offer_only_while_the_rule_holds() -> None:
    kept = moved = fell_back = 0
    for plan, d in early_plans():
        k = plan.delegations.index(d)
        assert d.announce_turn is not None and d.result_at_s is not None
        asked = plan.turns[d.call_turn].reply_to
        assert asked is not None
        later = [t.duration_s for t in plan.turns]  # the request 1 s longer: all moves 1 s on
        later[asked] += plan.chunk_s
        shifted = plan.retime(later).delegations[k]
        assert shifted.result_at_s == d.result_at_s + plan.chunk_s
        moved += 1
        user = next(i for i, t in enumerate(plan.turns) if t.speaker == "user"
                    and t.start_s <= d.result_at_s - plan.chunk_s <= t.end_s)  # fmt: skip
        short = [t.duration_s for t in plan.turns]  # the user's speech now ends at once
        short[user] = 0.3
        timed = plan.retime(short)
        assert timed.delegations[k].result_at_s == timed.turns[d.announce_turn].start_s
        fell_back += 1
        for factor in (0.85, 1.15):
            try:
                timed = plan.retime([t.duration_s * factor for t in plan.turns])
            except PlanError:
                continue
            again = timed.delegations[k]
            assert again.announce_turn is not None
            early_s = early_offer_s(timed.turns, again, plan.chunk_s)
            kept += early_s is not None
            assert again.result_at_s == (
                timed.turns[again.announce_turn].start_s if early_s is None else early_s
            )
    assert moved and fell_back and kept


def _refused(plan: Plan, d: Delegation, result_at_s: float, reason: str) -> None:
    broken = replace(d, result_at_s=result_at_s)
    delegations = tuple(broken if x is d else x for x in plan.delegations)
    pattern = rf"delegation {d.item_id}: result_at_s .* nor an early offer: {reason}"
    with pytest.raises(PlanError, match=pattern):
        replace(plan, delegations=delegations)


def _candidate(reason: str) -> tuple[Plan, Delegation, float]:
    """A plan with a result whose first boundary after it is ready is no early offer, for
    ``reason``: offering it there must be refused."""
    for i in range(400):
        plan = planned(parse_config(HEAVY), i)
        for d in plan.delegations:
            if d.announce_turn is None:
                continue
            at_s = snap(plan.turns[d.call_turn].start_s + d.result_after_s, plan.chunk_s)
            problem = early_offer_problem(plan.turns, replace(d, result_at_s=at_s), plan.chunk_s)
            if problem and problem.startswith(reason):
                return plan, d, at_s
    pytest.fail(f"no plan where {reason!r}; the planner changed")


@pytest.mark.parametrize(
    "reason", ["the user does not speak through the chunk", "the assistant speaks"]
)
def test_the_check_refuses_an_early_offer_that_breaks_the_rule(reason: str) -> None:
    plan, d, at_s = _candidate(reason)
    _refused(plan, d, at_s, re.escape(reason))


def test_the_check_refuses_an_offer_before_it_is_ready_off_the_grid_or_late() -> None:
    plan, d = early_plans()[0]
    assert d.announce_turn is not None and d.result_at_s is not None
    first = "it is not the first chunk boundary at or after the result is ready"
    _refused(plan, d, d.result_at_s - plan.chunk_s, first)  # before it is ready
    _refused(plan, d, d.result_at_s + 0.5, first)  # off the grid
    _refused(plan, d, plan.turns[d.announce_turn].start_s + plan.chunk_s, first)  # after


# --- the chunk targets ------------------------------------------------------------------------
def test_an_early_result_is_injected_while_the_user_speaks_and_held() -> None:
    """Realized (real synthesis): the result comes in the chunk the user speaks through,
    every chunk from there to the announcement listens, the announcement speaks."""
    for plan, offered in early_plans():
        r = realize(EARLY, plan.index, SEED)
        d = next(x for x in r.plan.delegations if x.item_id == offered.item_id)
        if r.plan.attempt == 0 and is_early(r.plan, d):
            break
    else:
        pytest.fail("no early offer survived its realization")
    assert d.announce_turn is not None and d.result_at_s is not None
    chunks = chunk_targets(r)
    check_targets(r.plan, chunks)
    k = at_boundary(d.result_at_s, r.plan.chunk_s)
    announce = at_boundary(r.plan.turns[d.announce_turn].start_s, r.plan.chunk_s)
    assert d.injected() in chunks[k].results
    assert [c.decision for c in chunks[k:announce]] == ["listen"] * (announce - k)
    assert chunks[announce].decision in ("speak", "turn_eos")
    assert d.injected() not in chunks[announce].results
    record = next(x for x in delegation_records(r.plan) if x.item_id == d.item_id)
    assert record.result_chunk == k
    heard = [m for m, t in zip(r.turns, r.plan.turns, strict=True) if t.speaker == "user"]
    assert any(m.start_s <= k * r.plan.chunk_s + 0.05 and m.end_s >= (k + 1) * r.plan.chunk_s
               for m in heard)  # fmt: skip


def test_the_user_talking_on_brings_results_while_they_speak() -> None:
    """``delegation.talk_on_p``: the sample's first request is followed by 10-15 s of the
    user talking to someone else, long enough for most results to be ready in it."""
    from venus.datagen import domains as dom

    talk = parse_config(
        {"mix": ONLY_DELEGATION, "delegation": {"talk_on_p": 1.0, "early_offer_p": 1.0}}
    )
    assert parse_config({**HEAVY, "delegation": {"failure_p": 0.4, "talk_on_p": 0.0}}) == (
        parse_config(HEAVY)  # at 0 nothing is drawn: the default plans above
    )
    early = 0
    for i in range(30):
        plan = planned(talk, i)
        first = plan.delegations[0]
        aside = next(t for t in plan.turns if t.role == "aside")
        said = plain_text(aside.text)  # with the disfluencies the planner adds
        assert any(said.endswith(line[-40:]) for line in dom.LONG_ASIDES), said
        assert aside.speaker == "user"
        assert aside.start_s >= plan.turns[first.call_turn].end_s  # after the holding line
        assert 9.0 <= aside.duration_s <= 16.0, aside
        events = [e for e in plan.events if plan.turns[e.turn] == aside]
        assert [(e.kind, e.action) for e in events] == [("other_directed", "await_input")]
        early += is_early(plan, first)
    assert early >= 15, f"{early} of 30 first results offered while the user talks"
