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
starts at.

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
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from venus.datagen.domains import argument_errors
from venus.errors import VenusError

PLAN_VERSION = 1
SAMPLE_RATE_HZ = 16_000  # the input's rate (docs/timeline.md)
TIME_STEP_S = 0.001  # planned times are rounded to 1 ms
EPS_S = 1e-6

Group = Literal["video", "audio"]
Category = Literal["offline_understanding", "proactive_duplex", "delegation"]
Speaker = Literal["user", "assistant", "other", "background"]
Role = Literal[
    # user / other
    "question", "request", "backchannel", "aside", "interruption",
    # assistant
    "answer", "holding", "announcement", "acknowledgement", "proactive",
    # background
    "tv_line", "room_speech",
]  # fmt: skip
Distance = Literal["near", "far"]
Engine = Literal["espeak-ng", "flite"]
EventKind = Literal["backchannel", "other_directed", "background", "interruption"]
Intent = Literal["stop", "revise", "cancel_pending", "change_topic"]
Action = Literal[
    "continue_speaking", "await_input", "yield_floor", "stop_output", "revise_response"
]
Decision = Literal["retain", "cancel", "revise", "retry", "replace"]
Status = Literal["completed", "failed", "cancelled"]
NoiseKind = Literal["none", "white", "pink", "brown", "babble"]
Shape = Literal["circle", "square", "triangle", "sign"]
Colour = Literal["red", "green", "blue", "yellow", "orange", "purple", "black", "white"]
Backdrop = Literal["white", "light_grey", "beige", "light_blue"]

# (kind, intent) -> (actions, decisions) it may call for; the table in the module doc
LINKAGE: dict[tuple[EventKind, Intent | None], tuple[frozenset[Action], frozenset[Decision]]] = {
    ("backchannel", None): (frozenset({"continue_speaking"}), frozenset({"retain"})),
    ("other_directed", None): (
        frozenset({"continue_speaking", "await_input"}),
        frozenset({"retain"}),
    ),
    ("background", None): (frozenset({"continue_speaking"}), frozenset({"retain"})),
    ("interruption", "stop"): (frozenset({"stop_output"}), frozenset({"retain", "cancel"})),
    ("interruption", "revise"): (frozenset({"revise_response"}), frozenset({"revise", "retry"})),
    ("interruption", "cancel_pending"): (frozenset({"yield_floor"}), frozenset({"cancel"})),
    ("interruption", "change_topic"): (
        frozenset({"yield_floor"}),
        frozenset({"retain", "replace"}),
    ),
}
CUTTING: frozenset[Action] = frozenset({"stop_output", "yield_floor", "revise_response"})
EVENT_ROLES: dict[EventKind, tuple[frozenset[Speaker], frozenset[Role]]] = {
    "backchannel": (frozenset({"user"}), frozenset({"backchannel"})),
    "other_directed": (frozenset({"user", "other"}), frozenset({"aside"})),
    "background": (frozenset({"background"}), frozenset({"tv_line", "room_speech"})),
    "interruption": (frozenset({"user"}), frozenset({"interruption"})),
}
ASSISTANT_ROLES = frozenset({"answer", "holding", "announcement", "acknowledgement", "proactive"})

FILLERS = ("um", "uh", "er", "hmm")
PAUSE_MS = (50, 3000)
MARKER = re.compile(r"\{(\w+)\}|\[pause (\d+)\]|(--)")
ITEM_ID = re.compile(r"[0-9a-f]{8}")  # the short id the model sees and writes
VOICE_NAME = re.compile(r"[A-Za-z0-9_+.-]{1,64}")


class PlanError(VenusError):
    """A plan, or a plan read from JSON, is inconsistent; the message says where."""


def ms(t_s: float) -> float:
    """``t_s`` rounded to the plan's 1 ms step."""
    return round(round(t_s / TIME_STEP_S) * TIME_STEP_S, 3)


def snap(t_s: float, chunk_s: float) -> float:
    """The first chunk boundary at or after ``t_s``."""
    return ms(math.ceil(t_s / chunk_s - EPS_S) * chunk_s)


