"""The reports of ``venus eval duplex``: one per policy, and the policies side by side.

- ``OUT/<policy>/report.json`` and ``report.md``: what ``venus eval score`` writes, for
  that policy's outputs (:func:`venus.evaluation.summary.write_report`).
- ``OUT/report.json``: the run (data, engines, seed, temperature, limit, wall time) and
  per policy its scenario and v1 summaries and its timeline summary (below); per-sample
  detail stays in the policies' own reports.
- ``OUT/report.md``: the scenario, latency and v1 tables with every policy side by side
  (:func:`venus.evaluation.summary.render_markdown`), then the *timeline labels*: per task
  and policy, how the timeline labelled the overlaps before the audio confirmed them, the
  share the audio confirmed, and how many outputs hold any speech at all (an output the
  VAD finds silent confirms nothing), and *first reply as the data's*: of the cuts of
  ``venus datagen`` samples, those whose first reply opens with the words of the data's
  reply (:func:`first_reply_right`), which tells an overlap that found the model silent
  because it answered another question (a reply of another length) from a turn-taking
  fault; then the published figures of other systems (:mod:`venus.evaluation.published`)
  and how the run was made.
- ``OUT/plots/scenarios.png`` (the headline rate per scenario, a bar per policy) and
  ``OUT/plots/<policy>/<task>-<id>.png`` (timelines of the first ``PLOTS_PER_TASK``
  samples of each task): with matplotlib (the ``eval`` extra); without it the plots are
  skipped with a warning.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from venus.daemon.frontend.timeline import ChunkRecord, TimelineError, read_timeline
from venus.evaluation.asr import normalise_text
from venus.evaluation.duplex import DuplexRun
from venus.evaluation.metrics import Behaviour, Rules
from venus.evaluation.published import published_markdown
from venus.evaluation.reference import REFERENCE, passes, reference_scores
from venus.evaluation.score import SampleRef, SampleScore, find_samples
from venus.evaluation.source import data_reply
from venus.evaluation.summary import ScoreReport, render_markdown, summarize, write_report

log = logging.getLogger(__name__)

PLOTS_PER_TASK = 3  # timeline figures per task and policy, in OUT/plots/<policy>/
OPENING_WORDS = 3  # a first reply is the data's when it opens with the same words

__all__ = [
    "RunInfo",
    "TimelineSummary",
    "first_reply",
    "first_reply_right",
    "timeline_summary",
    "write_duplex_report",
]

FORMAT = 1
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
V1_TASK_KEYS = {  # our v1 measures -> the published table's columns
    ("TOR (interruption)", None): ("interruption_tor", "interruption_latency_s"),
    ("TOR (pause handling)", "synthetic_pause_handling"): ("pause_synthetic_tor", None),
    ("TOR (pause handling)", "candor_pause_handling"): ("pause_candor_tor", None),
    ("turn-taking", None): ("turn_taking_tor", "turn_taking_latency_s"),
}


@dataclass(frozen=True)
class RunInfo:
    """How the run was made (for the reports)."""

    data: str
    out: str
    engines: str
    seed: int
    temperature: float  # the model's sampling temperature; 0: greedy
    limit: int | None
    jobs: int
    wall_s: float
    command: str
    camera: str = "none"  # what the samples saw (the report's camera line)
    listen_bias: float = 0.0  # added to the <|listen|> logit at each decision


@dataclass(frozen=True)
class TimelineSummary:
    """One task under one policy: the timeline's labels and what the audio made of them."""

    task: str
    samples: int
    timeline_labels: dict[str, int]  # RESPOND / RESUME / UNCERTAIN -> count
    confirmed: int  # overlaps whose audio label equals the timeline's
    with_output_speech: int  # outputs in which the VAD finds any speech
    first_reply_known: int = 0  # overlaps whose cut has a data reply to compare with
    first_reply_right: int = 0  # of those, first replies that open as the data's


def first_reply(records: Sequence[ChunkRecord]) -> str:
    """The text of the first reply in a timeline, every chunk of it ("" if none)."""
    reply = next((r.reply_id for r in records if r.decision == "speak"), None)
    if reply is None:
        return ""
    return "".join(r.text for r in records if r.decision == "speak" and r.reply_id == reply)


