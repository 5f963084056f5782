"""A realization projected onto the chunk grid: the trajectory and its per-chunk targets.

The rules (docs/timeline.md; ``chunk_s`` = 1 s):

- **Speech.** Words decided in chunk ``k`` are heard from its boundary ``(k + 1) *
  chunk_s``: an assistant turn starting at ``start_s`` was decided in chunk
  ``start_s / chunk_s - 1``, and a word heard from ``t`` in chunk ``floor(t / chunk_s) - 1``.
  Every chunk from a reply's first to its last decides ``speak`` with its words; the last
  of a reply heard to its end decides ``turn_eos`` (its words, then ``<|turn_eos|>``).
- **Cuts.** A cut at boundary ``c`` (the first at or after the interruption ends) is
  decided in chunk ``c / chunk_s - 1``, which carries the event's action. Words heard
  from ``c`` on are never said. The chunk listens, unless the response starts at ``c``:
  then it already speaks the response's first words (and its delegation span).
- **Actions.** An event's action goes on the chunk in which its speech ends (for a cut,
  the cut's chunk); ``continue_speaking`` over a reply that ended before then goes on the
  reply's last chunk (not before the event's first). One action per chunk: a cut wins.
- **Delegation.** A call's span is written at the start of its call turn's first chunk,
  a ``{"cancel"}`` at its cancel turn's; a result is injected at the chunk whose boundary
  is ``result_at_s``: its announcement's first chunk, or, offered early, a chunk the user
  speaks through, which listens like every chunk after it up to the announcement.
- **Events** list every overlap event whose measured window overlaps the chunk.

``check_targets`` verifies the rules on the finished chunks (AlignmentError).
"""

from __future__ import annotations

import math

from venus.datagen.mixdown import PEAK_DBFS, SAMPLE_RATE, Realization
from venus.datagen.plan import CUTTING, EPS_S, Plan, plain_text
from venus.datagen.trajectory import (
    TRAJECTORY_VERSION,
    Alignment,
    ChunkTarget,
    DelegationRecord,
    EventRecord,
    Files,
    Levels,
    Trajectory,
    TurnRecord,
)
from venus.errors import DatagenError


class AlignmentError(DatagenError):
    """The chunk targets break a rule of the timeline; the message names the chunk."""


class WordlessChunkError(AlignmentError):
    """A chunk inside a reply in which no word starts (a long word or pause spans it), so
    it would speak without text. Not a bug: the plan is drawn again (``realize``)."""


def heard_from(t_s: float, chunk_s: float) -> int:
    """The chunk that decides the speech heard at ``t_s``."""
    return math.floor(t_s / chunk_s + EPS_S) - 1


def at_boundary(t_s: float, chunk_s: float) -> int:
    """The chunk whose boundary (end) is ``t_s``, a multiple of ``chunk_s``."""
    return round(t_s / chunk_s) - 1


def build_trajectory(r: Realization, files: Files) -> Trajectory:
    """The trajectory of realization ``r`` (its files named by ``files``)."""
    plan = r.plan
    chunks = chunk_targets(r)
    check_targets(plan, chunks)
    turns = tuple(
        TurnRecord(
            i, t.speaker, t.role, plain_text(t.text), m.start_s, m.end_s, t.start_s, t.cut_at_s
        )
        for i, (t, m) in enumerate(zip(plan.turns, r.turns, strict=True))
    )
    events = tuple(
        EventRecord(
            k, e.kind, e.intent, e.action, e.delegation_decision, e.delegation, e.turn, window
        )
        for k, (e, window) in enumerate(zip(plan.events, r.windows_s, strict=True))
    )
    return Trajectory(
        TRAJECTORY_VERSION,
        plan.sample_id,
        plan.seed,
        plan.index,
        plan.attempt,
        plan.group,
        plan.category,
        plan.duration_s,
        plan.chunk_s,
        SAMPLE_RATE,
        files,
        turns,
        events,
        delegation_records(plan),
        chunks,
        Alignment(r.max_onset_error_ms, len(turns)),
        plan.acoustics,
        Levels(PEAK_DBFS, r.input_gain_db, r.assistant_gain_db),
    )


