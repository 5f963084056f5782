"""Other systems' published Full-Duplex-Bench figures, quoted for reference with their source.

Only figures read in the source itself are quoted; nothing is derived or estimated. They
come from other data (the benchmark's own v1 sets: 200 synthetic interruptions, CANDOR and
synthetic pauses, ICC backchannels) and another evaluator (ASR word timings, a GPT-4o
judge), so they are context for our numbers, not a ranking against them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "V1_COLUMNS",
    "V1_PUBLISHED",
    "V1_SOURCE",
    "V15_NOTE",
    "PublishedV1",
    "published_markdown",
]

V1_SOURCE = (
    "https://github.com/DanielLin94144/Full-Duplex-Bench/blob/main/v1_v1.5/README.md "
    '("Evaluation Results, Full-Duplex-Bench (v1.0)"; read at commit 6d65066)'
)
V15_NOTE = (
    "Full-Duplex-Bench v1.5 (arXiv 2507.23159, https://arxiv.org/abs/2507.23159) benchmarks "
    "five agents on the four overlap scenarios, but its per-scenario behaviour rates and "
    "stop / response latencies are not quoted here: the copies we could search hold the "
    "paper's abstract and not its result tables, and the repository's README shows the "
    "v1.5 results only as images. Read them in the paper."
)

# Column key -> header; a value None is a figure the source does not give.
V1_COLUMNS = {
    "pause_synthetic_tor": "pause TOR synthetic ↓",
    "pause_candor_tor": "pause TOR CANDOR ↓",
    "backchannel_tor": "backchannel TOR ↓",
    "turn_taking_tor": "turn-taking TOR ↑",
    "turn_taking_latency_s": "turn-taking latency (s) ↓",
    "interruption_tor": "interruption TOR ↑",
    "interruption_latency_s": "interruption latency (s) ↓",
}


@dataclass(frozen=True)
class PublishedV1:
    """One row of the v1.0 results table (``V1_SOURCE``), as published."""

    system: str
    pause_synthetic_tor: float
    pause_candor_tor: float
    backchannel_tor: float
    turn_taking_tor: float
    turn_taking_latency_s: float
    interruption_tor: float
    interruption_latency_s: float
    note: str = ""


V1_PUBLISHED = (
    PublishedV1("PersonaPlex", 0.584, 0.662, 0.327, 0.992, 0.070, 1.000, 0.400),
    PublishedV1("dGSLM", 0.934, 0.935, 0.691, 0.975, 0.352, 0.917, 2.531),
    PublishedV1("Moshi", 0.985, 0.980, 1.000, 0.941, 0.265, 1.000, 0.257),
    PublishedV1("Freeze-Omni", 0.642, 0.481, 0.636, 0.336, 0.953, 0.867, 1.409),
    PublishedV1("Gemini Live 2.0", 0.255, 0.310, 0.091, 0.655, 1.301, 0.891, 1.183, "deprecated"),
    PublishedV1("GPT-Realtime", 0.010, 0.120, 0.000, 1.000, 1.470, 0.970, 1.500),
)


def published_markdown(ours: Sequence[tuple[str, dict[str, float | None]]]) -> list[str]:
    """The published v1 table with ``ours`` (system name, column key -> value; a missing
    key is a measure our data or evaluator does not give) as the first rows."""
    keys = list(V1_COLUMNS)
    lines = [
        "## Published figures, for reference",
        "",
        "Full-Duplex-Bench v1.0 as published (TOR: take-over rate; latencies in seconds). "
        f"Source: {V1_SOURCE}. The published rows are on the benchmark's own v1 data with "
        "its ASR-based evaluator; ours are our judge-free v1 measures on the data scored "
        "here (`-`: not in this data). Not comparable figure for figure.",
        "",
        "| system | " + " | ".join(V1_COLUMNS.values()) + " |",
        "|---|" + "---:|" * len(keys),
    ]
    for name, values in ours:
        lines.append(f"| {name} (ours) | " + " | ".join(_num(values.get(k)) for k in keys) + " |")
    for row in V1_PUBLISHED:
        name = f"{row.system} ({row.note})" if row.note else row.system
        lines.append(f"| {name} | " + " | ".join(_num(getattr(row, k)) for k in keys) + " |")
    lines += ["", V15_NOTE]
    return lines


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
