"""``Track`` s for delegation scoring: the reference from a trajectory, the hypothesis
from a timeline (and the items its harness made), and a trajectory as a timeline.

**Items** (``items.jsonl``, one object a line, oldest first): ``item_id``, ``capability``,
``arguments``, ``chunk_index`` (the chunk whose span made it), ``span`` (that span's text),
``state``, ``result`` (its final result's text, null before one). They tie a timeline's
results (``ResultRecord.item_id``) to its calls and resolve item ids in decisions; without
them a hypothesis still scores, but its calls have no result times and a decision naming
an id is counted under that id.

**Spoken** (both sides, the same rule): a reply starts at a ``speak`` / ``turn_eos``
chunk after a ``listen`` or ``turn_eos`` chunk (or at chunk 0); a result is spoken at the
first reply start at or after the chunk it was injected at (the harness hands a reply
every result offered before it starts). Its words are that reply's decoded text
(``reply_text``), not heard (no ASR, no judge).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from venus.daemon.frontend.delegation import ParsedCall, parse_call
from venus.daemon.frontend.timeline import ChunkRecord, DelegationRecord, ResultRecord
from venus.errors import EvaluationError
from venus.evaluation.delegation import Call, Decision, Track

__all__ = [
    "hypothesis_track",
    "journal_items",
    "read_items",
    "reference_items",
    "reference_timeline",
    "reference_track",
    "reply_text",
    "write_items",
]

Item = Mapping[str, Any]
SPEAKING = ("speak", "turn_eos")


def reply_starts(decisions: Sequence[str]) -> list[int]:
    """The positions where a reply starts (see the module doc)."""
    return [
        i
        for i, d in enumerate(decisions)
        if d in SPEAKING and (i == 0 or decisions[i - 1] in ("listen", "turn_eos"))
    ]


def _spoken(result: int | None, starts: Sequence[int]) -> int | None:
    if result is None:
        return None
    return next((s for s in starts if s >= result), None)


def reply_text(texts: Sequence[str], decisions: Sequence[str], start: int | None) -> str:
    """The text of the reply starting at position ``start`` ("" for None): its chunks to
    its ``turn_eos`` chunk, or to the last before a ``listen``."""
    if start is None:
        return ""
    said = []
    for text, decision in zip(texts[start:], decisions[start:], strict=True):
        if decision not in SPEAKING:
            break
        said.append(text.strip())
        if decision == "turn_eos":
            break
    return " ".join(t for t in said if t)


def _decision(p: ParsedCall, chunk: int, capability_of: Mapping[str, str]) -> Decision | None:
    """The decision a span takes (None: a plain call)."""
    if p.target is None:
        return None
    concerned = _resolve(p.target, capability_of)
    if p.action in ("cancel", "retry"):
        return Decision(chunk, p.action, concerned)
    return Decision(chunk, "revise" if concerned == p.name else "replace", concerned)


def _resolve(target: str, capability_of: Mapping[str, str]) -> str:
    """The capability of the item ``target`` names: an id (full, or its first 8 or more
    characters) of a known item, else ``target`` itself (work named by its capability)."""
    if target in capability_of:
        return capability_of[target]
    hits = {c for i, c in capability_of.items() if len(target) >= 8 and i.startswith(target)}
    return hits.pop() if len(hits) == 1 else target


def reference_track(traj: Mapping[str, Any]) -> Track:
    """The trajectory's targets: calls from ``delegations`` (``form`` call), decisions from
    the chunks' spans, spoken chunks from the chunks' decisions."""
    chunks = traj["chunks"]
    texts, chosen = [c["text"] for c in chunks], [c["decision"] for c in chunks]
    starts = reply_starts(chosen)
    capability_of = {d["item_id"]: d["capability"] for d in traj["delegations"]}
    calls = []
    for d in traj["delegations"]:
        if d["form"] != "call":
            continue
        spoken = _spoken(d["result_chunk"], starts)
        said = reply_text(texts, chosen, spoken)  # chunk i is chunks[i]
        calls.append(
            Call(d["call_chunk"], d["capability"], d["arguments"], d["result_chunk"], spoken,
                 said, d["result_text"] if d["result_chunk"] is not None else "")
        )  # fmt: skip
    decisions = []
    for c in chunks:
        for span in c["delegate"]:
            made = _decision(parse_call(span), c["index"], capability_of)
            if made is not None:
                decisions.append(made)
    return Track(
        traj["sample_id"], traj["category"], traj["chunk_s"], tuple(calls), tuple(decisions)
    )


def hypothesis_track(
    sample_id: str,
    category: str,
    chunk_s: float,
    records: Sequence[ChunkRecord],
    items: Sequence[Item] = (),
) -> Track:
    """What a run delegated: every valid span of ``records``, re-parsed for its decision;
    each call tied to the item its harness made of it (``items``: same chunk and span
    text, else same chunk and capability) and so to the chunk its result came back at."""
    texts, chosen = [r.text for r in records], [r.decision for r in records]
    starts_at = reply_starts(chosen)
    starts = [records[i].index for i in starts_at]
    position = {r.index: i for i, r in enumerate(records)}
    result_at: dict[str, int] = {}
    for r in records:
        for res in r.results:
            result_at.setdefault(res.item_id, r.index)
    capability_of = {str(i["item_id"]): str(i["capability"]) for i in items}
    unused = list(items)
    calls, decisions, malformed = [], [], 0
    for r in records:
        for d in r.delegations:
            if not d.valid:
                malformed += 1
                continue
            p = parse_call(d.raw)
            if not p.valid:  # a record says valid but its span does not parse: count it
                malformed += 1
                continue
            made = _decision(p, r.index, capability_of)
            if made is not None:
                decisions.append(made)
            if p.action != "call" or p.name is None:
                continue
            item = _take(unused, r.index, d.raw, p.name)
            result = result_at.get(str(item["item_id"])) if item is not None else None
            spoken = _spoken(result, starts)
            said = reply_text(texts, chosen, None if spoken is None else position[spoken])
            got = str((item or {}).get("result") or "") if result is not None else ""
            calls.append(Call(r.index, p.name, p.arguments or {}, result, spoken, said, got))
    return Track(sample_id, category, chunk_s, tuple(calls), tuple(decisions), malformed)


def _take(items: list[Item], chunk: int, span: str, capability: str) -> Item | None:
    """The first unused item made at ``chunk`` from ``span`` (else of ``capability``),
    removed from ``items``."""
    for key, value in (("span", span), ("capability", capability)):
        for n, item in enumerate(items):
            if item.get("chunk_index") == chunk and item.get(key) == value:
                return items.pop(n)
    return None


def reference_items(traj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The trajectory's work items as ``items.jsonl`` rows (a retry's span is its
    ``{"retry"}``, a call's the span in its chunk that calls its capability)."""
    chunks = {c["index"]: c for c in traj["chunks"]}
    used: set[tuple[int, int]] = set()
    rows = []
    for d in traj["delegations"]:
        k = d["call_chunk"]
        span = ""
        for n, raw in enumerate(chunks[k]["delegate"]):
            p = parse_call(raw)
            fits = (
                (p.action == "retry" and p.target == d["supersedes"])
                if d["form"] == "retry"
                else (p.action == "call" and p.name == d["capability"])
            )
            if fits and (k, n) not in used:
                used.add((k, n))
                span = raw
                break
        rows.append(
            {
                "item_id": d["item_id"],
                "capability": d["capability"],
                "arguments": d["arguments"],
                "chunk_index": k,
                "span": span,
                "state": d["status"],
                "result": d["result_text"] if d["result_chunk"] is not None else None,
            }
        )
    return rows


