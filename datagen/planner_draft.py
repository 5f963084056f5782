"""The planner's draft of one sample, bottom layer: the state (turns, events, work,
voices, the scene) and adding and timing turns.

``Draft`` holds what ``plan_sample`` builds up; ``planner_events.EventDraft`` adds the
overlap events, ``planner_delegation.DelegationDraft`` the delegations, and the planner's
``_Draft`` the categories and the finished ``Plan``. Also here: ``estimate_s`` (how long a
text takes to say) and the weighted draws every layer uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from venus.datagen import domains as dom
from venus.datagen.config import GenerationConfig, SpeechConfig
from venus.datagen.domains import pick
from venus.datagen.plan import (
    FILLERS,
    Anchor,
    Distance,
    Engine,
    Group,
    OverlapEvent,
    Role,
    Speaker,
    Turn,
    Voice,
    ms,
    resolve,
    segments,
)
from venus.datagen.planner_scene import draw_scene

ANSWER_GAP_S = 0.2  # a question's end is heard for a moment before the answer's boundary
TURN_GAP_S = (0.4, 1.5)  # the user's pause before speaking again
LEAD_S = (0.5, 2.0)  # silence before the first turn
EVENT_ROLES = frozenset({"backchannel", "aside", "interruption", "tv_line", "room_speech"})
T = TypeVar("T")


def inverse(ratios: dict[str, float], u: float) -> str:
    """The key whose share of ``ratios`` (summing to 1) holds ``u`` in [0, 1)."""
    total = 0.0
    for name, p in ratios.items():
        total += p
        if u < total:
            return name
    return [name for name, p in ratios.items() if p > 0][-1]  # u within rounding of 1


def draw(rng: np.random.Generator, ratios: dict[str, float]) -> str:
    """A key of ``ratios`` drawn by its weight (the weights need not sum to 1)."""
    total = sum(ratios.values())
    return inverse({k: p / total for k, p in ratios.items()}, float(rng.random()))


def draw_engine(rng: np.random.Generator, speech: SpeechConfig) -> Engine:
    """A person's engine: by ``speech.engine_weights``, or all alike without them (one
    draw of an index, as before the weights existed, so such configs plan as they did)."""
    if not speech.engine_weights:
        return pick(rng, speech.engines)
    ratios = {str(i): w for i, w in enumerate(speech.engine_weights)}
    return speech.engines[int(draw(rng, ratios))]


def draw_formant(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    """A formant scale within ``bounds``, to 3 places; 1.0 without a draw when the
    bounds are (1, 1), so configs without ``speech.formant`` plan as they did before it."""
    if bounds == (1.0, 1.0):
        return 1.0
    return round(float(rng.uniform(*bounds)), 3)


def estimate_s(text: str, voice: Voice) -> float:
    """How long ``text`` takes to say: words (fillers count) at the voice's rate, pauses."""
    words = pauses_s = 0.0
    for s in segments(text):
        words += len(s.text.split()) if s.kind == "words" else s.kind == "filler"
        pauses_s += s.pause_ms / 1000 + (0.15 if s.kind == "restart" else 0.0)
    return ms(0.2 + words * 60.0 / voice.rate_wpm + pauses_s)


@dataclass
class Work:
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


class Draft:
    """One sample being planned: its turns, events and work, and the voices. This layer
    adds turns and times them; ``EventDraft`` and ``DelegationDraft`` build on it."""

    def __init__(self, config: GenerationConfig, rng: np.random.Generator, group: Group) -> None:
        self.config, self.rng, self.group = config, rng, group
        self.chunk_s = config.chunk_s
        self.turns: list[Turn] = []
        self.events: list[OverlapEvent] = []
        self.work: list[Work] = []
        self.floor = -1  # the last turn that held the floor (not an event's)
        self.said: set[str] = set()  # lines used, so a sample does not repeat itself
        self.events_left = int(rng.integers(1, config.events.max_per_sample + 1))
        user = self._voice()
        fixed = config.speech.fixed_assistant()  # a fixed voice takes no draw
        assistant = self._steady(*fixed) if fixed else self._voice(exclude=user.name, steady=True)
        self.voices: dict[Speaker, Voice] = {
            "user": user,
            "assistant": assistant,
            "other": self._voice(exclude=user.name),
            "background": self._voice(exclude=user.name),
        }
        self.scene = draw_scene(config.video, rng) if group == "video" else None

    def fresh(self, choices: Sequence[T]) -> T:
        """One of ``choices`` not used yet in this sample (any, once all are)."""
        unused = [c for c in choices if str(c) not in self.said]
        chosen = pick(self.rng, unused or list(choices))
        self.said.add(str(chosen))
        return chosen

    # --- voices and text -------------------------------------------------------------------
    def _voice(self, exclude: str = "", steady: bool = False) -> Voice:
        """A voice drawn from the config's lists, never the assistant's fixed one."""
        s, rng = self.config.speech, self.rng
        engine = draw_engine(rng, s)
        names = s.people_voices(engine)
        name = pick(rng, [n for n in names if n != exclude] or names)
        if steady:
            return self._steady(engine, name)
        rate = int(rng.integers(s.rate_wpm[0], s.rate_wpm[1] + 1))
        pitch = int(rng.integers(s.pitch[0], s.pitch[1] + 1))
        gain_db = round(float(rng.uniform(*s.gain_db)), 1)
        return Voice(engine, name, rate, pitch, gain_db, draw_formant(rng, s.formant))

    def _steady(self, engine: Engine, name: str) -> Voice:
        """The assistant's voice: the middle of the ranges, unchanged through the sample."""
        s = self.config.speech
        rate, pitch = (s.rate_wpm[0] + s.rate_wpm[1]) // 2, (s.pitch[0] + s.pitch[1]) // 2
        return Voice(engine, name, rate, pitch, 0.0)

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

    def _drop(self, turn: int) -> None:
        assert turn == len(self.turns) - 1
        self.turns.pop()
        self.floor = max(i for i, t in enumerate(self.turns) if t.role not in EVENT_ROLES)