def first_reply_right(records: Sequence[ChunkRecord], data: str) -> bool:
    """Whether the timeline's first reply opens with the first ``OPENING_WORDS`` words of
    ``data`` (all of them if fewer), case and punctuation aside. Content, roughly: a
    holding line, a watch's acknowledgement and a fact each open their own way."""
    want = normalise_text(data).split()[:OPENING_WORDS]
    return bool(want) and normalise_text(first_reply(records)).split()[: len(want)] == want


def first_replies(out: Path, policy: str, replies: Mapping[SampleRef, str]) -> dict[str, bool]:
    """``task/id`` -> whether ``policy``'s first reply there is the data's, for the cuts
    of ``replies`` (each with the data's reply, :func:`data_reply`) with a readable
    timeline under ``out/<policy>/``."""
    right = {}
    for ref, data in replies.items():
        timeline = out / policy / ref.task / ref.sample_id / "timeline.jsonl"
        if not timeline.is_file():
            continue
        try:
            records = read_timeline(timeline)
        except TimelineError as e:
            log.warning("%s: no first reply read (%s)", timeline, e)
            continue
        right[ref.name] = first_reply_right(records, data)
    return right


def timeline_summary(
    scores: Sequence[SampleScore], first: Mapping[str, bool] | None = None
) -> tuple[TimelineSummary, ...]:
    """Per task, over the overlaps of ``scores`` that carry a timeline label; ``first``
    (``task/id`` -> first reply as the data's) where known."""
    first = first or {}
    out = []
    for task in sorted({s.task for s in scores}):
        group = [s for s in scores if s.task == task and s.overlap is not None]
        labels = Counter(s.overlap.timeline_label for s in group if s.overlap is not None)
        if not group or None in labels:
            continue
        out.append(
            TimelineSummary(
                task=task,
                samples=len(group),
                timeline_labels={b.value: labels[b] for b in Behaviour},
                confirmed=sum(bool(s.overlap and s.overlap.confirmed) for s in group),
                with_output_speech=sum(bool(s.model) for s in group),
                first_reply_known=sum(f"{s.task}/{s.sample_id}" in first for s in group),
                first_reply_right=sum(first.get(f"{s.task}/{s.sample_id}", False) for s in group),
            )
        )
    return tuple(out)


def write_duplex_report(
    runs: Sequence[DuplexRun], info: RunInfo, rules: Rules
) -> tuple[Path, Path]:
    """Every report of the module doc; returns the combined ``report.json`` and
    ``report.md``."""
    out = Path(info.out)
    refs = find_samples(Path(info.data))
    scored = {(s.task, s.sample_id) for run in runs for s in run.scores}
    data_said = reference_scores(
        [r for r in refs if (r.task, r.sample_id) in scored], out / "reference", rules
    )
    passable = None if data_said is None else passes(data_said)
    replies = {ref: text for ref in refs if (text := data_reply(ref)) is not None}
    firsts = [first_replies(out, run.policy, replies) for run in runs]
    reports = []
    for run, first in zip(runs, firsts, strict=True):
        report = summarize(
            run.policy, Path(info.data), out / run.policy, run.scores, rules, passable, first
        )
        write_report(report, out / run.policy)
        reports.append(report)
    reference = None
    if data_said is not None:  # the data's own assistant, scored by the same rules
        reference = summarize(
            REFERENCE, Path(info.data), out / "reference", data_said, rules, passable
        )
    timelines = [
        timeline_summary(run.scores, first) for run, first in zip(runs, firsts, strict=True)
    ]
    data: dict[str, Any] = {
        "format": FORMAT,
        "run": asdict(info),
        "rules": asdict(rules),
        "policies": [
            {
                "policy": run.policy,
                "report": f"{run.policy}/{REPORT_JSON}",
                "samples": len(run.scores),
                "scenarios": [asdict(s) for s in report.scenarios],
                "v1": [asdict(v) for v in report.v1],
                "timeline": [asdict(t) for t in timeline],
            }
            for run, report, timeline in zip(runs, reports, timelines, strict=True)
        ],
        "reference": None
        if reference is None
        else {
            "system": REFERENCE,
            "outputs": "reference",
            "scenarios": [asdict(s) for s in reference.scenarios],
        },
    }
    json_path, md_path = out / REPORT_JSON, out / REPORT_MD
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(
        render_duplex_markdown(reports, timelines, info, reference), encoding="utf-8"
    )
    write_plots(runs, reports, refs, out)
    return json_path, md_path