# --- paralinguistic markers ---------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """A piece of a turn's text: ``words`` to say, a ``filler`` word, a ``pause``
    (``pause_ms`` of silence) or a ``restart`` (a cut-off: stop abruptly, then go on)."""

    kind: Literal["words", "filler", "pause", "restart"]
    text: str = ""
    pause_ms: int = 0


def segments(text: str) -> tuple[Segment, ...]:
    """``text`` split at its markers; PlanError for a malformed one."""
    out: list[Segment] = []
    at = 0
    for m in MARKER.finditer(text):
        _words(text[at : m.start()], out)
        filler, pause, restart = m.groups()
        if filler is not None:
            if filler not in FILLERS:
                raise PlanError(f"unknown filler {{{filler}}} in {text!r}; use one of {FILLERS}")
            out.append(Segment("filler", filler))
        elif pause is not None:
            if not PAUSE_MS[0] <= int(pause) <= PAUSE_MS[1]:
                raise PlanError(f"[pause {pause}] in {text!r}: pauses are {PAUSE_MS} ms")
            out.append(Segment("pause", pause_ms=int(pause)))
        else:
            assert restart is not None
            out.append(Segment("restart"))
        at = m.end()
    _words(text[at:], out)
    return tuple(out)


def _words(piece: str, out: list[Segment]) -> None:
    if any(c in piece for c in "{}[]"):
        raise PlanError(f"stray brace or bracket in {piece!r}: markers are {{um}}, [pause N]")
    if piece.strip():
        out.append(Segment("words", " ".join(piece.split())))


def plain_text(text: str) -> str:
    """What ``text`` says, without markers and fillers."""
    return " ".join(s.text for s in segments(text) if s.kind == "words")


# --- the plan's parts ---------------------------------------------------------------------
@dataclass(frozen=True)
class Voice:
    """A synthesizer voice: ``name`` as the engine knows it (espeak-ng ``en-us+f3``,
    flite ``slt``), ``rate_wpm`` words per minute, ``pitch`` 0-99 (espeak-ng's scale; the
    synthesizer maps it for flite), ``gain_db`` applied to its speech."""

    engine: Engine
    name: str
    rate_wpm: int
    pitch: int
    gain_db: float

    def __post_init__(self) -> None:
        check_fields(self, PlanError)
        if not VOICE_NAME.fullmatch(self.name):
            raise PlanError(f"voice name {self.name!r}: use [A-Za-z0-9_+.-]{{1,64}}")
        if not 80 <= self.rate_wpm <= 400 or not 0 <= self.pitch <= 99:
            raise PlanError(f"voice {self.name}: rate_wpm 80-400 and pitch 0-99 only")
        if not -40.0 <= self.gain_db <= 20.0:
            raise PlanError(f"voice {self.name}: gain_db {self.gain_db} is outside -40..20")


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
    start of ``announce_turn``), None when it was cancelled before. ``result_text``: the
    capability's answer, its error message when failed, "" when cancelled (never injected).
    Cancelled by a ``{"cancel"}`` span in ``cancel_turn``, or by a later delegation that
    ``supersedes`` it."""

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

    def span(self) -> str:
        """The JSON the model writes between ``<|delegate|>`` and ``<|/delegate|>``."""
        if self.form == "retry":
            return json.dumps({"retry": self.supersedes})
        call: dict[str, Any] = {"name": self.capability, "arguments": dict(self.arguments)}
        if self.supersedes is not None:
            call["supersedes"] = self.supersedes
        return json.dumps(call, ensure_ascii=False)

    def cancel_span(self) -> str:
        return json.dumps({"cancel": self.item_id})

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

    def retime(self, durations_s: Sequence[float]) -> Plan:
        """This plan with measured turn durations: every start, cut, result time and the
        duration recomputed from the anchors. PlanError if the plan no longer holds
        (e.g. an interruption now ends after the turn it cuts): draw another attempt."""
        if len(durations_s) != len(self.turns):
            raise PlanError(f"{len(durations_s)} durations for {len(self.turns)} turns")
        turns = [replace(t, duration_s=ms(d)) for t, d in zip(self.turns, durations_s, strict=True)]
        timed = resolve(turns, self.events, self.chunk_s)
        delegations = tuple(
            replace(
                d, result_at_s=None if d.announce_turn is None else timed[d.announce_turn].start_s
            )
            for d in self.delegations
        )
        end_s = max(t.end_s for t in timed)
        duration_s = max(self.duration_s, snap(end_s + self.chunk_s, self.chunk_s))
        return replace(self, turns=tuple(timed), delegations=delegations, duration_s=duration_s)

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


