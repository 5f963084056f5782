"""The statistics of a written set: ``report.json`` and its Markdown rendering ``report.md``.

Built from ``index.jsonl``'s records and each sample's ``trajectory.json``, so it
describes what was written, not what was planned: counts per group, category, overlap
event kind, interruption intent, action, delegation decision, capability and status;
durations (total, min / p50 / p95 / max); the overlap ratio (event time over the set's
time); the chunk decision mix; onset alignment; each mix the config sets, achieved
against configured; and, where the config offers results early
(``delegation.early_offer_p`` > 0), how many were (injected in a chunk that listens: the
user speaks, the assistant holds the result). Nothing in it depends on the machine or the
clock, so a set's report is byte-identical like the rest of it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from venus.datagen.config import GenerationConfig

REPORT_FORMAT = 1
GROUPS = ("video", "audio")
CATEGORIES = ("offline_understanding", "proactive_duplex", "delegation")
KINDS = ("backchannel", "other_directed", "background", "interruption")
INTENTS = ("stop", "revise", "cancel_pending", "change_topic")
DECISIONS = ("listen", "speak", "turn_eos")


class TrajectorySource(Protocol):
    """Reads the trajectory a record points to (``runner.Trajectories``)."""

    def load(self, record: dict[str, Any]) -> dict[str, Any]: ...


def build(
    config: GenerationConfig,
    seed: int,
    records: Sequence[dict[str, Any]],
    trajectories: TrajectorySource,
) -> dict[str, Any]:
    """The report of the set ``records`` describe (one per sample, in index order)."""
    groups: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    intents: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    decisions: Counter[str] = Counter()
    capabilities: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    early = 0  # results injected where the assistant listens: offered early, held
    speakers: Counter[str] = Counter()
    chunk_decisions: Counter[str] = Counter()
    event_s: defaultdict[str, float] = defaultdict(float)
    durations: list[float] = []
    onset_errors: list[float] = []
    per_category_s: defaultdict[str, float] = defaultdict(float)
    for record in records:
        t = trajectories.load(record)
        groups[t["group"]] += 1
        categories[t["category"]] += 1
        durations.append(float(t["duration_s"]))
        per_category_s[t["category"]] += float(t["duration_s"])
        speakers.update(turn["speaker"] for turn in t["turns"])
        for e in t["events"]:
            kinds[e["kind"]] += 1
            if e["intent"] is not None:
                intents[e["intent"]] += 1
            actions[e["action"]] += 1
            decisions[e["delegation_decision"]] += 1
            start, end = e["window_s"]
            event_s[e["kind"]] += max(0.0, float(end) - float(start))
        decided = {c["index"]: c["decision"] for c in t["chunks"]}
        for d in t["delegations"]:
            capabilities[d["capability"]] += 1
            statuses[d["status"]] += 1
            if d["result_chunk"] is not None and decided[d["result_chunk"]] == "listen":
                early += 1
        chunk_decisions.update(c["decision"] for c in t["chunks"])
        onset_errors.append(float(t["alignment"]["max_onset_error_ms"]))
    total_s = math.fsum(durations)
    n_events = sum(kinds.values())
    mix = config.mix
    offered = (
        {"results_offered_early": early} if config.delegation.early_offer_p > 0 else {}
    )  # absent otherwise: a set without early offers reports as before the key existed
    return {
        "format": REPORT_FORMAT,
        "seed": seed,
        "samples": len(records),
        "duration_s": {"total": _r(total_s), **_spread(durations)},
        "duration_s_by_category": {c: _r(per_category_s[c]) for c in _keys(CATEGORIES, categories)},
        "groups": _counts(GROUPS, groups),
        "categories": _counts(CATEGORIES, categories),
        "turns_by_speaker": _counts(("user", "assistant", "other", "background"), speakers),
        "events": _counts(KINDS, kinds),
        "intents": _counts(INTENTS, intents),
        "actions": _counts((), actions),
        "delegation_decisions": _counts(
            ("retain", "cancel", "revise", "retry", "replace"), decisions
        ),
        "delegations": sum(capabilities.values()),
        "capabilities": _counts((), capabilities),
        "delegation_status": _counts(("completed", "failed", "cancelled"), statuses),
        **offered,
        "overlap": {
            "event_s": _r(math.fsum(event_s.values())),
            "ratio": _ratio(math.fsum(event_s.values()), total_s),
            "event_s_by_kind": {k: _r(event_s[k]) for k in _keys(KINDS, kinds)},
            "events_per_sample": _ratio(n_events, len(records)),
        },
        "chunks": {
            "total": sum(chunk_decisions.values()),
            "decisions": _counts(DECISIONS, chunk_decisions),
            "ratios": _ratios(DECISIONS, chunk_decisions),
        },
        "alignment": {"max_onset_error_ms": _spread(onset_errors)},
        "mix": {
            "group": _against(mix.group.ratios(), groups),
            "category": _against(mix.category.ratios(), categories),
            "events": _against(mix.events.ratios(), kinds),
            "intents": _against(mix.intents.ratios(), intents),
        },
    }


def _r(x: float, digits: int = 3) -> float:
    return round(x, digits) + 0.0  # no -0.0


def _keys(order: Iterable[str], counts: Counter[str]) -> list[str]:
    """``order``'s names first, then any others counted, alphabetically."""
    order = list(order)
    return order + sorted(k for k in counts if k not in order)


