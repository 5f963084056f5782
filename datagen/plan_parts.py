"""The parts of a plan: frozen dataclasses for voices, anchors, turns, overlap events,
delegations, the scene and the acoustic conditions (``Plan`` itself, which holds them,
is in ``venus.datagen.plan``).

Each checks its own fields when it is built (``check_fields`` and its ``__post_init__``);
what needs the whole plan (turn references, timing, linkage across parts) is checked by
``venus.datagen.plan_check``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from venus.datagen.fields import check_fields
from venus.datagen.plan_markers import plain_text
from venus.datagen.plan_types import (
    ASSISTANT_ROLES,
    EPS_S,
    ITEM_ID,
    LINKAGE,
    MARKER,
    VOICE_NAME,
    Action,
    Backdrop,
    Colour,
    Decision,
    Distance,
    Engine,
    EventKind,
    Intent,
    NoiseKind,
    PlanError,
    Role,
    Shape,
    Speaker,
    Status,
    ms,
)
from venus.datagen.tts import FORMANT


@dataclass(frozen=True)
class Voice:
    """A synthesizer voice: ``name`` as the engine knows it (espeak-ng ``en-us+f3``,
    flite ``slt``), ``rate_wpm`` words per minute, ``pitch`` 0-99 (espeak-ng's scale; the
    synthesizer maps it for flite), ``gain_db`` applied to its speech, ``formant`` its
    formants scaled (``tts.Voice.formant``; 1.0, the voice's own, in plans written before
    it)."""

    engine: Engine
    name: str
    rate_wpm: int
    pitch: int
    gain_db: float
    formant: float = 1.0

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        if not VOICE_NAME.fullmatch(self.name):
            raise PlanError(f"voice name {self.name!r}: use [A-Za-z0-9_+.-]{{1,64}}")
        if not 80 <= self.rate_wpm <= 400 or not 0 <= self.pitch <= 99:
            raise PlanError(f"voice {self.name}: rate_wpm 80-400 and pitch 0-99 only")
        if not -40.0 <= self.gain_db <= 20.0:
            raise PlanError(f"voice {self.name}: gain_db {self.gain_db} is outside -40..20")
        if not FORMANT[0] <= self.formant <= FORMANT[1]:
            raise PlanError(
                f"voice {self.name}: formant {self.formant} is outside {FORMANT[0]}..{FORMANT[1]}"
            )


@dataclass(frozen=True)
class Anchor:
    """Where a turn starts, relative to earlier turns (see ``resolve``): at
    ``fraction`` (0-1) into turn ``turn`` plus ``offset_s`` (``turn`` None: ``offset_s``
    from t = 0), and no earlier than ``gap_s`` after the end of each turn in ``after``;
    ``snap``: then on the next chunk boundary (assistant turns)."""

    turn: int | None
    fraction: float
    offset_s: float
    after: tuple[int, ...]
    gap_s: float
    snap: bool

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        if not 0.0 <= self.fraction <= 1.0 or self.offset_s < 0 or self.gap_s < 0:
            raise PlanError(f"anchor {self}: fraction 0-1, offset_s and gap_s >= 0")


@dataclass(frozen=True)
class Turn:
    """One utterance. ``start_s`` / ``duration_s`` are planned (``anchor`` says how the
    start follows from earlier turns); ``cut_at_s``: an assistant turn cut by an
    interruption stops there (a chunk boundary). ``reply_to``: the turn it answers.
    ``distance``: far turns (background speech) are rendered distant and quieter."""

    speaker: Speaker
    role: Role
    text: str
    voice: Voice
    anchor: Anchor
    start_s: float
    duration_s: float
    cut_at_s: float | None
    distance: Distance
    reply_to: int | None

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        if (self.speaker == "assistant") != (self.role in ASSISTANT_ROLES):
            raise PlanError(f"a {self.speaker} turn cannot have the role {self.role}")
        if self.speaker == "assistant" and MARKER.search(self.text):
            raise PlanError(f"assistant text is a target; no markers: {self.text!r}")
        if not plain_text(self.text):
            raise PlanError(f"a turn says nothing: {self.text!r}")
        if self.start_s < 0 or self.duration_s <= 0:
            raise PlanError(f"turn {self.text!r}: start_s >= 0 and duration_s > 0")

    @property
    def end_s(self) -> float:
        """Where its speech ends: the cut, or the end of the whole text."""
        return self.cut_at_s if self.cut_at_s is not None else ms(self.start_s + self.duration_s)


@dataclass(frozen=True)
class OverlapEvent:
    """Speech over (or, for ``await_input``, beside) the assistant, by function. ``turn``
    is the event's own turn; ``over_turn`` the assistant turn it overlaps (None: the
    assistant is silent, waiting); ``response_turn`` the assistant turn that carries out
    the action and decision (None: nothing to say); ``delegation`` the item concerned."""

    kind: EventKind
    turn: int
    over_turn: int | None
    intent: Intent | None
    action: Action
    delegation_decision: Decision
    delegation: str | None
    response_turn: int | None

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        key = (self.kind, self.intent)
        if key not in LINKAGE:
            raise PlanError(f"event {self.kind} with intent {self.intent}: interruptions only")
        actions, decisions = LINKAGE[key]
        what = f"{self.kind}" + (f"/{self.intent}" if self.intent else "")
        if self.action not in actions or self.delegation_decision not in decisions:
            raise PlanError(
                f"{what} calls for {' or '.join(sorted(actions))} with "
                f"{' or '.join(sorted(decisions))}, not {self.action} + {self.delegation_decision}"
            )
        if (self.action == "await_input") != (self.over_turn is None):
            raise PlanError(f"{what}: await_input exactly when it overlaps no assistant turn")
        if self.delegation_decision != "retain" and self.delegation is None:
            raise PlanError(f"{what}: {self.delegation_decision} needs the delegation it concerns")
        if self.delegation_decision != "retain" and self.response_turn is None:
            raise PlanError(f"{what}: {self.delegation_decision} is written in a response turn")


@dataclass(frozen=True)
class Delegation:
    """One work item the assistant creates. ``span`` is what the model writes at the start
    of ``call_turn``'s first chunk. ``result_after_s``: when the result is ready, after the
    call (the capability's latency); ``result_at_s``: the boundary it is injected at (the
    start of ``announce_turn``, or earlier when it is offered while the user speaks and
    held until the announcement: ``plan_check.early_offer_s``), None when it was cancelled
    before. ``result_text``: the capability's answer, its error message when failed, ""
    when cancelled (never injected). Cancelled by a ``{"cancel"}`` span in
    ``cancel_turn``, or by a later delegation that ``supersedes`` it."""

    item_id: str
    capability: str
    arguments: Mapping[str, Any]
    form: Literal["call", "retry"]
    supersedes: str | None
    call_turn: int
    result_after_s: float
    result_at_s: float | None
    status: Status
    result_text: str
    cancel_turn: int | None
    announce_turn: int | None

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        for ref in (self.item_id, self.supersedes):
            if ref is not None and not ITEM_ID.fullmatch(ref):
                raise PlanError(f"item id {ref!r}: 8 lowercase hex digits")
        if (self.form == "retry") and self.supersedes is None:
            raise PlanError(f"retry {self.item_id} names the item it retries in supersedes")
        if (self.status == "cancelled") != (self.result_at_s is None):
            raise PlanError(f"{self.item_id}: result_at_s is None exactly when cancelled")
        if (self.status == "cancelled") == (self.announce_turn is not None):
            raise PlanError(f"{self.item_id}: an announce_turn exactly when not cancelled")
        if self.cancel_turn is not None and self.status != "cancelled":
            raise PlanError(f"{self.item_id}: a cancel_turn but status {self.status}")
        if self.result_after_s <= 0:
            raise PlanError(f"{self.item_id}: result_after_s must be > 0")

    def span(self, superseded_capability: str | None = None) -> str:
        """The JSON the model writes between ``<|delegate|>`` and ``<|/delegate|>``.

        The model sees an item's id only in its result, so it names work still pending
        by its capability (the harness resolves that to the session's newest item of it
        not yet said): a revision or replacement supersedes ``superseded_capability``;
        a retry names the failed item by the id its result showed."""
        if self.form == "retry":
            return json.dumps({"retry": self.supersedes})
        call: dict[str, Any] = {"name": self.capability, "arguments": dict(self.arguments)}
        if self.supersedes is not None:
            if superseded_capability is None:
                raise PlanError(f"delegation {self.item_id}: name what it supersedes")
            call["supersedes"] = superseded_capability
        return json.dumps(call, ensure_ascii=False)

    def cancel_span(self) -> str:
        """``{"cancel": capability}``: cancelled work is always still pending."""
        return json.dumps({"cancel": self.capability})

    def injected(self) -> str:
        """The ``<|result|>`` text the harness injects (HarnessCore's offer)."""
        status = "completed" if self.status == "completed" else "failed"
        doc = {"item": self.item_id, "capability": self.capability, "status": status}
        return json.dumps({**doc, "result": self.result_text}, ensure_ascii=False)


@dataclass(frozen=True)
class SceneObject:
    """A drawn object: ``x``, ``y`` its centre and ``size`` its extent, as fractions of
    the frame's width, height and shorter side; ``text`` written on it ("" none); shown
    over ``[from_s, until_s)`` (None: to the end), both on the chunk grid."""

    name: str
    shape: Shape
    colour: Colour
    x: float
    y: float
    size: float
    text: str
    from_s: float
    until_s: float | None

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        if not (0 < self.x < 1 and 0 < self.y < 1 and 0 < self.size < 0.5):
            raise PlanError(f"object {self.name}: x, y in (0, 1) and size in (0, 0.5)")
        if self.until_s is not None and self.until_s <= self.from_s:
            raise PlanError(f"object {self.name}: until_s must be after from_s")

    def visible(self, t_s: float) -> bool:
        return self.from_s <= t_s + EPS_S and (self.until_s is None or t_s + EPS_S < self.until_s)


@dataclass(frozen=True)
class Scene:
    """What the camera sees (video group): one frame per chunk, chunk k showing
    ``visible(k * chunk_s)`` (the scene only changes on chunk starts)."""

    width_px: int
    height_px: int
    backdrop: Backdrop
    objects: tuple[SceneObject, ...]

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        names = [o.name for o in self.objects]
        if len(set(names)) != len(names):
            raise PlanError(f"scene object names repeat: {names}")

    def visible(self, t_s: float) -> tuple[SceneObject, ...]:
        return tuple(o for o in self.objects if o.visible(t_s))


@dataclass(frozen=True)
class LevelChange:
    """From ``at_s`` on, the whole input is ``gain_db`` louder (the user moved)."""

    at_s: float
    gain_db: float

    def __post_init__(self) -> None:
        check_fields(self, PlanError)


@dataclass(frozen=True)
class Acoustics:
    """The input's conditions: ``noise`` at ``snr_db`` against the near speech, room
    reverberation (``rt60_s``, None: dry), far turns ``far_gain_db`` quieter and always
    reverberant (``far_rt60_s``), and level changes over time."""

    noise: NoiseKind
    snr_db: float
    rt60_s: float | None
    far_gain_db: float
    far_rt60_s: float
    level_changes: tuple[LevelChange, ...]

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        for rt60 in (self.rt60_s, self.far_rt60_s):
            if rt60 is not None and not 0.05 <= rt60 <= 3.0:
                raise PlanError(f"acoustics: RT60 {rt60} s is outside 0.05..3")
        if self.far_gain_db > 0:
            raise PlanError("acoustics: far_gain_db must be <= 0 (far speech is quieter)")