# --- consistency of a whole plan ----------------------------------------------------------
def resolve(turns: Sequence[Turn], events: Sequence[OverlapEvent], chunk_s: float) -> list[Turn]:
    """``turns`` with ``start_s`` and ``cut_at_s`` computed from their anchors and
    durations, in order: a fraction is of the referenced turn's whole duration, ``after``
    uses its end (its cut, if any), and an interruption that cuts turn ``k`` sets its cut
    at the first boundary at or after the interruption's end."""
    cut_by = {
        e.over_turn: e.turn for e in events if e.action in CUTTING and e.over_turn is not None
    }
    out: list[Turn] = []
    for i, turn in enumerate(turns):
        a = turn.anchor
        for ref in (a.turn, *a.after):
            if ref is not None and not 0 <= ref < i:
                raise PlanError(f"turn {i}: its anchor names turn {ref}, not an earlier one")
        for ref in a.after:
            if cut_by.get(ref, -1) > i:
                raise PlanError(f"turn {i}: waits for turn {ref}, which a later turn cuts")
        if a.turn is None:
            start = a.offset_s
        else:
            ref_turn = out[a.turn]
            start = ref_turn.start_s + a.fraction * ref_turn.duration_s + a.offset_s
        for ref in a.after:
            start = max(start, out[ref].end_s + a.gap_s)
        out.append(
            replace(turn, start_s=snap(start, chunk_s) if a.snap else ms(start), cut_at_s=None)
        )
    for over, by in sorted(cut_by.items()):
        if not 0 <= over < by < len(out):
            raise PlanError(f"turn {by} cuts turn {over}: not an earlier turn")
        out[over] = replace(out[over], cut_at_s=snap(out[by].end_s, chunk_s))
    return out


def check_plan(plan: Plan) -> None:
    """Everything the dataclasses cannot check alone; PlanError naming the first problem."""
    turns, n = plan.turns, len(plan.turns)
    if (
        not plan.sample_id
        or min(plan.seed, plan.index, plan.attempt) < 0
        or not 0 < plan.chunk_s <= 10
    ):
        raise PlanError("plan: a sample_id, seed, index and attempt >= 0, and 0 < chunk_s <= 10")
    if n == 0:
        raise PlanError("plan: no turns")
    for i, (mine, due) in enumerate(
        zip(turns, resolve(turns, plan.events, plan.chunk_s), strict=True)
    ):
        if abs(mine.start_s - due.start_s) > EPS_S or mine.cut_at_s != due.cut_at_s:
            raise PlanError(
                f"turn {i}: start {mine.start_s} / cut {mine.cut_at_s} do not follow from its "
                f"anchor ({due.start_s} / {due.cut_at_s}); use Plan.retime"
            )
        if (mine.speaker == "assistant") != mine.anchor.snap:
            raise PlanError(f"turn {i}: assistant turns, and only they, start on the chunk grid")
        if (mine.speaker == "background") != (mine.distance == "far"):
            raise PlanError(f"turn {i}: background speech, and only it, is far")
        if mine.reply_to is not None and not 0 <= mine.reply_to < i:
            raise PlanError(f"turn {i}: reply_to {mine.reply_to} is not an earlier turn")
    for speaker in ("user", "assistant"):
        if len({t.voice for t in turns if t.speaker == speaker}) > 1:
            raise PlanError(f"plan: the {speaker} speaks with one voice per sample")
    end_s = max(t.end_s for t in turns)
    grid = plan.duration_s / plan.chunk_s
    if plan.duration_s < end_s or abs(grid - round(grid)) > EPS_S:
        raise PlanError(f"plan: duration_s {plan.duration_s} is not whole chunks after {end_s}")
    if plan.category == "offline_understanding" and (plan.events or plan.delegations):
        raise PlanError("plan: offline_understanding has no overlap events and no delegations")
    if (plan.category == "delegation") != bool(plan.delegations):
        raise PlanError("plan: delegations in, and only in, the delegation category")
    if (plan.group == "video") != (plan.scene is not None):
        raise PlanError("plan: a scene in, and only in, the video group")
    _check_events(plan)
    _check_delegations(plan)
    _check_overlaps(plan)
    if plan.scene is not None:
        for o in plan.scene.objects:
            for t in (o.from_s, o.until_s):
                if t is not None and abs(t / plan.chunk_s - round(t / plan.chunk_s)) > EPS_S:
                    raise PlanError(f"scene object {o.name}: times on the chunk grid only")
    at = [c.at_s for c in plan.acoustics.level_changes]
    if at != sorted(at) or any(not 0 <= t < plan.duration_s for t in at):
        raise PlanError("acoustics: level changes in order, within the sample")


