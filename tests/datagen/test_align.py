"""The chunk grid: decisions, words, actions, delegation spans and results per chunk,
checked against docs/timeline.md's rules on realized samples (real synthesis)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cache
from itertools import islice
from typing import Any

import numpy as np
import pytest

from venus.daemon.frontend.delegation import parse_call
from venus.datagen.align import (
    AlignmentError,
    at_boundary,
    build_trajectory,
    check_targets,
    chunk_targets,
    heard_from,
)
from venus.datagen.config import GenerationConfig, preset
from venus.datagen.plan import CUTTING, Plan, plain_text
from venus.datagen.planner import plan_sample
from venus.datagen.realize import SAMPLE_RATE, Realization, realize
from venus.datagen.sample import FILES
from venus.datagen.trajectory import ChunkTarget

SEED = 1
SMOKE = preset("smoke")


@cache
def realized(index: int) -> Realization:
    return realize(SMOKE, index, SEED)


@cache
def planned(config: GenerationConfig, index: int) -> Plan:
    return plan_sample(config, index, SEED)


def first(predicate: Callable[[Plan], bool]) -> Realization:
    """The shortest of the first few smoke samples whose plan has the property."""
    found = list(islice((i for i in range(400) if predicate(planned(SMOKE, i))), 3))
    if not found:
        pytest.fail("no smoke sample has the property; the planner changed")
    r = realized(min(found, key=lambda i: planned(SMOKE, i).duration_s))
    assert predicate(r.plan)
    return r


def cut_with_response(p: Plan) -> bool:
    return any(e.action in CUTTING and e.response_turn is not None for e in p.events)


def cut_alone(p: Plan) -> bool:
    return any(e.action in CUTTING and e.response_turn is None for e in p.events)


SCENARIOS: dict[str, Callable[[Plan], bool]] = {
    "answers": lambda p: p.category == "offline_understanding",
    "backchannel": lambda p: any(e.kind == "backchannel" for e in p.events),
    "await_input": lambda p: any(e.action == "await_input" for e in p.events),
    "stop": cut_alone,
    "cut_and_response": cut_with_response,
    "retry": lambda p: any(d.form == "retry" for d in p.delegations),
}


def test_heard_from_and_at_boundary() -> None:
    assert heard_from(5.0, 1.0) == 4  # a turn heard from 5 s was decided in chunk 4
    assert heard_from(5.999, 1.0) == 4 and heard_from(6.0, 1.0) == 5
    assert at_boundary(5.0, 1.0) == 4 and at_boundary(1.0, 1.0) == 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_decisions_follow_the_timeline_rules(scenario: str) -> None:
    r = first(SCENARIOS[scenario])
    chunks = chunk_targets(r)
    check_targets(r.plan, chunks)
    assert len(chunks) == round(r.plan.duration_s) and chunks[3].start_s == 3.0
    for c in chunks:  # a chunk with text speaks; a speaking chunk has text
        assert (c.decision != "listen") == bool(c.text)
    for i, turn in enumerate(r.plan.turns):
        if turn.speaker != "assistant":
            continue
        span = _reply_chunks(chunks, turn.start_s)
        said = " ".join(c.text for c in span)
        assert span[0].index == turn.start_s - 1  # decided one chunk before it is heard
        if turn.cut_at_s is None:  # heard to its end: every word, then turn_eos
            assert said == plain_text(turn.text)
            assert [c.decision for c in span] == ["speak"] * (len(span) - 1) + ["turn_eos"]
        else:  # the words heard before the cut, and no turn_eos
            assert plain_text(turn.text).startswith(said) and said != plain_text(turn.text)
            assert all(c.decision == "speak" for c in span)
            assert [w.text for w in r.words[i]] == said.split()


def _reply_chunks(chunks: tuple[ChunkTarget, ...], start_s: float) -> list[ChunkTarget]:
    out = []
    for c in chunks[round(start_s) - 1 :]:
        out.append(c)
        if c.decision != "speak" or chunks[c.index + 1].decision == "listen":
            break
        if chunks[c.index + 1].action in CUTTING:
            break
    return out


def test_a_cut_listens_and_the_assistant_is_silent_after_it() -> None:
    r = first(cut_alone)
    chunks = chunk_targets(r)
    event = next(e for e in r.plan.events if e.action in CUTTING and e.response_turn is None)
    assert event.over_turn is not None
    over = r.plan.turns[event.over_turn]
    assert over.cut_at_s is not None
    cut = chunks[round(over.cut_at_s) - 1]
    assert (cut.decision, cut.action, cut.text) == ("listen", event.action, "")
    assert chunks[cut.index - 1].decision == "speak"  # it spoke until then
    next_start = min(
        (t.start_s for t in r.plan.turns if t.speaker == "assistant" and t.start_s > over.start_s),
        default=r.plan.duration_s,
    )
    after = r.assistant[round(over.cut_at_s * SAMPLE_RATE) : round(next_start * SAMPLE_RATE)]
    assert after.size > 0 and not np.any(after)


def test_a_response_at_the_cut_speaks_in_the_cut_chunk() -> None:
    r = first(cut_with_response)
    chunks = chunk_targets(r)
    event = next(e for e in r.plan.events if e.action in CUTTING and e.response_turn is not None)
    assert event.over_turn is not None and event.response_turn is not None
    over, response = r.plan.turns[event.over_turn], r.plan.turns[event.response_turn]
    assert over.cut_at_s is not None
    cut = chunks[round(over.cut_at_s) - 1]
    assert cut.action == event.action
    if response.start_s == over.cut_at_s:  # the response's first words, right away
        assert cut.decision in ("speak", "turn_eos")
        assert plain_text(response.text).startswith(cut.text)
    else:
        assert cut.decision == "listen"


def test_actions_go_on_the_chunk_the_event_ends_in() -> None:
    r = first(lambda p: any(e.action == "await_input" for e in p.events))
    chunks = chunk_targets(r)
    event = next(e for e in r.plan.events if e.action == "await_input")
    end_s = r.plan.turns[event.turn].end_s
    chunk = chunks[int(np.ceil(end_s)) - 1]
    assert (chunk.decision, chunk.action) == ("listen", "await_input")
    r = first(lambda p: any(e.kind == "backchannel" for e in p.events))
    chunks = chunk_targets(r)
    k = next(k for k, e in enumerate(r.plan.events) if e.kind == "backchannel")
    marked = [c for c in chunks if c.action == "continue_speaking"]
    assert marked and all(c.decision in ("speak", "turn_eos") for c in marked)
    window = r.windows_s[k]
    assert [c.index for c in chunks if k in c.events] == list(
        range(int(window[0]), int(np.ceil(window[1])))
    )


def test_delegation_spans_parse_and_results_come_at_their_chunk() -> None:
    for scenario in ("retry", "cut_and_response"):
        r = first(SCENARIOS[scenario])
        chunks = chunk_targets(r)
        records = build_trajectory(r, FILES).delegations
        by_id = {d.item_id: d for d in r.plan.delegations}
        seen = 0

        def named(capability: str, chunk: int, records: Sequence[Any] = records) -> str:
            """What the harness resolves a capability's name to at ``chunk``: the newest
            item of it called before and not yet said or cancelled."""
            pending = [
                d.item_id
                for d in records
                if d.capability == capability
                and d.call_chunk < chunk
                and (d.result_chunk is None or d.result_chunk >= chunk)
                and (d.cancel_chunk is None or d.cancel_chunk >= chunk)
            ]
            assert pending, f"{capability} names nothing pending at chunk {chunk}"
            return pending[-1]

        for c in chunks:
            for raw in c.delegate:
                call = parse_call(raw)
                assert call.valid, call.error
                seen += 1
                if call.action == "call":
                    item = next(d for d in records if d.call_chunk == c.index and d.form == "call")
                    assert (call.name, call.arguments) == (item.capability, dict(item.arguments))
                    if item.supersedes is None:
                        assert call.target is None
                    else:  # pending work is named by its capability
                        assert call.target is not None
                        assert named(call.target, c.index) == item.supersedes
                elif call.action == "cancel":
                    assert call.target is not None
                    cancelled = named(call.target, c.index)
                    assert by_id[cancelled].cancel_turn is not None
                else:  # a retry names the failed item by the id its result showed
                    assert call.action == "retry" and call.target in by_id
            for text in c.results:
                result = json.loads(text)
                item = by_id[result["item"]]
                assert item.result_at_s == c.index + 1 and result["result"] == item.result_text
        assert seen == len(r.plan.delegations) + sum(
            d.cancel_turn is not None for d in r.plan.delegations
        )
        for record, d in zip(records, r.plan.delegations, strict=True):
            assert record.call_chunk == r.plan.turns[d.call_turn].start_s - 1
            assert (record.result_chunk is None) == (d.result_at_s is None)
            assert (record.cancel_chunk is None) == (d.status != "cancelled")


def test_broken_targets_are_refused() -> None:
    r = first(SCENARIOS["answers"])
    chunks = chunk_targets(r)
    speak = next(c for c in chunks if c.decision == "speak")
    end = next(c for c in chunks if c.decision == "turn_eos")
    listen = next(c for c in chunks if c.decision == "listen")
    for broken in (
        replace(speak, decision="listen"),  # words while listening
        replace(speak, text=""),  # speaking without words
        replace(end, decision="speak"),  # a reply that never ends
        replace(listen, delegate=('{"cancel": "0badc0de"}',)),  # a span while listening
    ):
        targets = tuple(broken if c.index == broken.index else c for c in chunks)
        with pytest.raises(AlignmentError):
            check_targets(r.plan, targets)