def write_plots(
    runs: Sequence[DuplexRun],
    reports: Sequence[ScoreReport],
    samples: Sequence[SampleRef],
    out: Path,
) -> None:
    """``OUT/plots/scenarios.png`` and the first PLOTS_PER_TASK samples' timelines per task
    and policy as ``OUT/plots/<policy>/<task>-<id>.png``."""
    try:
        from venus.evaluation.plots import scenario_bars_png, timeline_png
    except ImportError as e:  # matplotlib is the eval extra's
        log.warning("no plots (%s): pip install 'realtime-venus[eval]'", e)
        return
    plots = out / "plots"
    if any(r.scenarios for r in reports):  # none: v1 pause / turn-taking data only
        scenario_bars_png({r.system: r.scenarios for r in reports}, plots / "scenarios.png")
    refs = {(ref.task, ref.sample_id): ref for ref in samples}
    for run in runs:
        shown: Counter[str] = Counter()
        for s in run.scores:
            ref = refs.get((s.task, s.sample_id))
            if ref is None or shown[s.task] >= PLOTS_PER_TASK:
                continue
            shown[s.task] += 1
            folder = out / run.policy / s.task / s.sample_id
            timeline_png(
                ref.folder / "input.wav",
                folder / "output.wav",
                folder / "timeline.jsonl",
                json.loads(ref.annotation.read_text(encoding="utf-8")),
                plots / run.policy / f"{s.task}-{s.sample_id}.png",
                task=s.task,
                sample_id=s.sample_id,
                policy=run.policy,
            )


def render_duplex_markdown(
    reports: Sequence[ScoreReport],
    timelines: Sequence[Sequence[TimelineSummary]],
    info: RunInfo,
    reference: ScoreReport | None = None,
) -> str:
    """The policies side by side (and the data's own assistant, where the data has it)."""
    shown = [*reports] if reference is None else [*reports, reference]
    lines = [render_markdown(shown).rstrip("\n"), "", "## Timeline labels", ""]
    lines.append(
        "What the daemon's timeline decided for each overlap (`evaluation/hints.py`), before "
        "the output audio confirms it; `confirmed`: the audio gave the same label; `speech "
        "in output`: outputs in which the VAD finds any speech (a silent one confirms "
        "nothing, so its label is UNCERTAIN); `first reply as the data's`: of the cuts "
        "whose data has a reply, those where the first reply opens with its first "
        f"{OPENING_WORDS} words (the answer to the question asked, roughly)."
    )
    lines += [
        "",
        "| task | system | n | RESPOND | RESUME | UNCERTAIN | confirmed | speech in output "
        "| first reply as the data's |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(t, r.system) for r, ts in zip(reports, timelines, strict=True) for t in ts]
    for t, system in sorted(rows, key=lambda row: row[0].task):  # stable: policies in order
        counts = [t.timeline_labels[b.value] for b in Behaviour]
        cells = [t.task, system, str(t.samples), *(_pct(c, t.samples) for c in counts)]
        cells += [_pct(t.confirmed, t.samples), f"{t.with_output_speech}/{t.samples}"]
        cells += [f"{t.first_reply_right}/{t.first_reply_known}" if t.first_reply_known else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""]
    lines += published_markdown([(r.system, _ours_v1(r)) for r in reports])
    scope = "all samples" if info.limit is None else f"the first {info.limit} of each task"
    lines += [
        "",
        "## Run",
        "",
        f"- command: `{info.command}`",
        f"- data: `{info.data}` ({scope}); outputs and per-policy reports: `{info.out}/<policy>/`",
        f"- engines: `{info.engines}`; seed {info.seed}, temperature {info.temperature:g}"
        + (f", listen bias {info.listen_bias:g}" if info.listen_bias else ""),
        f"- camera: {info.camera}",
        f"- wall time: {info.wall_s:.1f} s with {info.jobs} job(s)",
    ]
    return "\n".join(lines) + "\n"


def _ours_v1(report: ScoreReport) -> dict[str, float | None]:
    """``report``'s v1 measures in the published table's columns (first task of each)."""
    values: dict[str, float | None] = {}
    for v in report.v1:
        keys = V1_TASK_KEYS.get((v.measure, v.task)) or V1_TASK_KEYS.get((v.measure, None))
        if keys is None or keys[0] in values:
            continue
        tor_key, latency_key = keys
        values[tor_key] = round(v.take_over_rate, 3)
        if latency_key is not None and v.latency is not None:
            values[latency_key] = v.latency.mean_s
    return values


def _pct(count: int, n: int) -> str:
    return f"{100 * count / n:.1f}%" if n else "-"
