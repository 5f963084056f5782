"""The delegation report: ``delegation.json`` (the set's figures and every sample's) and
``delegation.md`` (tables), from :func:`venus.evaluation.delegation.score_set`."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus.evaluation.delegation import DECISION_KINDS, Dist, SampleScore, SetScore
from venus.evaluation.markdown import cell, pct, table

__all__ = ["REPORT_JSON", "REPORT_MD", "render_markdown", "report_json", "write_report"]

REPORT_JSON, REPORT_MD = "delegation.json", "delegation.md"
FORMAT = 1


def _plain(value: Any) -> Any:
    """Floats rounded to 1e-4 (none are infinite or NaN: those would be None)."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _sample(s: SampleScore) -> dict[str, Any]:
    return {
        "sample_id": s.sample_id,
        "category": s.category,
        "reference_calls": s.reference_calls,
        "hypothesis_calls": s.hypothesis_calls,
        "matched": len(s.pairs),
        "missed": list(s.missed),
        "unnecessary": list(s.unnecessary),
        "malformed": s.malformed,
        "pass_at_1": s.pass_at_1,
        "decisions": {
            k: dict(zip(("reference", "hypothesis", "matched"), v, strict=True))
            for k, v in s.decisions.items()
        },
        "pairs": [
            {
                "capability": p.reference.capability,
                "reference_chunk": p.reference.chunk,
                "hypothesis_chunk": p.hypothesis.chunk,
                "arguments_right": p.arguments_right,
                "arguments": p.arguments,
                "hypothesis_arguments": dict(p.hypothesis.arguments),
                "reference_arguments": dict(p.reference.arguments),
                "right_by_argument": {key: right for key, right, _ in p.checks},
                "result_chunk": p.hypothesis.result_chunk,
                "spoken_chunk": p.hypothesis.spoken_chunk,
                "said": p.hypothesis.said,
                "reference_said": p.reference.said,
            }
            for p in s.pairs
        ],
        "time_to_result_s": s.seconds("result", "hypothesis"),
        "time_to_spoken_s": s.seconds("spoken", "hypothesis"),
    }


def report_json(
    system: str,
    data: Path,
    figures: SetScore,
    scores: Sequence[SampleScore],
    missing: Sequence[str] = (),
) -> dict[str, Any]:
    totals = dataclasses.asdict(figures)
    totals["decisions"] = {
        k: dict(zip(("reference", "hypothesis", "matched"), v, strict=True))
        for k, v in figures.decisions.items()
    }
    doc: dict[str, Any] = _plain(
        {
            "format": FORMAT,
            "system": system,
            "data": str(data),
            "missing": list(missing),
            "set": totals,
            "samples": [_sample(s) for s in scores],
        }
    )
    return doc


def write_report(
    system: str,
    data: Path,
    figures: SetScore,
    scores: Sequence[SampleScore],
    out: Path,
    missing: Sequence[str] = (),
) -> tuple[Path, Path]:
    """``out/delegation.json`` and ``out/delegation.md`` (``out`` made if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    doc = report_json(system, data, figures, scores, missing)
    (out / REPORT_JSON).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", "utf-8")
    (out / REPORT_MD).write_text(render_markdown(system, data, figures, missing), "utf-8")
    return out / REPORT_JSON, out / REPORT_MD


def _pct(v: float | None) -> str:
    return pct(v, "n/a")


def _s(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _dist(d: Dist) -> list[str]:
    return [str(d.n), _s(d.mean_s), _s(d.median_s), _s(d.max_s)]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return table(head, rows, left=len(head))


def render_markdown(system: str, data: Path, f: SetScore, missing: Sequence[str] = ()) -> str:
    lines = [
        "# Delegation scores",
        "",
        f"- system `{system}`, data `{data}`: {f.samples} samples, {f.with_calls} with "
        f"reference calls, {f.samples - f.with_calls} without"
        + (f"; {len(missing)} without a hypothesis (not scored)" if missing else ""),
        "",
        "## Calls",
        "",
    ]
    lines += _table(
        ["metric", "value"],
        [
            [
                "reference calls / hypothesis calls / matched",
                f"{f.reference_calls} / {f.hypothesis_calls} / {f.matched}",
            ],
            ["tool selection precision", _pct(f.precision)],
            ["tool selection recall", _pct(f.recall)],
            ["tool selection F1", _pct(f.f1)],
            ["argument accuracy (per argument)", _pct(f.argument_accuracy)],
            ["argument accuracy (per call)", _pct(f.call_accuracy)],
            ["Pass@1 (samples with reference calls)", _pct(f.pass_at_1)],
            ["missed delegation rate", _pct(f.missed_rate)],
            ["unnecessary delegation rate (of hypothesis calls)", _pct(f.unnecessary_rate)],
            ["samples without reference calls that delegated", _pct(f.other_with_calls_rate)],
            ["malformed spans", str(f.malformed)],
            ["results returned (matched calls the reference answered)", _pct(f.results_returned)],
            ["results spoken", _pct(f.results_spoken)],
            [
                "result words said (of those the reference's reply took from the result)",
                _pct(f.result_words_said),
            ],
        ],
    )
    lines += ["", "## Arguments by key (matched calls)", ""]
    lines += _table(
        ["argument", "right / matched", "the value said most (times)"],
        [
            [a.argument, f"{a.right} / {a.matched}", f"{cell(a.said_most, 60)} ({a.said_most_n})"]
            for a in f.arguments
        ],
    )
    lines += ["", "## Decisions on pending work", ""]
    lines += _table(
        ["kind", "reference", "hypothesis", "matched"],
        [[k, *map(str, f.decisions[k])] for k in DECISION_KINDS],
    )
    lines += [
        "",
        f"precision {_pct(f.decision_precision)}, recall {_pct(f.decision_recall)}, "
        f"F1 {_pct(f.decision_f1)}",
        "",
        "## Times (s)",
        "",
    ]
    lines += _table(
        ["time", "side", "n", "mean", "median", "max"],
        [
            ["to result", "system, matched calls", *_dist(f.time_to_result)],
            ["to result", "reference, matched calls", *_dist(f.reference_time_to_result)],
            ["to result", "reference, all calls", *_dist(f.all_reference_time_to_result)],
            ["to spoken result", "system, matched calls", *_dist(f.time_to_spoken)],
            ["to spoken result", "reference, matched calls", *_dist(f.reference_time_to_spoken)],
            ["to spoken result", "reference, all calls", *_dist(f.all_reference_time_to_spoken)],
        ],
    )
    return "\n".join(lines) + "\n"
