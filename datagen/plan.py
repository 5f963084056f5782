"""The scenario plan: what one sample says, who says it, when, and what it calls for.

Every later stage reads a ``Plan`` (synthesis, acoustics, frames, alignment, outputs), so
it is the contract of the pipeline: frozen dataclasses, times in seconds on the sample's
own clock (t = 0 is the first input sample), every field checked when it is built, and
``to_json`` / ``from_json`` that refuse unknown or missing keys.

**Times are planned, then measured.** A turn's ``duration_s`` is estimated from its words
and speaking rate; the synthesized audio is shorter or longer. So each turn also holds an
``Anchor``, its placement relative to earlier turns ("starts 40% into turn 3", "after turn 5
ends, plus 0.6 s", "at the chunk boundary after the result is ready"), and
``Plan.retime(durations_s)`` recomputes every start, cut and result time from measured
durations with the same rule the planner used (``resolve``). Never shift times by hand.

**The chunk grid.** The assistant speaks only from chunk boundaries (multiples of
``chunk_s``): the speech decided at a boundary is heard from it (docs/timeline.md).
Assistant turns are ``snap``ped there, a cut takes effect at the first boundary at or
after the interruption ends, and a result is injected at the boundary its announcing turn
starts at, or, offered early (``delegation.early_offer_p``), at the first boundary after
it is ready, while the user speaks and the assistant listens (``early_offer_s``): the
assistant holds it until the announcement. Early is ``result_at_s`` before the
announcement's start; ``retime`` keeps it early where the rule still holds.

**Event linkage.** Every overlap event names the action it calls for and the delegation
decision, consistent by construction (checked in ``OverlapEvent.__post_init__``)::

    kind            intent          action                          decision
    backchannel     -               continue_speaking               retain
    other_directed  -               continue_speaking (over speech) retain
                                    await_input (assistant silent)
    background      -               continue_speaking               retain
    interruption    stop            stop_output                     retain | cancel
    interruption    revise          revise_response                 revise | retry
    interruption    cancel_pending  yield_floor                     cancel
    interruption    change_topic    yield_floor                     retain | replace

retry under ``revise``: "try again" said over the announcement of a failed item. A cut
(``stop_output``, ``yield_floor``, ``revise_response``) ends the overlapped assistant turn at
the first boundary at or after the interruption ends. A decision other than retain is
written in the event's ``response_turn`` (an assistant turn): cancel as ``{"cancel": id}``,
revise / replace / retry as the superseding ``Delegation``'s span (``Delegation.span``).

**Paralinguistic markers** in a turn's ``text`` (user, other and background turns only;
assistant text is clean, it is the model's target):

- ``{um}`` ``{uh}`` ``{er}`` ``{hmm}``: a filler, spoken as a word (``FILLERS``);
- ``[pause 400]``: a silence of 400 ms (50 to 3000);
- ``--``: a self-interruption: the words before it are cut off and restarted
  ("the kitchen -- the living room light").

``segments(text)`` splits a text into words, fillers and pauses for the synthesizer;
``plain_text(text)`` is what was said without the markers (fillers dropped).

**Where things live.** This module holds ``Plan`` and re-exports the rest; import from
here. The vocabulary (constants, field types, linkage tables, ``PlanError``, ``ms``,
``snap``) is in ``plan_types``, the markers in ``plan_markers``, the other dataclasses in
``plan_parts``, ``resolve`` and ``check_plan`` in ``plan_check``, and the typed-field and
JSON helpers in ``fields``. Imports run one way: plan -> plan_check -> plan_parts ->
plan_markers -> plan_types, with ``fields`` below plan and plan_parts (``plan_check``
names ``Plan`` for type checking only, so ``Plan`` can call it when it is built).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from venus.datagen.fields import check_fields, from_dict, to_dict
from venus.datagen.plan_check import check_plan, early_offer_s, resolve
from venus.datagen.plan_markers import Segment, plain_text, segments
from venus.datagen.plan_parts import (
    Acoustics,
    Anchor,
    Delegation,
    LevelChange,
    OverlapEvent,
    Scene,
    SceneObject,
    Turn,
    Voice,
)
from venus.datagen.plan_types import (
    ASSISTANT_ROLES,
    CUTTING,
    EPS_S,
    EVENT_ROLES,
    FILLERS,
    ITEM_ID,
    LINKAGE,
    MARKER,
    PAUSE_MS,
    PLAN_VERSION,
    SAMPLE_RATE_HZ,
    TIME_STEP_S,
    VOICE_NAME,
    Action,
    Backdrop,
    Category,
    Colour,
    Decision,
    Distance,
    Engine,
    EventKind,
    Group,
    Intent,
    NoiseKind,
    PlanError,
    Role,
    Shape,
    Speaker,
    Status,
    ms,
    snap,
)

__all__ = [
    "ASSISTANT_ROLES", "CUTTING", "EPS_S", "EVENT_ROLES", "FILLERS", "ITEM_ID", "LINKAGE",
    "MARKER", "PAUSE_MS", "PLAN_VERSION", "SAMPLE_RATE_HZ", "TIME_STEP_S", "VOICE_NAME",
    "Acoustics", "Action", "Anchor", "Backdrop", "Category", "Colour", "Decision",
    "Delegation", "Distance", "Engine", "EventKind", "Group", "Intent", "LevelChange",
    "NoiseKind", "OverlapEvent", "Plan", "PlanError", "Role", "Scene", "SceneObject",
    "Segment", "Shape", "Speaker", "Status", "Turn", "Voice", "check_fields", "check_plan",
    "early_offer_s", "from_dict", "ms", "plain_text", "resolve", "segments", "snap", "to_dict",
]  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """One sample. ``seed`` / ``index`` / ``attempt`` say how it was drawn (``plan_sample``);
    ``duration_s`` is whole chunks, at least the last turn's end."""

    sample_id: str
    seed: int
    index: int
    attempt: int
    group: Group
    category: Category
    duration_s: float
    chunk_s: float
    turns: tuple[Turn, ...]
    events: tuple[OverlapEvent, ...]
    delegations: tuple[Delegation, ...]
    scene: Scene | None
    acoustics: Acoustics
    version: int = PLAN_VERSION

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        check_plan(self)

    def event_window_s(self, event: OverlapEvent) -> tuple[float, float]:
        """The planned overlap window ``[start_s, end_s]``: the event turn's extent."""
        turn = self.turns[event.turn]
        return turn.start_s, turn.end_s

    def delegate_span(self, d: Delegation) -> str:
        """The span ``d`` is written as (``Delegation.span``, with what it supersedes)."""
        old = next((x for x in self.delegations if x.item_id == d.supersedes), None)
        return d.span(old.capability if old is not None and d.form == "call" else None)

    def retime(self, durations_s: Sequence[float]) -> Plan:
        """This plan with measured turn durations: every start, cut, result time and the
        duration recomputed from the anchors. PlanError if the plan no longer holds
        (e.g. an interruption now ends after the turn it cuts): draw another attempt."""
        if len(durations_s) != len(self.turns):
            raise PlanError(f"{len(durations_s)} durations for {len(self.turns)} turns")
        turns = [replace(t, duration_s=ms(d)) for t, d in zip(self.turns, durations_s, strict=True)]
        timed = resolve(turns, self.events, self.chunk_s)
        delegations = tuple(
            replace(d, result_at_s=self._result_at(d, timed)) for d in self.delegations
        )
        end_s = max(t.end_s for t in timed)
        duration_s = max(self.duration_s, snap(end_s + self.chunk_s, self.chunk_s))
        return replace(self, turns=tuple(timed), delegations=delegations, duration_s=duration_s)

    def _result_at(self, d: Delegation, timed: Sequence[Turn]) -> float | None:
        """``d``'s result time on the ``timed`` turns: its announcement's start, or, offered
        early here, its early boundary there while the rule still holds."""
        if d.announce_turn is None or d.result_at_s is None:
            return None
        announce_s = timed[d.announce_turn].start_s
        if d.result_at_s >= self.turns[d.announce_turn].start_s - EPS_S:
            return announce_s
        early_s = early_offer_s(timed, d, self.chunk_s)
        return announce_s if early_s is None else early_s

    def to_dict(self) -> dict[str, Any]:
        out = to_dict(self)
        assert isinstance(out, dict)
        return out

    def to_json(self) -> str:
        """Compact, key order fixed: the same plan always gives the same bytes."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: object) -> Plan:
        version = data.get("version") if isinstance(data, dict) else None
        if version != PLAN_VERSION:
            raise PlanError(f"plan version {version!r}; this venus reads {PLAN_VERSION}")
        return from_dict(cls, data, "plan", PlanError)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise PlanError(f"plan: not JSON ({e})") from e
        return cls.from_dict(data)