def _assistant(plan: Plan, i: int | None, what: str) -> Turn:
    if i is None or not 0 <= i < len(plan.turns) or plan.turns[i].speaker != "assistant":
        raise PlanError(f"{what}: turn {i} is not an assistant turn")
    return plan.turns[i]


def _check_events(plan: Plan) -> None:
    by_id = {d.item_id: d for d in plan.delegations}
    seen: set[int] = set()
    for k, e in enumerate(plan.events):
        what = f"event {k} ({e.kind})"
        if not 0 <= e.turn < len(plan.turns) or e.turn in seen:
            raise PlanError(f"{what}: turn {e.turn} is not a turn of its own")
        seen.add(e.turn)
        turn = plan.turns[e.turn]
        speakers, roles = EVENT_ROLES[e.kind]
        if turn.speaker not in speakers or turn.role not in roles:
            raise PlanError(f"{what}: its turn is a {turn.speaker} {turn.role}")
        if e.over_turn is not None:
            over = _assistant(plan, e.over_turn, what)
            if turn.anchor.turn != e.over_turn or not over.start_s <= turn.start_s < over.end_s:
                raise PlanError(f"{what}: does not start during turn {e.over_turn}")
            natural_s = ms(over.start_s + over.duration_s)
            if e.action in CUTTING and not turn.start_s < (over.cut_at_s or 0) < natural_s:
                raise PlanError(f"{what}: ends after the turn it cuts; draw another attempt")
        if e.response_turn is not None:
            response = _assistant(plan, e.response_turn, what)
            if e.response_turn < e.turn or e.turn not in (
                response.anchor.turn,
                *response.anchor.after,
            ):
                raise PlanError(f"{what}: its response turn is not anchored after it")
        if e.delegation is None:
            continue
        d = by_id.get(e.delegation)
        if d is None:
            raise PlanError(f"{what}: no delegation {e.delegation}")
        after = [x for x in plan.delegations if x.supersedes == d.item_id]
        decision = e.delegation_decision
        ok = {
            "retain": True,
            "cancel": d.status == "cancelled" and d.cancel_turn == e.response_turn,
            "revise": len(after) == 1 and after[0].capability == d.capability,
            "replace": len(after) == 1 and after[0].capability != d.capability,
            "retry": d.status == "failed" and len(after) == 1 and after[0].form == "retry",
        }[decision]
        if decision in ("revise", "replace", "retry"):
            ok = ok and after[0].call_turn == e.response_turn
        if not ok:
            raise PlanError(f"{what}: the delegations do not carry out {decision} of {d.item_id}")
    for i, t in enumerate(plan.turns):
        if (
            t.role in ("backchannel", "aside", "interruption", "tv_line", "room_speech")
            and i not in seen
        ):
            raise PlanError(f"turn {i} ({t.role}) belongs to no overlap event")


