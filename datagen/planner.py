"""The seeded scenario planner: ``plan_sample(config, index, seed) -> Plan``.

Deterministic: everything is drawn from one ``numpy.random.Generator`` seeded from
``SeedSequence([seed, index, attempt])`` (never global state), so a sample depends only on
the config, the seed, its index and the attempt. ``attempt`` is for the realization: when
measured durations break a plan (``Plan.retime`` raises), it draws attempt 1, 2, ...

A sample's group and category follow the config's mix (``mix.sampling``: ``random`` draws
them; ``stratified`` takes them from an R2 low-discrepancy sequence shifted by the seed, so
every prefix of the set is close to the ratios). Then, by category:

- ``offline_understanding``: one to three questions, answered (about the scene in the
  video group, general knowledge in the audio group); no overlap, no delegation.
- ``proactive_duplex``: long answers with overlap events over them (backchannels, asides,
  TV, interruptions that stop or change the topic); in the video group, maybe a "tell me
  when a red circle shows up" that the assistant answers unprompted when it appears.
- ``delegation``: requests that need a capability: the assistant says it is on it and
  writes the call, the result arrives later and is announced; events over the holding
  line act on the pending work (stop, revise, cancel, change topic, retain or replace),
  failures are announced or retried, and the user may talk to someone else meanwhile.

Times come from word counts and speaking rates (``estimate_s``) through the plan's anchors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import numpy as np

from venus.datagen import domains as dom
from venus.datagen.config import GenerationConfig
from venus.datagen.domains import pick
from venus.datagen.plan import (
    CUTTING,
    FILLERS,
    Acoustics,
    Action,
    Anchor,
    Backdrop,
    Category,
    Colour,
    Decision,
    Delegation,
    Distance,
    EventKind,
    Group,
    Intent,
    LevelChange,
    OverlapEvent,
    Plan,
    Role,
    Scene,
    SceneObject,
    Shape,
    Speaker,
    Turn,
    Voice,
    ms,
    resolve,
    segments,
    snap,
)

ANSWER_GAP_S = 0.2  # a question's end is heard for a moment before the answer's boundary
IDLE_GAP_S = 0.8  # a result waits for a chunk with < 20% speech (the frontend's idle rule)
TURN_GAP_S = (0.4, 1.5)  # the user's pause before speaking again
LEAD_S = (0.5, 2.0)  # silence before the first turn
TAIL_S = (1.0, 2.0)  # silence after the last
EVENT_GAP_S = 0.3  # between two events over one turn
PENDING_MARGIN_S = 2.0  # work the user acts on is still pending this much past the act
CUT_MARGIN_S = 0.5  # a cut falls at least this long before the turn's natural end
R2 = 1.32471795724474602596  # the plastic number: the R2 low-discrepancy sequence
SLOW = 9.0  # s: capabilities whose results can take this long can be acted on while pending
COLOURS: tuple[Colour, ...] = ("red", "green", "blue", "yellow", "orange", "purple", "black")
SHAPES: tuple[Shape, ...] = ("circle", "square", "triangle")
BACKDROPS: tuple[Backdrop, ...] = ("white", "light_grey", "beige", "light_blue")
EVENT_ROLES = frozenset({"backchannel", "aside", "interruption", "tv_line", "room_speech"})
PLACES = ("in the top left corner", "at the top", "in the top right corner", "on the left",
          "in the middle", "on the right", "in the bottom left corner", "at the bottom",
          "in the bottom right corner")  # fmt: skip
T = TypeVar("T")
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def plan_sample(config: GenerationConfig, index: int, seed: int, attempt: int = 0) -> Plan:
    """The plan of sample ``index`` of the set drawn with ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, index, attempt]))
    group, category = draw_mix(config, index, seed, rng)
    draft = _Draft(config, rng, group)
    target_s = float(rng.uniform(config.duration.min_s, config.duration.max_s))
    build = {"offline_understanding": draft.understanding, "proactive_duplex": draft.duplex,
             "delegation": draft.delegation}[category]  # fmt: skip
    build(target_s)
    return draft.finish(f"{seed}-{index:06d}", seed, index, attempt, category)


