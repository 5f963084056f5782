"""The planner's overlap events: speech over (or beside) the assistant, by function.

``EventDraft`` extends the draft with backchannels, asides (``await_input`` when the
assistant is silent), background speech, and interruptions that stop the assistant,
change the topic, or act on pending work (cancel, revise, replace, retry), each with the
action and delegation decision the linkage table calls for (``venus.datagen.plan``).
Acting on work starts new work, which ``planner_delegation.DelegationDraft`` plans: the
one call back up the layers, ``_supersede``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

from venus.datagen import domains as dom
from venus.datagen.domains import pick
from venus.datagen.plan import (
    CUTTING,
    EPS_S,
    Action,
    Anchor,
    Decision,
    EventKind,
    Intent,
    OverlapEvent,
    Role,
    Speaker,
    Turn,
    ms,
    snap,
)
from venus.datagen.planner_draft import Draft, Work, draw

EVENT_GAP_S = 0.3  # between two events over one turn
# how long a reply is heard for, as a share of its planned length (``estimate_s``), that
# ``reply_outlasts_s`` plans for: the median of the assistant's turns over 300 samples of
# the training set's config (the flite voice; the 5th percentile 0.58). Planned for the
# 5th percentile, a third of the overlaps were dropped; at the median, 2% of samples fall
# short once synthesized, and ``realize`` draws those again (``outlast_problem``)
REPLY_HEARD_LOW = 0.76
CUT_MARGIN_S = 0.5  # a cut falls at least this long before the turn's natural end


@dataclass(frozen=True)
class Reaction:
    """An interruption's line and what it calls for (a row of the linkage table):
    the assistant's response (``role`` None: none) and the work it starts (a revision or
    replacement; for a retry, the failed request)."""

    text: str
    action: Action
    decision: Decision
    role: Role | None = None
    response: str = ""
    request: dom.Request | None = None


class EventDraft(Draft):
    """The draft's overlap events: backchannels, asides, background speech and
    interruptions over assistant turns, and the responses interruptions call for."""

    def _event_over(self, over: int, work: Work | None, kind: EventKind | None = None) -> bool:
        """One event over assistant turn ``over`` (of ``kind``, or drawn by the config's
        mix); False if none fits. Without work in flight, interruptions only stop or
        change the topic."""
        if any(e.over_turn == over and e.action in CUTTING for e in self.events):
            return False  # nothing more is said over a turn once it is cut
        kind = kind or cast(EventKind, draw(self.rng, self.config.mix.events.ratios()))
        intents = self.config.mix.intents.ratios()
        if work is None:
            intents = {k: p for k, p in intents.items() if k in ("stop", "change_topic")}
        if kind != "interruption" or sum(intents.values()) <= 0:
            return self._continue_event(over, "backchannel" if kind == "interruption" else kind)
        return self._interruption(over, cast(Intent, draw(self.rng, intents)), work)

    def _slot(self, over: int, low: float, high: float) -> Anchor:
        """``low``-``high`` into ``over``, after any event already over it (with
        ``reply_outlasts_s``, that long after one it talks through: an interruption's cut
        then leaves the carrying on to be heard)."""
        before = tuple(e.turn for e in self.events if e.over_turn == over)
        fraction = round(float(self.rng.uniform(low, max(low, high))), 3)
        gap = EVENT_GAP_S
        if any(e.over_turn == over and e.action == "continue_speaking" for e in self.events):
            gap = max(gap, self.config.events.reply_outlasts_s)
        return Anchor(over, fraction, 0.0, before, gap, False)

    def _continue_event(self, over: int, kind: EventKind) -> bool:
        """A backchannel, an aside or background speech the assistant talks through."""
        rng = self.rng
        low, high = (0.2, 0.7) if kind == "backchannel" else (0.1, 0.5)
        if kind == "backchannel":
            turn = self.add(
                "user", "backchannel", self.fresh(dom.BACKCHANNELS), self._slot(over, low, high)
            )
        elif kind == "other_directed":
            speaker: Speaker = "other" if rng.random() < 0.3 else "user"
            line = self.fresh(dom.OTHER_ASIDES if speaker == "other" else dom.ASIDES)
            turn = self.add(speaker, "aside", line, self._slot(over, low, high))
        else:
            role: Role = "tv_line" if rng.random() < 0.6 else "room_speech"
            line = self.fresh(dom.TV_LINES if role == "tv_line" else dom.ROOM_SPEECH)
            turn = self.add("background", role, line, self._slot(over, low, high))
        timed = self.timed()
        outlast = self.config.events.reply_outlasts_s
        if outlast > 0:  # nothing drawn at 0: sets are planned as before the key existed
            timed = self._outlast(timed, over, turn, low, outlast)
        if timed[turn].start_s >= timed[over].end_s - 0.5 or (
            outlast > 0 and not self._outlasted(timed[over], timed[turn], outlast)
        ):
            self._drop(turn)
            return False
        self.events.append(
            OverlapEvent(kind, turn, over, None, "continue_speaking", "retain", None, None)
        )
        self.events_left -= 1
        return True

    def _outlast(
        self, timed: list[Turn], over: int, turn: int, low: float, outlast: float
    ) -> list[Turn]:
        """The ``timed`` turns, with event ``turn`` drawn earlier into ``over`` (from ``low``
        of it on) where it would end less than ``outlast`` seconds before the reply does
        were the reply heard for ``REPLY_HEARD_LOW`` of its planned length; as they were if
        it would not, or cannot move without starting before ``low``. (The event's start
        is a share of the reply: a reply heard shorter brings it nearer the end.)"""
        reply, event = timed[over], timed[turn]
        if self._outlasted(reply, event, outlast):
            return timed
        heard_s = reply.duration_s * REPLY_HEARD_LOW
        latest = (heard_s - outlast - event.duration_s) / heard_s
        if latest < low:
            return timed
        anchor = self.turns[turn].anchor
        fraction = round(float(self.rng.uniform(low, latest)), 3)
        self.turns[turn] = replace(self.turns[turn], anchor=replace(anchor, fraction=fraction))
        return self.timed()

    @staticmethod
    def _outlasted(reply: Turn, event: Turn, outlast: float) -> bool:
        """Whether ``reply``, heard for ``REPLY_HEARD_LOW`` of its planned length, goes
        on ``outlast`` seconds past ``event`` (started the same share into it)."""
        into = (event.start_s - reply.start_s) / reply.duration_s
        heard_s = reply.duration_s * REPLY_HEARD_LOW
        return (1.0 - into) * heard_s - event.duration_s >= outlast - EPS_S

    def _aside_while_waiting(self, after: int, lines: Sequence[str] | None = None) -> None:
        """The user talks to someone else while the assistant is silent: await_input (one
        of ``lines``; default ``dom.ASIDES``)."""
        anchor = Anchor(after, 1.0, ms(self.rng.uniform(0.3, 1.0)), self.open(), 0.3, False)
        turn = self.add("user", "aside", self.fresh(lines or dom.ASIDES), anchor)
        self.events.append(
            OverlapEvent("other_directed", turn, None, None, "await_input", "retain", None, None)
        )
        self.events_left -= 1

    def _interruption(self, over: int, intent: Intent, work: Work | None) -> bool:
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
            # A yield takes its chunk: the chunk that cuts the reply decides listen, the
            # next decides the response, heard one chunk after the cut.
            anchor = Anchor(None, 0.0, 0.0, (turn, over), self.chunk_s, True)
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

    def _react(self, intent: Intent, work: Work | None) -> Reaction:
        """What the user says to interrupt with ``intent``, and what it calls for."""
        rng = self.rng
        if intent == "stop" and work is not None and rng.random() < 0.5:
            ack = pick(rng, dom.CANCEL_ACK)
            return Reaction(
                pick(rng, dom.STOPS_CANCEL), "stop_output", "cancel", "acknowledgement", ack
            )
        if intent == "stop":
            return Reaction(pick(rng, dom.STOPS), "stop_output", "retain")
        if intent == "cancel_pending":
            ack = pick(rng, dom.CANCEL_ACK)
            return Reaction(pick(rng, dom.CANCELS), "yield_floor", "cancel", "acknowledgement", ack)
        if intent == "revise":
            assert work is not None
            if work.status == "failed":  # "can you try again?"
                ack = pick(rng, dom.RETRY_ACK)
                return Reaction(
                    pick(rng, dom.RETRIES),
                    "revise_response",
                    "retry",
                    "acknowledgement",
                    ack,
                    work.request,
                )
            new = dom.DOMAINS[work.request.capability].revise(rng, work.request)
            ack = pick(rng, dom.REVISE_ACK).format(topic=new.topic)
            return Reaction(new.ask, "revise_response", "revise", "holding", ack, new)
        others = [
            c for c in self.config.delegation.capabilities if work and c != work.request.capability
        ]
        if work is not None and others and rng.random() < 0.5:
            new = dom.DOMAINS[pick(rng, others)].make(rng)
            text = pick(rng, dom.REPLACE) + new.ask
            return Reaction(text, "yield_floor", "replace", "holding", pick(rng, dom.HOLD), new)
        question, answer = self.fresh(dom.PLAIN)
        text = pick(rng, dom.TOPIC_CHANGE) + question[0].lower() + question[1:]
        return Reaction(text, "yield_floor", "retain", "answer", answer)

    def _supersede(self, old: Work, request: dom.Request, call_turn: int, form: str) -> None:
        """New work written in ``call_turn`` that revises, replaces or retries ``old``, as
        an interruption's response calls for: ``DelegationDraft`` plans it."""
        raise NotImplementedError
