"""Figures of ``venus eval duplex``: one sample's timeline, and the scenarios side by side.

- :func:`timeline_png`: who spoke when in one sample. Lanes, top to bottom: the user's
  speech (VAD segments of ``input.wav``), the assistant's (of ``output.wav``), the
  daemon's decision per chunk (``timeline.jsonl``: listen / speak / turn_eos cells, a cut
  marked with a red bar at the chunk's boundary) and its delegation calls, when there are
  any. The overlap window of ``metadata.json`` is shaded across every lane.
- :func:`scenario_bars_png`: per scenario (task folder) its headline rate: the
  interruption response rate, the continuation rate under backchannel, other-directed
  and background speech; one bar per policy, each labelled, on a 0-100 % axis.

Both draw on a :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot, no
global state, no display) at a fixed size and dpi; the PNG carries no software version,
so the same inputs give the same bytes. matplotlib is imported inside the functions, so
importing this module (and ``venus --help``) stays fast.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus.daemon.frontend.outputs import read_wav_mono
from venus.daemon.frontend.timeline import ChunkRecord, read_timeline
from venus.evaluation.summary import ScenarioSummary
from venus.evaluation.vad import Segment, model_segments, user_segments

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DECISION_COLOURS",
    "WINDOW_COLOUR",
    "overlap_window",
    "scenario_bars_figure",
    "scenario_bars_png",
    "timeline_figure",
    "timeline_png",
]

DPI = 100
TIMELINE_SIZE_IN = (12.0, 3.2)  # 1200 x 320 px at DPI
BARS_SIZE_IN = (10.0, 4.5)  # 1000 x 450 px at DPI
WINDOW_COLOUR = "#ffd54f"  # the overlap window (amber), drawn under everything else
WINDOW_ALPHA = 0.5
USER_COLOUR = "#1e88e5"
ASSISTANT_COLOUR = "#43a047"
CUT_COLOUR = "#e53935"
DELEGATION_COLOUR = "#6a1b9a"
DECISION_COLOURS = {"listen": "#e0e0e0", "speak": "#81c784", "turn_eos": "#64b5f6"}
SCENARIO_ORDER = ("interruption", "backchannel", "other_directed", "background")  # score.py
PNG_METADATA: dict[str, str | None] = {"Software": None}  # no matplotlib version in the bytes


def timeline_png(
    input_wav: Path,
    output_wav: Path,
    timeline_jsonl: Path | None,
    metadata: Mapping[str, Any] | Sequence[Any],
    path: Path,
    *,
    task: str,
    sample_id: str,
    policy: str,
) -> Path:
    """One sample's figure (module doc) written to ``path`` as PNG (its folder created);
    ``timeline_jsonl`` None or missing: no decision lane content. Returns ``path``."""
    fig = timeline_figure(
        input_wav,
        output_wav,
        timeline_jsonl,
        metadata,
        task=task,
        sample_id=sample_id,
        policy=policy,
    )
    return _save(fig, path)


def timeline_figure(
    input_wav: Path,
    output_wav: Path,
    timeline_jsonl: Path | None,
    metadata: Mapping[str, Any] | Sequence[Any],
    *,
    task: str,
    sample_id: str,
    policy: str,
) -> Figure:
    """The figure :func:`timeline_png` saves (for tests and notebooks)."""
    user_audio, user_rate = read_wav_mono(input_wav)
    model_audio, model_rate = read_wav_mono(output_wav)
    duration_s = len(user_audio) / user_rate
    user = user_segments(user_audio, user_rate)
    model = model_segments(model_audio, model_rate)
    records = (
        read_timeline(timeline_jsonl)
        if timeline_jsonl is not None and timeline_jsonl.is_file()
        else []
    )
    window = overlap_window(metadata)

    fig = _figure(TIMELINE_SIZE_IN)
    ax = fig.add_subplot()
    lanes = ["user", "assistant", "decision"]
    if any(r.delegations for r in records):
        lanes.append("delegation")
    y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}  # first lane on top
    if window is not None:
        ax.axvspan(window.start_s, window.end_s, color=WINDOW_COLOUR, alpha=WINDOW_ALPHA, lw=0)
        ax.text(
            (window.start_s + window.end_s) / 2, len(lanes) - 0.45, task,
            ha="center", va="bottom", fontsize=8,
        )  # fmt: skip
    _segments(ax, user, y["user"], USER_COLOUR)
    _segments(ax, model, y["assistant"], ASSISTANT_COLOUR)
    _decisions(ax, records, y["decision"], y.get("delegation"))
    ax.set_xlim(0, duration_s)
    ax.set_ylim(-0.6, len(lanes) - 0.1)
    ax.set_yticks(list(y.values()), list(y))
    ax.set_xlabel("time (s)")
    ax.set_title(f"{task} / {sample_id} / {policy}", fontsize=10)
    ax.grid(axis="x", color="#bdbdbd", lw=0.5)
    ax.set_axisbelow(True)
    return fig


def overlap_window(metadata: Mapping[str, Any] | Sequence[Any]) -> Segment | None:
    """The annotated window: ``timestamps`` (v1.5 ``metadata.json``) or the first event's
    ``timestamp`` (v1 lists); None when there is none."""
    meta = metadata[0] if isinstance(metadata, Sequence) and metadata else metadata
    if not isinstance(meta, Mapping):
        return None
    value = meta.get("timestamps", meta.get("timestamp"))
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    try:
        return Segment(float(value[0]), float(value[1]))
    except (TypeError, ValueError):
        return None


def scenario_bars_png(
    reports: Mapping[str, Sequence[ScenarioSummary | Mapping[str, Any]]], path: Path
) -> Path:
    """Per-scenario headline rates, one bar per policy, written to ``path`` as PNG.

    ``reports``: policy -> its scenarios (:class:`ScenarioSummary`, or their JSON objects
    as in ``OUT/<policy>/report.json`` ``scenarios``), in the order the bars go.

    Raises:
        ValueError: ``reports`` is empty or holds no scenario.
    """
    return _save(scenario_bars_figure(reports), path)


def scenario_bars_figure(
    reports: Mapping[str, Sequence[ScenarioSummary | Mapping[str, Any]]],
) -> Figure:
    """The figure :func:`scenario_bars_png` saves."""
    if not reports:
        raise ValueError("no policy reports to plot; give at least one policy's scenarios")
    rates = {policy: dict(_rate(s) for s in scenarios) for policy, scenarios in reports.items()}
    groups = sorted({key for r in rates.values() for key in r}, key=_group_order)
    if not groups:
        raise ValueError(
            "the reports hold no overlap scenario to plot (v1.5 task folders: "
            "user_interruption, user_backchannel, talking_to_other, background_speech)"
        )
    fig = _figure(BARS_SIZE_IN)
    ax = fig.add_subplot()
    width = 0.8 / len(rates)
    for i, (policy, by_group) in enumerate(rates.items()):
        xs = [g + (i - (len(rates) - 1) / 2) * width for g in range(len(groups))]
        values = [by_group.get(key) for key in groups]
        heights = [100 * v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width * 0.95, label=policy)
        labels = [f"{100 * v:.0f}%" if v is not None else "n/a" for v in values]
        ax.bar_label(bars, labels, padding=2, fontsize=8)
    ax.set_xticks(range(len(groups)), [f"{task}\n{headline}" for task, _s, headline in groups])
    ax.set_ylim(0, 100)
    ax.set_yticks(range(0, 101, 20), [f"{v}%" for v in range(0, 101, 20)])
    ax.set_ylabel("rate")
    ax.set_title("Overlap behaviour per scenario (headline rate)", fontsize=10, pad=16)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=len(rates), frameon=False)
    ax.grid(axis="y", color="#e0e0e0", lw=0.5)
    ax.set_axisbelow(True)
    return fig


def _rate(s: ScenarioSummary | Mapping[str, Any]) -> tuple[tuple[str, str, str], float]:
    """``((task, scenario, headline), headline_rate)`` of one scenario."""
    if isinstance(s, ScenarioSummary):
        return (s.task, s.scenario, s.headline), s.headline_rate
    return (str(s["task"]), str(s["scenario"]), str(s["headline"])), float(s["headline_rate"])


def _group_order(group: tuple[str, str, str]) -> tuple[int, str]:
    task, scenario, _headline = group
    rank = SCENARIO_ORDER.index(scenario) if scenario in SCENARIO_ORDER else len(SCENARIO_ORDER)
    return rank, task


def _segments(ax: Any, segments: Sequence[Segment], y: float, colour: str) -> None:
    spans = [(s.start_s, s.duration_s) for s in segments]
    if spans:
        ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colour)


def _decisions(ax: Any, records: Sequence[ChunkRecord], y: float, y_calls: float | None) -> None:
    """The chunk cells on lane ``y``, cuts as red bars, delegations as markers on
    ``y_calls``."""
    if not records:
        return
    chunk_s = _chunk_s(records)
    for decision, colour in DECISION_COLOURS.items():
        spans = [(r.start_s, chunk_s) for r in records if r.decision == decision]
        if spans:
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colour, label=decision)
    cuts = [r.start_s + chunk_s for r in records if r.playback_stopped]
    if cuts:
        ax.vlines(cuts, y - 0.45, y + 0.45, colors=CUT_COLOUR, lw=2, label="cut")
    calls = [r.start_s + chunk_s / 2 for r in records for _ in r.delegations]
    if calls and y_calls is not None:
        ax.plot(calls, [y_calls] * len(calls), "v", color=DELEGATION_COLOUR, label="delegation")
    ax.legend(loc="upper right", bbox_to_anchor=(1.0, -0.22), ncols=5, fontsize=7, frameon=False)


def _chunk_s(records: Sequence[ChunkRecord]) -> float:
    """The chunk period: the smallest step between chunk starts (0.08 s with one chunk)."""
    starts = sorted({r.start_s for r in records})
    steps = [b - a for a, b in itertools.pairwise(starts) if b > a]
    return min(steps) if steps else 0.08


def _figure(size_in: tuple[float, float]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size_in, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, metadata=PNG_METADATA)
    return path
