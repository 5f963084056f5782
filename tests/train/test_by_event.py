"""`venus validate --by-event`: each overlap event counted by what it is and whether the
checkpoint did as the data does, teacher-forced (train/by_event.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from venus.train.by_event import event_lines, event_outcomes, group_of


def _chunk(
    decision: str, events: tuple[int, ...] = (), action: str | None = None
) -> dict[str, Any]:
    return {"decision": decision, "events": list(events), "action": action}


# a reply over chunks 1-8: a backchannel in 2 (decided there), an aside in 4-5 (decided in
# 5), then an interruption in 7 that the data yields to in 8; an aside while waiting in 10
CHUNKS = [
    _chunk("listen"), _chunk("speak"), _chunk("speak", (0,), "continue_speaking"),
    _chunk("speak"), _chunk("speak", (1,)), _chunk("speak", (1,), "continue_speaking"),
    _chunk("speak"), _chunk("speak", (2,)), _chunk("listen", (2,), "yield_floor"),
    _chunk("listen"), _chunk("listen", (3,), "await_input"), _chunk("listen"),
]  # fmt: skip
EVENTS = [
    {"kind": "backchannel", "action": "continue_speaking"},
    {"kind": "other_directed", "action": "continue_speaking"},
    {"kind": "interruption", "action": "yield_floor", "intent": "change_topic"},
    {"kind": "other_directed", "action": "await_input"},
]
AS_DATA = [c["decision"] != "listen" for c in CHUNKS]


def test_events_as_the_data_does_are_right_and_each_mistake_counts_where_it_is() -> None:
    groups = [o.group for o in event_outcomes(CHUNKS, EVENTS, AS_DATA)]
    assert groups == ["backchannel", "aside while speaking", "interruption: change_topic",
                      "aside while waiting"]  # fmt: skip
    assert all(o.right and o.right_after for o in event_outcomes(CHUNKS, EVENTS, AS_DATA))

    def outcomes(*wrong: int) -> list[tuple[bool, bool]]:
        said = [not s if k in wrong else s for k, s in enumerate(AS_DATA)]
        return [(o.right, o.right_after) for o in event_outcomes(CHUNKS, EVENTS, said)]

    ok = (True, True)
    # stops a chunk after the backchannel: held through it, not through the chunks after
    assert outcomes(3) == [(True, False), ok, ok, ok]
    # stops in the aside, which is also the second chunk after the backchannel
    assert outcomes(4) == [(True, False), (False, False), ok, ok]
    assert outcomes(5) == [ok, (False, False), ok, ok]  # stops at the aside's end
    assert outcomes(8) == [ok, ok, (False, False), ok]  # speaks on over the interruption
    # stops a chunk early: the interruption is decided in chunk 8, so that is not counted
    # against it, but chunk 7 is the aside's second chunk after
    assert outcomes(7) == [ok, (True, False), ok, ok]
    assert outcomes(10) == [ok, ok, ok, (False, False)]  # answers the aside while waiting
    # a model's decisions cut short (a truncated example) count the events they reach
    assert len(event_outcomes(CHUNKS, EVENTS, AS_DATA[:6])) == 2


def test_what_is_not_checked_is_left_out() -> None:
    assert group_of({"kind": "backchannel", "action": "continue_speaking"}, False) is None
    assert group_of({"kind": "other_directed", "action": "await_input"}, True) is None
    assert group_of({"kind": "interruption", "action": "stop_output", "intent": "stop"},
                    True) == "interruption: stop"  # fmt: skip
    lines = event_lines(
        {
            "backchannel": {"events": 4, "right": 3, "right_after": 2},
            "interruption: stop": {"events": 2, "right": 1, "right_after": 1},
        }
    )
    assert lines == ["backchannel: held through 3 of 4, and the 2 chunks after in 2",
                     "interruption: stop: stopped in 1 of 2"]  # fmt: skip


def test_validate_by_event_counts_every_event_of_the_set(
    duplex_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from venus.cli import main
    from venus.train.config import TrainConfig
    from venus.train.loop import train

    ck = tmp_path / "ck"
    train(TrainConfig(steps=1, batch_size=2, warmup_steps=1, checkpoint_every=1,
                      validation=0.25, threads=1), duplex_set, ck, lambda _l: None)  # fmt: skip
    out = tmp_path / "figures.json"
    assert main(["validate", str(ck), "--data", str(duplex_set), "--by-event",
                 "--json", str(out)]) == 0  # fmt: skip
    counts = json.loads(out.read_text())["by_event"]
    want = 0
    for sample in (duplex_set / "samples").iterdir():
        t = json.loads((sample / "trajectory.json").read_text())
        in_reply = False
        first: dict[int, bool] = {}
        for chunk in t["chunks"]:
            for i in chunk["events"]:
                first.setdefault(i, in_reply)
            in_reply = chunk["decision"] == "speak"
        want += sum(group_of(t["events"][i], s) is not None for i, s in first.items())
    assert want > 0 and sum(c["events"] for c in counts.values()) == want
    for c in counts.values():
        assert 0 <= c["right_after"] <= c["right"] <= c["events"]
    said = capsys.readouterr().out
    assert "overlap events, teacher-forced:" in said
    assert all(line in said for line in event_lines(counts))