def draw_mix(
    config: GenerationConfig, index: int, seed: int, rng: np.random.Generator
) -> tuple[Group, Category]:
    """Sample ``index``'s group and category (see the module doc)."""
    if config.mix.sampling == "random":
        u, v = float(rng.random()), float(rng.random())
    else:
        shift = np.random.default_rng(np.random.SeedSequence([seed])).random(2)
        u = float((shift[0] + (index + 1) / R2) % 1.0)
        v = float((shift[1] + (index + 1) / R2**2) % 1.0)
    group = _inverse(config.mix.group.ratios(), u)
    return cast(Group, group), cast(Category, _inverse(config.mix.category.ratios(), v))


def _inverse(ratios: dict[str, float], u: float) -> str:
    total = 0.0
    for name, p in ratios.items():
        total += p
        if u < total:
            return name
    return [name for name, p in ratios.items() if p > 0][-1]  # u within rounding of 1


def estimate_s(text: str, voice: Voice) -> float:
    """How long ``text`` takes to say: words (fillers count) at the voice's rate, pauses."""
    words = pauses_s = 0.0
    for s in segments(text):
        words += len(s.text.split()) if s.kind == "words" else s.kind == "filler"
        pauses_s += s.pause_ms / 1000 + (0.15 if s.kind == "restart" else 0.0)
    return ms(0.2 + words * 60.0 / voice.rate_wpm + pauses_s)


@dataclass
class _Work:
    """A delegation being planned (mutable until ``finish``): ``asked`` is the user turn
    that asked for it."""

    item_id: str
    request: dom.Request
    asked: int
    call_turn: int
    form: str = "call"
    supersedes: str | None = None
    may_fail: bool = True
    latency_s: float = 0.0
    status: str = "completed"
    cancel_turn: int | None = None
    announce_turn: int | None = None


@dataclass(frozen=True)
class _Reaction:
    """An interruption's line and what it calls for (a row of the linkage table):
    the assistant's response (``role`` None: none) and the work it starts (a revision or
    replacement; for a retry, the failed request)."""

    text: str
    action: Action
    decision: Decision
    role: Role | None = None
    response: str = ""
    request: dom.Request | None = None