def chunk_targets(r: Realization) -> tuple[ChunkTarget, ...]:
    """The targets of every chunk of ``r`` (see the module doc)."""
    plan, chunk_s = r.plan, r.plan.chunk_s
    n = round(plan.duration_s / chunk_s)
    decision = ["listen"] * n
    text: list[list[str]] = [[] for _ in range(n)]
    action: list[str | None] = [None] * n
    delegate: list[list[str]] = [[] for _ in range(n)]
    results: list[list[str]] = [[] for _ in range(n)]
    replies: dict[int, range] = {}  # assistant turn -> the chunks that decide it
    owner: dict[int, int] = {}
    for i, turn in enumerate(plan.turns):
        if turn.speaker != "assistant":
            continue
        words = r.words[i]
        if not words:
            raise AlignmentError(f"{plan.sample_id}: turn {i} says nothing before its cut")
        first, last = heard_from(words[0].start_s, chunk_s), heard_from(words[-1].start_s, chunk_s)
        if first != at_boundary(turn.start_s, chunk_s) or first < 0 or last >= n:
            raise AlignmentError(f"{plan.sample_id}: assistant turn {i} is off the chunk grid")
        replies[i] = range(first, last + 1)
        for k in replies[i]:
            if k in owner:
                raise AlignmentError(f"{plan.sample_id}: chunk {k} decides turn {owner[k]} and {i}")
            owner[k] = i
            decision[k] = "speak"
        for word in words:
            text[heard_from(word.start_s, chunk_s)].append(word.text)
        if turn.cut_at_s is None:
            decision[last] = "turn_eos"
    for e in plan.events:
        k = _action_chunk(plan, e.turn, e.over_turn, e.action, replies)
        if action[k] is None or (e.action in CUTTING and action[k] not in CUTTING):
            action[k] = e.action
    first_chunk = {i: c.start for i, c in replies.items()}
    for d in plan.delegations:
        delegate[first_chunk[d.call_turn]].append(plan.delegate_span(d))
        if d.cancel_turn is not None:
            delegate[first_chunk[d.cancel_turn]].append(d.cancel_span())
        if d.result_at_s is not None:
            results[at_boundary(d.result_at_s, chunk_s)].append(d.injected())
    frame = plan.scene is not None
    return tuple(
        ChunkTarget(
            k,
            round(k * chunk_s, 6),
            decision[k],
            action[k],
            " ".join(text[k]),
            tuple(delegate[k]),
            tuple(results[k]),
            _heard(r.windows_s, k, chunk_s),
            frame,
        )
        for k in range(n)
    )


def _action_chunk(
    plan: Plan, turn: int, over: int | None, action: str, replies: dict[int, range]
) -> int:
    chunk_s = plan.chunk_s
    speech = plan.turns[turn]
    if action in CUTTING and over is not None:
        cut_at_s = plan.turns[over].cut_at_s
        if cut_at_s is None:
            raise AlignmentError(f"{plan.sample_id}: turn {turn} cuts turn {over}, which runs on")
        return at_boundary(cut_at_s, chunk_s)
    k = math.ceil(speech.end_s / chunk_s - EPS_S) - 1
    if action == "continue_speaking" and over is not None:
        k = min(k, max(replies[over].stop - 1, math.floor(speech.start_s / chunk_s + EPS_S)))
    return max(0, min(k, round(plan.duration_s / chunk_s) - 1))


def _heard(windows_s: tuple[tuple[float, float], ...], k: int, chunk_s: float) -> tuple[int, ...]:
    start, end = k * chunk_s, (k + 1) * chunk_s
    return tuple(i for i, (a, b) in enumerate(windows_s) if a < end and b > start)


def delegation_records(plan: Plan) -> tuple[DelegationRecord, ...]:
    chunk_s = plan.chunk_s

    def first(turn: int) -> int:
        return at_boundary(plan.turns[turn].start_s, chunk_s)

    out = []
    for d in plan.delegations:
        cancel = None if d.cancel_turn is None else first(d.cancel_turn)
        if d.status == "cancelled" and cancel is None:
            cancel = next(first(x.call_turn) for x in plan.delegations if x.supersedes == d.item_id)
        result = None if d.result_at_s is None else at_boundary(d.result_at_s, chunk_s)
        out.append(
            DelegationRecord(
                d.item_id,
                d.capability,
                d.arguments,
                d.form,
                d.supersedes,
                d.status,
                d.result_text,
                first(d.call_turn),
                result,
                cancel,
            )
        )
    return tuple(out)


def check_targets(plan: Plan, chunks: tuple[ChunkTarget, ...]) -> None:
    """AlignmentError at the first chunk that breaks a rule: text only when speaking and
    words in every speaking chunk, each reply heard to its end closed by ``turn_eos`` and
    a cut one never, a cut's chunk carrying its action and listening unless a response
    starts at the cut, spans only in speaking chunks."""
    chunk_s = plan.chunk_s
    for c in chunks:
        speaking = c.decision in ("speak", "turn_eos")
        if speaking != bool(c.text):
            error = WordlessChunkError if speaking else AlignmentError
            raise error(f"{plan.sample_id}: chunk {c.index} decides {c.decision} "
                        f"with text {c.text!r}")  # fmt: skip
        if c.delegate and not speaking:
            raise AlignmentError(f"{plan.sample_id}: chunk {c.index} delegates while listening")
    starts = {at_boundary(t.start_s, chunk_s) for t in plan.turns if t.speaker == "assistant"}
    for i, t in enumerate(plan.turns):
        if t.speaker != "assistant":
            continue
        said = [c for c in chunks if c.index >= at_boundary(t.start_s, chunk_s)]
        ends = [c for c in said if c.decision == "turn_eos"]
        if t.cut_at_s is None:
            if not ends or any(c.decision == "listen" for c in said if c.index < ends[0].index):
                raise AlignmentError(f"{plan.sample_id}: turn {i} does not end with turn_eos")
            continue
        k = at_boundary(t.cut_at_s, chunk_s)
        cut = chunks[k]
        if cut.action not in CUTTING or (cut.decision != "listen") != (k in starts):
            raise AlignmentError(f"{plan.sample_id}: the cut of turn {i} at chunk {k} is "
                                 f"{cut.decision} / {cut.action}")  # fmt: skip
        if any(c.decision == "turn_eos" for c in chunks[at_boundary(t.start_s, chunk_s) : k]):
            raise AlignmentError(f"{plan.sample_id}: turn {i} is cut, yet ends with turn_eos")