def reference_timeline(traj: Mapping[str, Any]) -> list[ChunkRecord]:
    """The trajectory's targets as timeline records (the spans as decoded, the results
    as injected, replies numbered by ``reply_starts``; counts and latencies 0): what a
    perfect system's run would write."""
    chunks = traj["chunks"]
    decisions = [c["decision"] for c in chunks]
    starts = set(reply_starts(decisions))
    records, reply = [], -1
    for n, c in enumerate(chunks):
        speaking = c["decision"] in ("speak", "turn_eos")
        reply += n in starts
        ends = speaking and (
            c["decision"] == "turn_eos" or n + 1 == len(chunks) or decisions[n + 1] == "listen"
        )
        spans = []
        for raw in c["delegate"]:
            p = parse_call(raw)
            spans.append(
                DelegationRecord(
                    raw=raw, valid=p.valid, name=p.name, arguments=p.arguments, error=p.error
                )
            )
        records.append(
            ChunkRecord(
                index=c["index"],
                start_s=float(c["start_s"]),
                decision=c["decision"],
                text=c["text"],
                text_tokens=len(c["text"].split()),
                speech_tokens=0,
                reply_id=reply if speaking else None,
                reply_ended=ends,
                delegations=tuple(spans),
                results=tuple(
                    ResultRecord(item_id=json.loads(r)["item"], tokens=0) for r in c["results"]
                ),
                context_tokens=0,
                evicted_tokens=0,
                vision=bool(c["frame"]),
                speech_ratio=0.0,
                playback_stopped=False,
                latency_ms={"total": 0.0},
                deadline_missed=False,
                degraded=(),
            )
        )
    return records


def journal_items(journal: Path, session_id: str) -> list[dict[str, Any]]:
    """A journal's items of one session as ``items.jsonl`` rows, oldest first."""
    from venus.daemon.harness.journal import Journal

    with Journal.open(journal, read_only=True) as j:
        items = list(reversed(j.items(session_id=session_id)))
        results = {i.id: j.result(i.id) for i in items}
    return [{"item_id": i.id, "capability": i.capability, "arguments": dict(i.arguments),
             "chunk_index": i.chunk_index, "span": i.text, "state": str(i.state.value),
             "result": None if (r := results[i.id]) is None else r[1].text()}
            for i in items]  # fmt: skip


def write_items(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")


def read_items(path: Path) -> list[dict[str, Any]]:
    """``items.jsonl``'s rows; none when there is no such file."""
    if not path.is_file():
        return []
    try:
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise EvaluationError(f"{path}: not JSON Lines of items ({e})") from e