class _Draft:
    """One sample being planned: its turns, events and work, and the voices."""

    def __init__(self, config: GenerationConfig, rng: np.random.Generator, group: Group) -> None:
        self.config, self.rng, self.group = config, rng, group
        self.chunk_s = config.chunk_s
        self.turns: list[Turn] = []
        self.events: list[OverlapEvent] = []
        self.work: list[_Work] = []
        self.floor = -1  # the last turn that held the floor (not an event's)
        self.said: set[str] = set()  # lines used, so a sample does not repeat itself
        self.events_left = int(rng.integers(1, config.events.max_per_sample + 1))
        user = self._voice()
        self.voices: dict[Speaker, Voice] = {
            "user": user,
            "assistant": self._voice(exclude=user.name, steady=True),
            "other": self._voice(exclude=user.name),
            "background": self._voice(exclude=user.name),
        }
        self.scene = self._scene() if group == "video" else None

    def fresh(self, choices: Sequence[T]) -> T:
        """One of ``choices`` not used yet in this sample (any, once all are)."""
        unused = [c for c in choices if str(c) not in self.said]
        chosen = pick(self.rng, unused or list(choices))
        self.said.add(str(chosen))
        return chosen

    # --- voices and text -------------------------------------------------------------------
    def _voice(self, exclude: str = "", steady: bool = False) -> Voice:
        s, rng = self.config.speech, self.rng
        engine = pick(rng, s.engines)
        names = s.espeak_voices if engine == "espeak-ng" else s.flite_voices
        name = pick(rng, [n for n in names if n != exclude] or list(names))
        if steady:  # the assistant: the middle of the ranges, unchanged through the sample
            rate, pitch = (s.rate_wpm[0] + s.rate_wpm[1]) // 2, (s.pitch[0] + s.pitch[1]) // 2
            return Voice(engine, name, rate, pitch, 0.0)
        rate = int(rng.integers(s.rate_wpm[0], s.rate_wpm[1] + 1))
        pitch = int(rng.integers(s.pitch[0], s.pitch[1] + 1))
        return Voice(engine, name, rate, pitch, round(float(rng.uniform(*s.gain_db)), 1))

    def _like_people(self, text: str) -> str:
        """``text`` with a restart, a pause or a filler, by the config's odds."""
        s, rng = self.config.speech, self.rng
        words = text.split()
        if len(words) < 3:
            return text
        if rng.random() < s.restart_p:
            words = [*words[:2], "--", words[0].lower(), *words[1:]]
        if rng.random() < s.pause_p:
            words.insert(
                int(rng.integers(1, len(words))), f"[pause {int(rng.integers(2, 9)) * 100}]"
            )
        if rng.random() < s.filler_p:
            words.insert(int(rng.integers(0, len(words))), "{" + pick(rng, FILLERS) + "}")
        return " ".join(words)

    # --- turns -----------------------------------------------------------------------------
    def add(
        self, speaker: Speaker, role: Role, text: str, anchor: Anchor, reply_to: int | None = None
    ) -> int:
        if speaker in ("user", "other") and role != "backchannel":
            text = self._like_people(text)
        voice = self.voices[speaker]
        distance: Distance = "far" if speaker == "background" else "near"
        duration_s = estimate_s(text, voice)
        self.turns.append(
            Turn(speaker, role, text, voice, anchor, 0.0, duration_s, None, distance, reply_to)
        )
        if role not in EVENT_ROLES:
            self.floor = len(self.turns) - 1
        return len(self.turns) - 1

    def timed(self) -> list[Turn]:
        return resolve(self.turns, self.events, self.chunk_s)

    def end_s(self) -> float:
        return max((t.end_s for t in self.timed()), default=0.0)

    def open(self) -> tuple[int, ...]:
        """What a new floor turn waits for: the last floor turn and the events since."""
        return tuple(range(max(self.floor, 0), len(self.turns)))

    def next_turn(self) -> Anchor:
        """A user turn after everything so far (or after the lead-in silence)."""
        if not self.turns:
            return Anchor(None, 0.0, ms(self.rng.uniform(*LEAD_S)), (), 0.0, False)
        return Anchor(None, 0.0, 0.0, self.open(), ms(self.rng.uniform(*TURN_GAP_S)), False)

    def reply(
        self, gap_s: float = ANSWER_GAP_S, offset_s: float = 0.0, ref: int | None = None
    ) -> Anchor:
        """An assistant turn: the first boundary after what is open (and after ``offset_s``
        past turn ``ref``'s start, or past t = 0)."""
        return Anchor(ref, 0.0, offset_s, self.open(), gap_s, True)

    def exchange(self, question: str, answer: str) -> int:
        """A question and its answer; the answer's turn."""
        q = self.add("user", "question", question, self.next_turn())
        return self.add("assistant", "answer", answer, self.reply(), reply_to=q)

    # --- categories ------------------------------------------------------------------------
    def understanding(self, target_s: float) -> None:
        while not self.turns or (self.end_s() < target_s * 0.7 and len(self.turns) < 6):
            qa = self.fresh(dom.PLAIN) if self.scene is None else self._visual_qa()
            for _ in range(4 if self.scene is not None else 0):  # one not asked yet, if any
                if qa[0] not in self.said:
                    break
                qa = self._visual_qa()
            self.said.add(qa[0])
            self.exchange(*qa)

    def duplex(self, target_s: float) -> None:
        if self.scene is not None and self.rng.random() < 0.5:
            self._watch()
        while not self.turns or (self.end_s() < target_s * 0.7 and len(self.turns) < 16):
            over = self.exchange(*self.fresh(dom.LONG))
            for _ in range(int(self.rng.integers(1, 3))):
                if self.events_left > 0:
                    self._event_over(over, None)

    def delegation(self, target_s: float) -> None:
        kind = _draw(self.rng, self.config.mix.events.ratios())
        if kind == "interruption":
            self._request(self._domain(slow=True), "interrupted")
        elif kind == "other_directed" and self.rng.random() < self.config.events.await_input_p:
            self._request(self._domain(slow=True), "aside")
        else:
            self._request(self._domain(), kind)
        while self.end_s() < target_s * 0.7 and len(self.turns) < 16:
            if self.rng.random() < 0.5:
                self.exchange(*self.fresh(dom.PLAIN))
            else:
                self._request(self._domain(), "plain")

    # --- video -----------------------------------------------------------------------------
    def _scene(self) -> Scene:
        v, rng = self.config.video, self.rng
        n = int(rng.integers(v.objects[0], v.objects[1] + 1))
        cells = [int(c) for c in rng.permutation(9)[:n]]
        backdrop = pick(rng, BACKDROPS)
        return Scene(
            v.width_px,
            v.height_px,
            backdrop,
            tuple(self._object(f"o{k}", c) for k, c in enumerate(cells)),
        )

    def _object(
        self, name: str, cell: int, from_s: float = 0.0, thing: tuple[Shape, Colour] | None = None
    ) -> SceneObject:
        rng = self.rng
        shape, colour = thing or (
            pick(rng, SHAPES) if rng.random() < 0.8 else "sign",
            pick(rng, COLOURS),
        )
        row, col = divmod(cell, 3)
        x, y = (
            (col + 0.5 + rng.uniform(-0.15, 0.15)) / 3,
            (row + 0.5 + rng.uniform(-0.15, 0.15)) / 3,
        )
        text = pick(rng, dom.SIGNS) if shape == "sign" else ""
        size = round(float(rng.uniform(0.12, 0.2)), 3)
        return SceneObject(
            name, shape, colour, round(float(x), 3), round(float(y), 3), size, text, from_s, None
        )

    def _visual_qa(self) -> tuple[str, str]:
        """A question about the (static) scene, and its answer."""
        assert self.scene is not None
        objects, rng = self.scene.objects, self.rng
        shapes = [o.shape for o in objects]
        unique = [o for o in objects if shapes.count(o.shape) == 1 and o.shape != "sign"]
        kinds = [
            "count",
            *(["colour", "position"] if unique else []),
            *(["text"] if shapes.count("sign") == 1 else []),
        ]
        kind = pick(rng, kinds)
        facts: dict[str, str]
        if kind == "count":
            shape = pick(rng, SHAPES)
            n = shapes.count(shape)
            things = f"{NUMBERS[n]} {shape}{'' if n == 1 else 's'}"
            facts = {"shape": shape, "things": things, "are": "is" if n == 1 else "are"}
        elif kind == "text":
            facts = {"text": objects[shapes.index("sign")].text}
        else:
            o = pick(rng, unique)
            facts = {"shape": o.shape, "colour": o.colour, "where": PLACES[_cell(o)]}
        asks, answers = dom.VISUAL[kind]
        return pick(rng, asks).format(**facts), pick(rng, answers).format(**facts)

    def _watch(self) -> None:
        """ "Tell me when a red circle shows up", and the unprompted answer when it does."""
        assert self.scene is not None
        seen = {(o.shape, o.colour) for o in self.scene.objects}
        shape, colour = pick(
            self.rng, [(s, c) for s in SHAPES for c in COLOURS if (s, c) not in seen]
        )
        thing = f"{colour} {shape}"
        ask = self.add(
            "user", "request", pick(self.rng, dom.WATCH).format(thing=thing), self.next_turn()
        )
        self.add(
            "assistant",
            "acknowledgement",
            pick(self.rng, dom.WATCH_ACK),
            self.reply(),
            reply_to=ask,
        )
        if self.rng.random() < self.config.events.await_input_p and self.events_left > 0:
            self._aside_while_waiting(self.floor)
        appear_s = snap(self.end_s() + float(self.rng.uniform(2.0, 5.0)), self.chunk_s)
        used = {_cell(o) for o in self.scene.objects}
        cell = pick(self.rng, [c for c in range(9) if c not in used] or [4])
        new = self._object("watched", cell, appear_s, (shape, colour))
        self.scene = replace(self.scene, objects=(*self.scene.objects, new))
        said = pick(self.rng, dom.PROACTIVE).format(thing=thing, where=PLACES[cell])
        # the frame of the chunk it appears in is read at that chunk's end
        self.add(
            "assistant",
            "proactive",
            said,
            self.reply(offset_s=appear_s + self.chunk_s),
            reply_to=ask,
        )

    # --- overlap events --------------------------------------------------------------------
    def _event_over(self, over: int, work: _Work | None, kind: EventKind | None = None) -> bool:
        """One event over assistant turn ``over`` (of ``kind``, or drawn by the config's
        mix); False if none fits. Without work in flight, interruptions only stop or
        change the topic."""
        if any(e.over_turn == over and e.action in CUTTING for e in self.events):
            return False  # nothing more is said over a turn once it is cut
        kind = kind or cast(EventKind, _draw(self.rng, self.config.mix.events.ratios()))
        intents = self.config.mix.intents.ratios()
        if work is None:
            intents = {k: p for k, p in intents.items() if k in ("stop", "change_topic")}
        if kind != "interruption" or sum(intents.values()) <= 0:
            return self._continue_event(over, "backchannel" if kind == "interruption" else kind)
        return self._interruption(over, cast(Intent, _draw(self.rng, intents)), work)

    def _slot(self, over: int, low: float, high: float) -> Anchor:
        """``low``-``high`` into ``over``, after any event already over it."""
        before = tuple(e.turn for e in self.events if e.over_turn == over)
        fraction = round(float(self.rng.uniform(low, max(low, high))), 3)
        return Anchor(over, fraction, 0.0, before, EVENT_GAP_S, False)

    def _continue_event(self, over: int, kind: EventKind) -> bool:
        """A backchannel, an aside or background speech the assistant talks through."""
        rng = self.rng
        if kind == "backchannel":
            turn = self.add(
                "user", "backchannel", self.fresh(dom.BACKCHANNELS), self._slot(over, 0.2, 0.7)
            )
        elif kind == "other_directed":
            speaker: Speaker = "other" if rng.random() < 0.3 else "user"
            line = self.fresh(dom.OTHER_ASIDES if speaker == "other" else dom.ASIDES)
            turn = self.add(speaker, "aside", line, self._slot(over, 0.1, 0.5))
        else:
            role: Role = "tv_line" if rng.random() < 0.6 else "room_speech"
            line = self.fresh(dom.TV_LINES if role == "tv_line" else dom.ROOM_SPEECH)
            turn = self.add("background", role, line, self._slot(over, 0.1, 0.5))
        timed = self.timed()
        if timed[turn].start_s >= timed[over].end_s - 0.5:
            self._drop(turn)
            return False
        self.events.append(
            OverlapEvent(kind, turn, over, None, "continue_speaking", "retain", None, None)
        )
        self.events_left -= 1
        return True

    def _aside_while_waiting(self, after: int) -> None:
        """The user talks to someone else while the assistant is silent: await_input."""
        anchor = Anchor(after, 1.0, ms(self.rng.uniform(0.3, 1.0)), self.open(), 0.3, False)
        turn = self.add("user", "aside", self.fresh(dom.ASIDES), anchor)
        self.events.append(
            OverlapEvent("other_directed", turn, None, None, "await_input", "retain", None, None)
        )
        self.events_left -= 1

    def _drop(self, turn: int) -> None:
        assert turn == len(self.turns) - 1
        self.turns.pop()
        self.floor = max(i for i, t in enumerate(self.turns) if t.role not in EVENT_ROLES)

    def _interruption(self, over: int, intent: Intent, work: _Work | None) -> bool:
        """The user cuts turn ``over`` short, and the assistant responds (by the linkage
        table); False if the interruption cannot end a chunk before ``over`` would."""
        said = self._react(intent, work)
        turn = self.add("user", "interruption", said.text, Anchor(over, 0.0, 0.0, (), 0.0, False))
        natural_s = self.turns[over].duration_s
        room = (natural_s - CUT_MARGIN_S - self.chunk_s - self.turns[turn].duration_s) / natural_s
        self.turns[turn] = replace(self.turns[turn], anchor=self._slot(over, 0.15, room))
        timed = self.timed()
        natural_end_s = timed[over].start_s + natural_s
        if room < 0.15 or snap(timed[turn].end_s, self.chunk_s) > natural_end_s - CUT_MARGIN_S:
            self._drop(turn)
            return False
        self.events_left -= 1
        response = None
        if said.role is not None:  # after the cut interruption: it alone is open
            anchor = Anchor(None, 0.0, 0.0, (turn,), ANSWER_GAP_S, True)
            response = self.add("assistant", said.role, said.response, anchor, turn)
        item = work.item_id if work is not None else None
        self.events.append(
            OverlapEvent(
                "interruption", turn, over, intent, said.action, said.decision, item, response
            )
        )
        if work is not None and response is not None and said.decision == "cancel":
            work.status, work.cancel_turn = "cancelled", response
        elif work is not None and response is not None and said.request is not None:
            form = "retry" if said.decision == "retry" else "call"
            self._supersede(work, said.request, response, form)
        return True

    def _react(self, intent: Intent, work: _Work | None) -> _Reaction:
        """What the user says to interrupt with ``intent``, and what it calls for."""
        rng = self.rng
        if intent == "stop" and work is not None and rng.random() < 0.5:
            ack = pick(rng, dom.CANCEL_ACK)
            return _Reaction(
                pick(rng, dom.STOPS_CANCEL), "stop_output", "cancel", "acknowledgement", ack
            )
        if intent == "stop":
            return _Reaction(pick(rng, dom.STOPS), "stop_output", "retain")
        if intent == "cancel_pending":
            ack = pick(rng, dom.CANCEL_ACK)
            return _Reaction(
                pick(rng, dom.CANCELS), "yield_floor", "cancel", "acknowledgement", ack
            )
        if intent == "revise":
            assert work is not None
            if work.status == "failed":  # "can you try again?"
                ack = pick(rng, dom.RETRY_ACK)
                return _Reaction(
                    pick(rng, dom.RETRIES),
                    "revise_response",
                    "retry",
                    "acknowledgement",
                    ack,
                    work.request,
                )
            new = dom.DOMAINS[work.request.capability].revise(rng, work.request)
            ack = pick(rng, dom.REVISE_ACK).format(topic=new.topic)
            return _Reaction(new.ask, "revise_response", "revise", "holding", ack, new)
        others = [
            c for c in self.config.delegation.capabilities if work and c != work.request.capability
        ]
        if work is not None and others and rng.random() < 0.5:
            new = dom.DOMAINS[pick(rng, others)].make(rng)
            text = pick(rng, dom.REPLACE) + new.ask
            return _Reaction(text, "yield_floor", "replace", "holding", pick(rng, dom.HOLD), new)
        question, answer = self.fresh(dom.PLAIN)
        text = pick(rng, dom.TOPIC_CHANGE) + question[0].lower() + question[1:]
        return _Reaction(text, "yield_floor", "retain", "answer", answer)

    # --- delegations -----------------------------------------------------------------------
    def _domain(self, slow: bool = False) -> str:
        names = list(self.config.delegation.capabilities)
        if slow:  # work the user acts on while it is pending
            names = [n for n in names if dom.DOMAINS[n].latency_s[1] >= SLOW] or names
        return pick(self.rng, names)

    def _item_id(self) -> str:
        taken = {w.item_id for w in self.work}
        while (item := f"{int(self.rng.integers(2**32)):08x}") in taken:
            pass
        return item

    def _request(self, capability: str, scenario: str) -> None:
        """A request, the holding line that writes the call, what happens while the work
        is pending (``scenario``: an event kind, "interrupted", "aside" or "plain"), and
        the result's announcement."""
        rng, request = self.rng, dom.DOMAINS[capability].make(self.rng)
        ask = self.add("user", "request", request.ask, self.next_turn())
        held = scenario not in ("plain", "aside")  # something will be said over it
        hold = pick(rng, dom.HOLD_LONG).format(doing=request.doing) if held else pick(rng, dom.HOLD)
        call = self.add("assistant", "holding", hold, self.reply(), reply_to=ask)
        work = _Work(self._item_id(), request, ask, call)
        self.work.append(work)
        if scenario == "interrupted":
            if not self._event_over(call, work, "interruption"):
                self._continue_event(call, "backchannel")
        elif scenario == "aside":
            self._aside_while_waiting(call)
        elif scenario != "plain" and self.events_left > 0:
            self._continue_event(call, cast(EventKind, scenario))
        self._settle(work)

    def _settle(self, work: _Work) -> None:
        """``work``'s latency (still pending when it is cancelled or superseded), its
        outcome and the announcement; a failure is announced, retried, or both."""
        timed = self.timed()
        call_s = timed[work.call_turn].start_s
        acted = [
            w.call_turn for w in self.work if w.supersedes == work.item_id and w.form == "call"
        ]
        acted += [work.cancel_turn] if work.cancel_turn is not None else []
        pending_s = max((timed[t].start_s - call_s + PENDING_MARGIN_S for t in acted), default=0.0)
        low, high = dom.DOMAINS[work.request.capability].latency_s
        if work.request.latency_s is not None:  # a timer: its duration
            work.latency_s = max(work.request.latency_s, pending_s)
        else:
            low = max(low, pending_s)
            work.latency_s = ms(self.rng.uniform(low, max(low, high)))
        if work.status == "cancelled":
            return
        fails = work.may_fail and dom.DOMAINS[work.request.capability].can_fail
        fails = fails and self.rng.random() < self.config.delegation.failure_p
        anchor = self.reply(IDLE_GAP_S, offset_s=work.latency_s, ref=work.call_turn)
        if not fails:
            text = work.request.announce
            work.announce_turn = self.add("assistant", "announcement", text, anchor, work.asked)
            return
        work.status = "failed"
        idempotent = dom.contracts()[work.request.capability].idempotent
        if idempotent and self.rng.random() < self.config.delegation.retry_p:
            text = pick(self.rng, dom.SELF_RETRY)
            work.announce_turn = self.add("assistant", "announcement", text, anchor, work.asked)
            self._supersede(work, work.request, work.announce_turn, "retry")
            return
        text = pick(self.rng, dom.FAILED).format(topic=work.request.topic)
        work.announce_turn = self.add("assistant", "announcement", text, anchor, work.asked)
        if idempotent and self.events_left > 0 and self.rng.random() < 0.5:
            self._interruption(work.announce_turn, "revise", work)  # "can you try again?"

    def _supersede(self, old: _Work, request: dom.Request, call_turn: int, form: str) -> None:
        """New work written in ``call_turn``: a revision or replacement (``call``, which
        cancels ``old``) or a retry of failed ``old``."""
        if form == "call":
            old.status = "cancelled"
        asked = self.turns[call_turn].reply_to if form == "call" else old.asked
        assert asked is not None
        new = _Work(
            self._item_id(), request, asked, call_turn, form, old.item_id, may_fail=form == "call"
        )
        self.work.append(new)
        self._settle(new)

    # --- the plan ----------------------------------------------------------------------------
    def finish(
        self, sample_id: str, seed: int, index: int, attempt: int, category: Category
    ) -> Plan:
        turns = self.timed()
        duration_s = snap(
            max(t.end_s for t in turns) + float(self.rng.uniform(*TAIL_S)), self.chunk_s
        )
        delegations = tuple(
            Delegation(
                w.item_id, w.request.capability, w.request.arguments, cast(Any, w.form),
                w.supersedes, w.call_turn, w.latency_s,
                None if w.announce_turn is None else turns[w.announce_turn].start_s,
                cast(Any, w.status), _result_text(w), w.cancel_turn, w.announce_turn,
            )
            for w in self.work
        )  # fmt: skip
        return Plan(
            sample_id, seed, index, attempt, self.group, category, duration_s, self.chunk_s,
            tuple(turns), tuple(self.events), delegations, self.scene, self._acoustics(duration_s),
        )  # fmt: skip

    def _acoustics(self, duration_s: float) -> Acoustics:
        a, rng = self.config.acoustics, self.rng
        rt60 = round(float(rng.uniform(*a.rt60_s)), 2) if rng.random() < a.reverb_p else None
        changes: tuple[LevelChange, ...] = ()
        if rng.random() < a.level_change_p:
            gain_db = round(float(rng.choice([-1.0, 1.0]) * rng.uniform(3.0, 9.0)), 1)
            changes = (LevelChange(ms(rng.uniform(0.2, 0.8) * duration_s), gain_db),)
        far_rt60_s = round(max(rt60 or 0.0, float(rng.uniform(0.5, 1.0))), 2)
        return Acoustics(
            pick(rng, a.noise), round(float(rng.uniform(*a.snr_db)), 1), rt60,
            round(float(rng.uniform(*a.far_gain_db)), 1), far_rt60_s, changes,
        )  # fmt: skip


def _result_text(work: _Work) -> str:
    """What the harness injects: the answer, the error message, or "" (never injected)."""
    return {"completed": work.request.result, "failed": work.request.failure}.get(work.status, "")


def _draw(rng: np.random.Generator, ratios: dict[str, float]) -> str:
    """A key of ``ratios`` drawn by its weight (the weights need not sum to 1)."""
    total = sum(ratios.values())
    return _inverse({k: p / total for k, p in ratios.items()}, float(rng.random()))


def _cell(o: SceneObject) -> int:
    """The 3 x 3 grid cell an object is in (0 top left ... 8 bottom right)."""
    return 3 * min(2, int(o.y * 3)) + min(2, int(o.x * 3))
