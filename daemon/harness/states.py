"""The work-item lifecycle: every legal transition, in one table.

::

    Queued -> Running -> Completed | Failed -> Delivering -> Delivered
       |         |  \\__ Queued (an automatic retry)          |
       |         |                                           \\__ back to Completed | Failed
       +---------+--> Cancelled | Expired                         (playback cut before heard)

``Delivered``, ``Cancelled`` and ``Expired`` are terminal. A ``silent`` capability goes
``Completed | Failed -> Delivered`` when its result is recorded. ``Queued -> Failed``
covers what fails before it runs (no provider, the daemon restarted). ``Completed |
Failed -> Cancelled`` is a result revoked before it was said (revised, replaced,
retried); ``-> Expired`` a result gone stale (older than its freshness, its session
over).
"""

from __future__ import annotations

from enum import Enum

from venus.errors import HarnessError


class State(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    def __str__(self) -> str:
        return self.value


Q, R, C, F = State.QUEUED, State.RUNNING, State.COMPLETED, State.FAILED
DG, DD, X, E = State.DELIVERING, State.DELIVERED, State.CANCELLED, State.EXPIRED

TRANSITIONS: dict[State, frozenset[State]] = {
    Q: frozenset({R, F, X, E}),
    R: frozenset({C, F, X, E, Q}),
    C: frozenset({DG, DD, X, E}),
    F: frozenset({DG, DD, X, E}),
    DG: frozenset({DD, C, F, X, E}),
    DD: frozenset(),
    X: frozenset(),
    E: frozenset(),
}
TERMINAL = frozenset({DD, X, E})
HAS_RESULT = frozenset({C, F, DG, DD})  # states an item reaches only with its final result
UNFINISHED = frozenset({Q, R})  # what a restart must resume


def check(item_id: str, old: State, new: State) -> None:
    """Raise HarnessError unless ``old -> new`` is in the table."""
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[old])) or "nothing (terminal)"
        raise HarnessError(
            f"work item {item_id}: illegal transition {old.value} -> {new.value} "
            f"(from {old.value}: {allowed})"
        )
