"""The planner's delegations: work the assistant hands to a capability.

``DelegationDraft`` extends the event layer with requests (a user asks, the assistant
holds and writes the call), events over the pending work, latencies (still pending when
the user acts on it), failures (announced, retried, or both), supersessions (a
revision, replacement or retry is new work that settles in turn) and results offered
early (ready while the user speaks: the assistant holds them until the announcement).
``result_text`` is what the harness injects for finished work.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from venus.datagen import domains as dom
from venus.datagen.domains import pick
from venus.datagen.plan import Delegation, EventKind, Turn, early_offer_s, ms
from venus.datagen.planner_draft import Work
from venus.datagen.planner_events import EventDraft

IDLE_GAP_S = 0.8  # a result waits for a chunk with < 20% speech (the frontend's idle rule)
PENDING_MARGIN_S = 2.0  # work the user acts on is still pending this much past the act
SLOW = 9.0  # s: capabilities whose results can take this long can be acted on while pending


class DelegationDraft(EventDraft):
    """The draft's delegations: requests, the calls written in holding turns, what is
    said over them while they are pending, and their outcomes and announcements."""

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
        is pending (``scenario``: an event kind, "interrupted", "aside", "talk_on": a
        10-15 s aside, or "plain"), and the result's announcement."""
        rng, request = self.rng, dom.DOMAINS[capability].make(self.rng)
        ask = self.add("user", "request", request.ask, self.next_turn())
        held = scenario not in ("plain", "aside")  # something will be said over it
        hold = pick(rng, dom.HOLD_LONG).format(doing=request.doing) if held else pick(rng, dom.HOLD)
        call = self.add("assistant", "holding", hold, self.reply(), reply_to=ask)
        work = Work(self._item_id(), request, ask, call)
        self.work.append(work)
        if scenario == "interrupted":
            if not self._event_over(call, work, "interruption"):
                self._continue_event(call, "backchannel")
        elif scenario in ("aside", "talk_on"):
            self._aside_while_waiting(call, dom.LONG_ASIDES if scenario == "talk_on" else None)
        elif scenario != "plain" and self.events_left > 0:
            self._continue_event(call, cast(EventKind, scenario))
        self._settle(work)

    def _settle(self, work: Work) -> None:
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

    def _offered(self, d: Delegation, turns: list[Turn]) -> Delegation:
        """``d`` (its result at its announcement) offered early instead, by
        ``delegation.early_offer_p``, where ``early_offer_s`` allows it on the finished
        ``turns``. Nothing is drawn at 0, nor where it cannot be offered early."""
        p = self.config.delegation.early_offer_p
        if p <= 0:
            return d
        at_s = early_offer_s(turns, d, self.chunk_s)
        if at_s is None or self.rng.random() >= p:
            return d
        return replace(d, result_at_s=at_s)

    def _supersede(self, old: Work, request: dom.Request, call_turn: int, form: str) -> None:
        """New work written in ``call_turn``: a revision or replacement (``call``, which
        cancels ``old``) or a retry of failed ``old``."""
        if form == "call":
            old.status = "cancelled"
        asked = self.turns[call_turn].reply_to if form == "call" else old.asked
        assert asked is not None
        new = Work(
            self._item_id(), request, asked, call_turn, form, old.item_id, may_fail=form == "call"
        )
        self.work.append(new)
        self._settle(new)


def result_text(work: Work) -> str:
    """What the harness injects: the answer, the error message, or "" (never injected)."""
    return {"completed": work.request.result, "failed": work.request.failure}.get(work.status, "")