def _check_delegations(plan: Plan) -> None:
    ids = [d.item_id for d in plan.delegations]
    if len(set(ids)) != len(ids):
        raise PlanError(f"delegation ids repeat: {ids}")
    by_id = {d.item_id: d for d in plan.delegations}
    for k, d in enumerate(plan.delegations):
        what = f"delegation {d.item_id}"
        errors = argument_errors(d.capability, d.arguments)
        if errors:
            raise PlanError(f"{what}: {d.capability} arguments: {'; '.join(errors)}")
        call_s = _assistant(plan, d.call_turn, what).start_s
        ready_s = call_s + d.result_after_s
        if d.announce_turn is not None:
            announce = _assistant(plan, d.announce_turn, what)
            if d.announce_turn <= d.call_turn or d.result_at_s != announce.start_s:
                raise PlanError(f"{what}: result_at_s is the start of a later announce turn")
            if announce.start_s < ready_s - EPS_S:
                raise PlanError(f"{what}: announced before its result is ready")
        superseded = [x for x in plan.delegations if x.supersedes == d.item_id]
        if d.status == "cancelled":
            if (d.cancel_turn is None) == (not superseded):
                raise PlanError(f"{what}: cancelled by a cancel span or a supersession, one")
            by_turn = d.cancel_turn if d.cancel_turn is not None else superseded[0].call_turn
            if _assistant(plan, by_turn, what).start_s >= ready_s - EPS_S or by_turn <= d.call_turn:
                raise PlanError(f"{what}: cancelled after its result was ready")
        if d.supersedes is not None:
            old = by_id.get(d.supersedes)
            if old is None or ids.index(old.item_id) >= k:
                raise PlanError(f"{what}: supersedes {d.supersedes}, not an earlier item")
            if d.form == "retry" and (
                old.status != "failed"
                or (old.capability, old.arguments) != (d.capability, d.arguments)
            ):
                raise PlanError(f"{what}: a retry repeats the call of a failed item")
            if d.form == "call" and old.status != "cancelled":
                raise PlanError(f"{what}: a revision or replacement cancels the item it supersedes")


def _check_overlaps(plan: Plan) -> None:
    """Turns overlap only where an event says so (an event turn over its assistant turn)."""
    allowed = {(e.over_turn, e.turn) for e in plan.events if e.over_turn is not None}
    spans = [(t.start_s, t.end_s, i) for i, t in enumerate(plan.turns)]
    spans.sort()
    for a, (_, end_a, i) in enumerate(spans):
        for start_b, _, j in spans[a + 1 :]:
            if start_b >= end_a - EPS_S:
                break
            if (min(i, j), max(i, j)) not in allowed:
                raise PlanError(f"turns {min(i, j)} and {max(i, j)} overlap, and no event says so")


# --- typed fields and JSON ------------------------------------------------------------------
_HINTS: dict[type, dict[str, Any]] = {}
T = TypeVar("T")


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fits(value: object, hint: Any) -> bool:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in args)
    if origin is Literal:
        return isinstance(value, str) and value in args
    if origin is tuple:
        return isinstance(value, tuple) and all(_fits(v, args[0]) for v in value)
    if origin is Mapping:
        return isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
    if hint is float:
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def check_fields(obj: object, error: type[Exception]) -> None:
    """Raise ``error`` naming the first field of dataclass ``obj`` whose value does not
    fit its annotation (Literal choices, element types, finite floats, no bools as numbers)."""
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        hint = _hints(type(obj))[f.name]
        if not _fits(value, hint):
            shown = str(hint).replace("typing.", "").replace("venus.datagen.plan.", "")
            raise error(f"{type(obj).__name__}.{f.name}: {value!r} is not {shown}")


def to_dict(value: object) -> object:
    """A dataclass tree as JSON data: field order kept, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [to_dict(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_dict(v) for k, v in value.items()}
    return value


def from_dict(cls: type[T], data: object, where: str, error: type[Exception]) -> T:
    """Build dataclass ``cls`` from JSON data: unknown and missing keys are errors naming
    their path (``plan.turns[3].voice.pitch``), and every value is checked."""
    if not isinstance(data, dict):
        raise error(f"{where}: expected an object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            raise error(f"{where}.{key}: unknown key")
    kwargs: dict[str, Any] = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING:
                raise error(f"{where}.{name}: missing")
            continue
        kwargs[name] = _decode(data[name], _hints(cls)[name], f"{where}.{name}", error)
    try:
        return cls(**kwargs)
    except error as e:
        raise error(f"{where}: {e}") from e


def _decode(value: object, hint: Any, where: str, error: type[Exception]) -> object:
    origin, args = get_origin(hint), get_args(hint)
    if isinstance(hint, type) and is_dataclass(hint):
        return from_dict(hint, value, where, error)
    if origin is tuple and isinstance(value, list):
        return tuple(_decode(v, args[0], f"{where}[{i}]", error) for i, v in enumerate(value))
    if origin in (Union, types.UnionType) and value is not None:
        arms = [a for a in args if a is not type(None)]
        if len(arms) == 1:
            return _decode(value, arms[0], where, error)
    return value
