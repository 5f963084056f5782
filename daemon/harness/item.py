"""A work item: one delegation, bound to the session that asked for it."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from venus.daemon.harness.states import State


def new_item_id() -> str:
    return uuid.uuid4().hex


def seeded_item_ids(seed: int) -> Callable[[], str]:
    """Item ids drawn from ``seed``: an offline run (``venus demo``, ``venus eval
    delegation``) makes the same ids each time, so the results it injects, which name
    their item, and all that follows from them are the same too."""
    rng = random.Random(seed)
    return lambda: uuid.UUID(int=rng.getrandbits(128), version=4).hex


@dataclass(frozen=True)
class WorkItem:
    id: str
    session_id: str
    site_id: str
    capability: str
    version: str  # of the capability's contract when captured
    arguments: Mapping[str, Any]
    attempt: int  # dispatches so far (1 after the first)
    deadline_s: float  # time.time() after which it is useless (created + freshness)
    state: State
    created_at: float  # time.time()
    updated_at: float
    evidence: str | None = None  # sha256 of the evidence snapshot
    supersedes: str | None = None  # the item this one revised, replaced or retried
    delivering_from: State | None = None  # Completed / Failed while Delivering
    timeout_s: float = 30.0  # from the contract
    freshness_s: float = 300.0  # from the contract
    idempotent: bool = False
    deliver: str = "when_idle"
    chunk_index: int = -1  # the frontend chunk that delegated it
    text: str = ""  # the delegation span as the model wrote it
    extra: Mapping[str, Any] = field(default_factory=dict)
