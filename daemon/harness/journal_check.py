"""The journal's consistency rules for one work item (``Journal.check`` applies them)."""

from __future__ import annotations

from venus.daemon.harness import states
from venus.daemon.harness.states import HAS_RESULT, State


def check_item(
    item_id: str,
    state: str,
    came_from: str | None,
    history: list[tuple[str | None, str]],
    results: int,
) -> list[str]:
    """Problems of one item, from its row (state, delivering_from), its transitions in
    order and its number of final results; empty when sound."""
    known = {s.value for s in State}
    out: list[str] = []
    if state not in known:
        return [f"work item {item_id}: unknown state {state!r}"]
    if not history:
        return [f"work item {item_id}: no transitions"]
    if history[-1][1] != state:
        out.append(
            f"work item {item_id}: state {state} but its last transition is to {history[-1][1]}"
        )
    previous: str | None = None
    for old, new in history:
        if old != previous:
            out.append(f"work item {item_id}: transition {old} -> {new} follows {previous}")
        if new not in known or (old is not None and old not in known):
            out.append(f"work item {item_id}: transition {old} -> {new} names an unknown state")
        elif old is None and new != State.QUEUED.value:
            out.append(f"work item {item_id}: its first transition is to {new}, not queued")
        elif old is not None and State(new) not in states.TRANSITIONS[State(old)]:
            out.append(f"work item {item_id}: illegal transition {old} -> {new}")
        previous = new
    if results > 1:
        out.append(f"work item {item_id}: {results} final results")
    if State(state) in HAS_RESULT and not results:
        out.append(f"work item {item_id}: {state} without a final result")
    if (came_from is not None) != (state == State.DELIVERING.value):
        out.append(f"work item {item_id}: delivering_from {came_from} in state {state}")
    return out