def _counts(order: Iterable[str], counts: Counter[str]) -> dict[str, int]:
    return {k: counts[k] for k in _keys(order, counts)}


def _ratio(part: float, whole: float) -> float:
    return _r(part / whole, 4) if whole else 0.0


def _ratios(order: Iterable[str], counts: Counter[str]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: _ratio(counts[k], total) for k in _keys(order, counts)}


def _against(configured: dict[str, float], counts: Counter[str]) -> dict[str, dict[str, float]]:
    achieved = _ratios(configured, counts)
    return {k: {"configured": _r(configured.get(k, 0.0), 4), "achieved": achieved[k]}
            for k in achieved}  # fmt: skip


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation between order statistics."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _spread(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"min": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0, "mean": 0.0}
    return {
        "min": _r(min(values)),
        "p50": _r(quantile(values, 0.5)),
        "p95": _r(quantile(values, 0.95)),
        "max": _r(max(values)),
        "mean": _r(math.fsum(values) / len(values)),
    }


# --- Markdown --------------------------------------------------------------------------------
def to_markdown(report: dict[str, Any]) -> str:
    """``report`` as Markdown tables (docs/data.md shows the ``eval`` preset's)."""
    d, o, ch = report["duration_s"], report["overlap"], report["chunks"]
    lines = [
        f"# Data set statistics (seed {report['seed']})",
        "",
        f"{report['samples']} samples, {_hours(d['total'])} of audio; "
        f"{report['delegations']} delegations; {sum(report['events'].values())} overlap events "
        f"({o['events_per_sample']:.2f} per sample).",
        "",
        "| duration (s) | min | p50 | p95 | max | mean |",
        "|---|---:|---:|---:|---:|---:|",
        f"| per sample | {d['min']} | {d['p50']} | {d['p95']} | {d['max']} | {d['mean']} |",
        "",
        "## Mix: achieved against configured",
        "",
        "| mix | name | count | achieved | configured |",
        "|---|---|---:|---:|---:|",
    ]
    counted = {"group": "groups", "category": "categories", "events": "events",
               "intents": "intents"}  # fmt: skip
    for mix, rows in report["mix"].items():
        for name, row in rows.items():
            count = report[counted[mix]].get(name, 0)
            lines.append(
                f"| {mix} | {name} | {count} | {_pct(row['achieved'])} | "
                f"{_pct(row['configured'])} |"
            )
    lines += ["", "## Overlap", "",
              f"Event time {o['event_s']} s of {d['total']} s: overlap ratio "
              f"{_pct(o['ratio'])}.", "",
              "| event kind | count | time (s) |", "|---|---:|---:|"]  # fmt: skip
    for kind, count in report["events"].items():
        lines.append(f"| {kind} | {count} | {o['event_s_by_kind'].get(kind, 0.0)} |")
    for title, key in (
        ("Actions called for", "actions"),
        ("Delegation decisions", "delegation_decisions"),
        ("Capabilities delegated", "capabilities"),
        ("Delegation outcomes", "delegation_status"),
        ("Turns by speaker", "turns_by_speaker"),
    ):
        lines += ["", f"## {title}", "", f"| {key.replace('_', ' ')} | count |", "|---|---:|"]
        lines += [f"| {name} | {count} |" for name, count in report[key].items()]
        if key == "delegation_status" and "results_offered_early" in report:
            results = report[key]["completed"] + report[key]["failed"]
            lines += ["", f"{report['results_offered_early']} of {results} results offered "
                      "early: while the user spoke, held until their announcement."]  # fmt: skip
    lines += ["", "## Chunks", "", f"{ch['total']} chunks.", "",
              "| decision | count | share |", "|---|---:|---:|"]  # fmt: skip
    for name, count in ch["decisions"].items():
        lines.append(f"| {name} | {count} | {_pct(ch['ratios'][name])} |")
    a = report["alignment"]["max_onset_error_ms"]
    lines += ["", "## Alignment", "",
              "Largest onset error per sample (ms, measured against planned): "
              f"p50 {a['p50']}, p95 {a['p95']}, max {a['max']}.", ""]  # fmt: skip
    return "\n".join(lines)


def _pct(ratio: float) -> str:
    return f"{100 * ratio:.1f}%"


def _hours(seconds: float) -> str:
    h, rest = divmod(round(seconds), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"
