"""What a run did, from its timeline: counts, latency percentiles, the real-time factor.

``summarize`` reads records (``venus demo`` prints ``render`` of it at the end; evaluations
store ``summary_json``). Percentiles interpolate linearly between the closest ranks
(numpy's default), over the chunks in which the stage ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from venus.daemon.frontend.timeline import DEGRADATIONS, STAGES, ChunkRecord, Decision

__all__ = ["StageLatency", "Summary", "render", "summarize", "summary_json"]

DECISIONS: tuple[Decision, ...] = ("listen", "speak", "turn_eos")


@dataclass(frozen=True)
class StageLatency:
    """Latency of one stage (or ``total``) over the chunks in which it ran."""

    runs: int  # chunks in which the stage ran
    p50_ms: float
    p95_ms: float
    max_ms: float


@dataclass(frozen=True)
class Summary:
    chunks: int
    decisions: dict[str, int]  # every Decision, in order, 0 when never taken
    delegations_valid: int
    delegations_malformed: int
    results_injected: int
    deadlines_missed: int
    degraded: dict[str, int]  # every kind of degradation, in order, 0 when never
    playback_stops: int  # chunks in which queued playback was cut (the model yielded)
    latency: dict[str, StageLatency]  # stages that ran (in STAGES order), then "total"
    wall_s: float  # wall time the run took
    input_s: float  # length of the input it processed
    real_time_factor: float | None  # wall_s / input_s; below 1 is faster than real time


def summarize(records: Sequence[ChunkRecord], wall_s: float, input_s: float) -> Summary:
    """Summarize ``records``; ``wall_s`` and ``input_s`` in seconds (``input_s`` may be 0
    for an empty run, then ``real_time_factor`` is None)."""
    if wall_s < 0 or input_s < 0:
        raise ValueError(f"wall_s and input_s must be >= 0, got {wall_s}, {input_s}")
    decisions: dict[str, int] = {kind: 0 for kind in DECISIONS}
    degraded: dict[str, int] = {kind: 0 for kind in DEGRADATIONS}
    samples: dict[str, list[float]] = {key: [] for key in (*STAGES, "total")}
    valid = malformed = results = missed = stops = 0
    for rec in records:
        decisions[rec.decision] += 1
        for kind in rec.degraded:
            degraded[kind] += 1
        for key, ms in rec.latency_ms.items():
            samples[key].append(ms)
        valid += sum(d.valid for d in rec.delegations)
        malformed += sum(not d.valid for d in rec.delegations)
        results += len(rec.results)
        missed += rec.deadline_missed
        stops += rec.playback_stopped
    latency = {key: _latency(values) for key, values in samples.items() if values}
    return Summary(
        chunks=len(records),
        decisions=decisions,
        delegations_valid=valid,
        delegations_malformed=malformed,
        results_injected=results,
        deadlines_missed=missed,
        degraded=degraded,
        playback_stops=stops,
        latency=latency,
        wall_s=wall_s,
        input_s=input_s,
        real_time_factor=wall_s / input_s if input_s > 0 else None,
    )


def _latency(values: list[float]) -> StageLatency:
    p50, p95 = np.percentile(np.asarray(values, np.float64), [50, 95])
    return StageLatency(len(values), float(p50), float(p95), max(values))


def render(summary: Summary) -> str:
    """A short human-readable table (for the end of ``venus demo``)."""
    s = summary
    decided = ", ".join(f"{kind} {n}" for kind, n in s.decisions.items())
    rtf = "n/a" if s.real_time_factor is None else f"{s.real_time_factor:.2f}"
    degraded = ", ".join(f"{kind} {n}" for kind, n in s.degraded.items() if n) or "none"
    lines = [
        f"chunks       {s.chunks} ({decided})",
        f"real time    factor {rtf} ({s.wall_s:.1f} s wall for {s.input_s:.1f} s of input)",
        f"delegations  {s.delegations_valid} valid, {s.delegations_malformed} malformed; "
        f"{s.results_injected} results injected",
        f"deadlines    {s.deadlines_missed} missed; degraded: {degraded}; "
        f"playback cut in {s.playback_stops} chunks",
    ]
    if s.latency:
        lines.append(f"{'stage':<16}{'runs':>6}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
        for key, lat in s.latency.items():
            lines.append(
                f"{key:<16}{lat.runs:>6}{lat.p50_ms:>10.1f}{lat.p95_ms:>10.1f}{lat.max_ms:>10.1f}"
            )
    return "\n".join(lines)


def summary_json(summary: Summary) -> dict[str, Any]:
    """The summary as JSON-ready values (latency under ``latency_ms`` by stage)."""
    s = summary
    return {
        "chunks": s.chunks,
        "decisions": dict(s.decisions),
        "delegations": {"valid": s.delegations_valid, "malformed": s.delegations_malformed},
        "results_injected": s.results_injected,
        "deadlines_missed": s.deadlines_missed,
        "degraded": dict(s.degraded),
        "playback_stops": s.playback_stops,
        "latency_ms": {
            key: {"runs": lat.runs, "p50": lat.p50_ms, "p95": lat.p95_ms, "max": lat.max_ms}
            for key, lat in s.latency.items()
        },
        "wall_s": s.wall_s,
        "input_s": s.input_s,
        "real_time_factor": s.real_time_factor,
    }
