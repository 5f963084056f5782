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
  failures are announced or retried, and the user may talk to someone else meanwhile
  (with ``delegation.early_offer_p``, a result ready while the user talks is offered
  then and held until its announcement).

Times come from word counts and speaking rates (``estimate_s``) through the plan's anchors.

**Layers.** The draft of a sample is built in layers, each a module with one concern:
``planner_draft.Draft`` (state, voices, adding and timing turns), ``planner_events``
(overlap events over assistant turns), ``planner_delegation`` (work handed to
capabilities), and ``_Draft`` here (the categories and the finished plan); scenes come
from ``planner_scene``. This module re-exports their public names; import from here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import numpy as np

from venus.datagen import domains as dom
from venus.datagen.config import GenerationConfig
from venus.datagen.domains import pick
from venus.datagen.plan import (
    Acoustics,
    Category,
    Delegation,
    Group,
    LevelChange,
    Plan,
    ms,
    snap,
)
from venus.datagen.planner_delegation import (
    IDLE_GAP_S,
    PENDING_MARGIN_S,
    SLOW,
    DelegationDraft,
    result_text,
)
from venus.datagen.planner_draft import (
    ANSWER_GAP_S,
    EVENT_ROLES,
    LEAD_S,
    TURN_GAP_S,
    draw,
    estimate_s,
    inverse,
)
from venus.datagen.planner_events import CUT_MARGIN_S, EVENT_GAP_S
from venus.datagen.planner_scene import (
    BACKDROPS,
    COLOURS,
    NUMBERS,
    PLACES,
    SHAPES,
    cell_of,
    draw_object,
    visual_qa,
)

__all__ = [
    "ANSWER_GAP_S", "BACKDROPS", "COLOURS", "CUT_MARGIN_S", "EVENT_GAP_S", "EVENT_ROLES",
    "IDLE_GAP_S", "LEAD_S", "NUMBERS", "PENDING_MARGIN_S", "PLACES", "R2", "SHAPES", "SLOW",
    "TAIL_S", "TURN_GAP_S", "draw_mix", "estimate_s", "plan_sample",
]  # fmt: skip

TAIL_S = (1.0, 2.0)  # silence after the last turn
R2 = 1.32471795724474602596  # the plastic number: the R2 low-discrepancy sequence


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
    group = inverse(config.mix.group.ratios(), u)
    return cast(Group, group), cast(Category, inverse(config.mix.category.ratios(), v))


class _Draft(DelegationDraft):
    """One sample being planned, top layer: the categories and the finished plan."""

    # --- categories ------------------------------------------------------------------------
    def understanding(self, target_s: float) -> None:
        while not self.turns or (self.end_s() < target_s * 0.7 and len(self.turns) < 6):
            qa = self.fresh(dom.PLAIN) if self.scene is None else visual_qa(self.scene, self.rng)
            for _ in range(4 if self.scene is not None else 0):  # one not asked yet, if any
                if qa[0] not in self.said:
                    break
                qa = visual_qa(self.scene, self.rng)
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
        talk_on = self.config.delegation.talk_on_p
        if talk_on > 0 and self.rng.random() < talk_on:  # nothing drawn at 0
            self._request(self._domain(slow=True), "talk_on")
        else:
            self._first_request()
        while self.end_s() < target_s * 0.7 and len(self.turns) < 16:
            if self.rng.random() < 0.5:
                self.exchange(*self.fresh(dom.PLAIN))
            else:
                self._request(self._domain(), "plain")

    def _first_request(self) -> None:
        """A delegation sample's first request, with the event its mix draws over it."""
        kind = draw(self.rng, self.config.mix.events.ratios())
        if kind == "interruption":
            self._request(self._domain(slow=True), "interrupted")
        elif kind == "other_directed" and self.rng.random() < self.config.events.await_input_p:
            self._request(self._domain(slow=True), "aside")
        else:
            self._request(self._domain(), kind)

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
        used = {cell_of(o) for o in self.scene.objects}
        cell = pick(self.rng, [c for c in range(9) if c not in used] or [4])
        new = draw_object(self.rng, "watched", cell, appear_s, (shape, colour))
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
                cast(Any, w.status), result_text(w), w.cancel_turn, w.announce_turn,
            )
            for w in self.work
        )  # fmt: skip
        acoustics = self._acoustics(duration_s)
        # drawn last, so a plan with a result offered early sounds as it would without
        offered = tuple(self._offered(d, turns) for d in delegations)
        return Plan(
            sample_id, seed, index, attempt, self.group, category, duration_s, self.chunk_s,
            tuple(turns), tuple(self.events), offered, self.scene, acoustics,
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
