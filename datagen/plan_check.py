"""Consistency of a whole plan: ``resolve`` (turn starts and cuts from their anchors and
durations), ``check_plan`` (everything the dataclasses cannot check alone: turn
references, timing, event linkage, delegation lifecycles, overlaps) and
``early_offer_s`` (where a result ready while the user speaks is offered early).

It builds on the plan's parts; ``Plan`` (``venus.datagen.plan``) calls ``check_plan``
when it is built and ``resolve`` in ``retime``, so ``Plan`` is imported here for type
checking only and the imports run one way: plan -> plan_check -> plan_parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from venus.datagen.domains_contracts import argument_errors
from venus.datagen.plan_parts import Delegation, OverlapEvent, Turn
from venus.datagen.plan_types import CUTTING, EPS_S, EVENT_ROLES, PlanError, ms, snap

if TYPE_CHECKING:
    from venus.datagen.plan import Plan


def resolve(turns: Sequence[Turn], events: Sequence[OverlapEvent], chunk_s: float) -> list[Turn]:
    """``turns`` with ``start_s`` and ``cut_at_s`` computed from their anchors and
    durations, in order: a fraction is of the referenced turn's whole duration, ``after``
    uses its end (its cut, if any), and an interruption that cuts turn ``k`` sets its cut
    at the first boundary at or after the interruption's end."""
    cut_by = {
        e.over_turn: e.turn for e in events if e.action in CUTTING and e.over_turn is not None
    }
    cuts = {by: over for over, by in cut_by.items()}
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
        over = cuts.get(i)  # known from here on: a later turn waiting for it sees the cut
        if over is not None:
            if not 0 <= over < i:
                raise PlanError(f"turn {i} cuts turn {over}: not an earlier turn")
            out[over] = replace(out[over], cut_at_s=snap(out[i].end_s, chunk_s))
    for over, by in cut_by.items():
        if not 0 <= by < len(out):
            raise PlanError(f"turn {by} cuts turn {over}: there is no turn {by}")
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
            if d.announce_turn <= d.call_turn:
                raise PlanError(f"{what}: its announce turn is not after its call turn")
            if announce.start_s < ready_s - EPS_S:
                raise PlanError(f"{what}: announced before its result is ready")
            early = d.result_at_s != announce.start_s
            if early and (problem := early_offer_problem(plan.turns, d, plan.chunk_s)):
                raise PlanError(
                    f"{what}: result_at_s {d.result_at_s} is neither its announcement's start "
                    f"({announce.start_s}) nor an early offer: {problem}"
                )
        superseded = [x for x in plan.delegations if x.supersedes == d.item_id]
        if d.status == "cancelled":
            if (d.cancel_turn is None) == (not superseded):
                raise PlanError(f"{what}: cancelled by a cancel span or a supersession, one")
            by_turn = d.cancel_turn if d.cancel_turn is not None else superseded[0].call_turn
            if _assistant(plan, by_turn, what).start_s >= ready_s - EPS_S or by_turn <= d.call_turn:
                raise PlanError(f"{what}: cancelled after its result was ready")
        if d.status == "cancelled" and d.cancel_turn is not None:
            _named_uniquely(plan, d, plan.turns[d.cancel_turn].start_s, what)
        if d.supersedes is not None:
            old = by_id.get(d.supersedes)
            if old is None or ids.index(old.item_id) >= k:
                raise PlanError(f"{what}: supersedes {d.supersedes}, not an earlier item")
            if d.form == "call":
                _named_uniquely(plan, old, plan.turns[d.call_turn].start_s, what)
            if d.form == "retry" and (
                old.status != "failed"
                or (old.capability, old.arguments) != (d.capability, d.arguments)
            ):
                raise PlanError(f"{what}: a retry repeats the call of a failed item")
            if d.form == "call" and old.status != "cancelled":
                raise PlanError(f"{what}: a revision or replacement cancels the item it supersedes")


def early_offer_s(turns: Sequence[Turn], d: Delegation, chunk_s: float) -> float | None:
    """The boundary ``d``'s result is offered early at, or None where it cannot be: the
    first chunk boundary at or after the result is ready, when that is before its
    announcement, the user speaks through the chunk ending there, and the assistant is
    silent from that chunk to the announcement (the daemon offers a result only while the
    assistant listens, and a reply it starts answers every result offered before). The
    assistant holds the result until the announcement."""
    if d.announce_turn is None:
        return None
    at_s = snap(turns[d.call_turn].start_s + d.result_after_s, chunk_s)
    return None if early_offer_problem(turns, replace(d, result_at_s=at_s), chunk_s) else at_s


def early_offer_problem(turns: Sequence[Turn], d: Delegation, chunk_s: float) -> str | None:
    """Why ``d.result_at_s`` is not an early offer (``early_offer_s``); None where it is."""
    if d.announce_turn is None or d.result_at_s is None:
        return "cancelled work is never offered"
    at_s, heard_s = d.result_at_s, ms(d.result_at_s - chunk_s)
    ready_s = ms(turns[d.call_turn].start_s + d.result_after_s)
    announce_s = turns[d.announce_turn].start_s
    if abs(at_s - snap(ready_s, chunk_s)) > EPS_S:
        return f"it is not the first chunk boundary at or after the result is ready ({ready_s})"
    if at_s >= announce_s - EPS_S:
        return f"it is not before the announcement ({announce_s})"
    if not any(
        t.speaker == "user" and t.start_s <= heard_s + EPS_S and t.end_s >= at_s - EPS_S
        for t in turns
    ):
        return f"the user does not speak through the chunk [{heard_s}, {at_s})"
    for i, t in enumerate(turns):
        if (
            t.speaker == "assistant"
            and i != d.announce_turn
            and t.start_s < announce_s - EPS_S
            and t.end_s > heard_s + EPS_S
        ):
            return f"the assistant speaks (turn {i}) between it and the announcement"
    return None


def _named_uniquely(plan: Plan, target: Delegation, at_s: float, what: str) -> None:
    """Pending work is named by its capability (the harness takes the session's newest
    item of it not yet said, so a result offered early is pending until its announcement):
    at ``at_s`` that must be ``target``."""

    def cancelled_s(d: Delegation) -> float | None:
        if d.cancel_turn is not None:
            return plan.turns[d.cancel_turn].start_s
        by = [x for x in plan.delegations if x.supersedes == d.item_id and x.form == "call"]
        return plan.turns[by[0].call_turn].start_s if by else None

    pending = [
        d
        for d in plan.delegations
        if d.capability == target.capability
        and plan.turns[d.call_turn].start_s < at_s
        and (d.announce_turn is None or plan.turns[d.announce_turn].start_s >= at_s)
        and ((c := cancelled_s(d)) is None or c >= at_s)
    ]
    if not pending or pending[-1] is not target:
        raise PlanError(f"{what}: {target.capability!r} would not name {target.item_id} then")


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
