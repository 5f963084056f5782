"""Per-scenario rates and latency distributions over scored samples, as JSON and Markdown.

Per task folder (overlap scenarios): the label counts and rates; the headline rate, the
**interruption response rate** (RESPOND share) for interruptions and the **continuation
rate** (RESUME share) under backchannel, other-directed and background speech (the
figures Full-Duplex-Bench v1.5 reports); the **stop rate** (the model stopped by the grace
end and did not go on over the user: ``Why.YIELDED_AND_ANSWERED`` or
``Why.STOPPED_SILENT``), which is what an interruption asking only to stop calls for;
stop, response and take-over latency distributions over the samples where each is
defined. Rates are over all samples of the task, UNCERTAIN ones (silent, no output
speech) included. Beside them, **playing at start** counts the samples in which a reply
was playing when the overlap began and the label was decided (``PLAYING``: answered,
kept speaking, restarted, stopped and silent), and the **rate when playing** is the
headline label's share of those: the turn-taking apart from whether the model was
speaking at all (which, for a model that mostly answers the wrong question, depends on
how long its wrong answer is; docs/training-log.md, tenth round). A reply that runs out
by itself during the overlap still counts (stopped and silent). The **action
rate** (our data: ``metadata.json`` ``action``) is the share of samples whose audio
carries out the action the data calls for (:func:`venus.evaluation.metrics.action_met`):
it credits a model that stops without answering when the user only said stop, or stays
silent under speech to someone else while it was waiting, which the v1.5 rates count as
UNCERTAIN. The **rate as posed** is the headline over the samples whose data's action is
the headline's behaviour (``POSED``: an answer for the response rate, carrying on for the
continuation rate): the overlaps v1.5 poses, a reply playing and the user asking or not
asking for the floor, without our data's stop requests and asides to a waiting
assistant, where the headline's behaviour would be wrong. None on data without actions
(v1.5's own, where every sample is posed). The **by type** table splits each task by our
data's ``type`` (an interruption's intent, an aside while speaking or waiting, the
background's source) with the action the data calls for. The **rate where the data
passes** is the headline over the posed samples the data's own assistant passes
(``evaluation/reference.py``: where its reply ends or pauses within the grace end,
v1.5's rule cannot credit carrying on); None where the data has no assistant track.

v1 measures: the take-over rate (TOR) for interruptions (v1.5 ``user_interruption`` and
v1 ``synthetic_user_interruption``) and pause handling, and turn-taking TOR and latency.
Latencies there follow v1: a negative one counts as 0 in the distribution.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from venus.evaluation.markdown import pct, table
from venus.evaluation.metrics import Behaviour, Rules, Why, action_met
from venus.evaluation.score import SampleScore

__all__ = [
    "Distribution",
    "ScenarioSummary",
    "ScoreReport",
    "V1Summary",
    "headline_label",
    "render_markdown",
    "summarize",
    "write_report",
]

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
FORMAT = 1
STOPPED = (Why.YIELDED_AND_ANSWERED, Why.STOPPED_SILENT)
PLAYING = (Why.YIELDED_AND_ANSWERED, Why.KEPT_SPEAKING, Why.RESTARTED_DURING_OVERLAP,
           Why.STOPPED_SILENT)  # fmt: skip
# the headline behaviour -> the data's actions (metadata.json) that call for it
POSED = {
    Behaviour.RESPOND: frozenset({"yield_floor", "revise_response"}),
    Behaviour.RESUME: frozenset({"continue_speaking"}),
}


@dataclass(frozen=True)
class Distribution:
    """Summary of latencies in seconds; every field None when there are none."""

    n: int
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    min_s: float | None
    max_s: float | None

    @classmethod
    def of(cls, values: Iterable[float | None], *, floor_zero: bool = False) -> Distribution:
        xs = sorted(max(0.0, v) if floor_zero else v for v in values if v is not None)
        if not xs:
            return cls(0, None, None, None, None, None)
        return cls(
            len(xs),
            round(math.fsum(xs) / len(xs), 3),
            round(_quantile(xs, 0.5), 3),
            round(_quantile(xs, 0.9), 3),
            round(xs[0], 3),
            round(xs[-1], 3),
        )


@dataclass(frozen=True)
class ScenarioSummary:
    """One task folder's overlap results."""

    task: str
    scenario: str
    samples: int
    labels: dict[str, int]  # RESPOND / RESUME / UNCERTAIN -> count
    why: dict[str, int]  # Why -> count
    headline: str  # "response rate" (interruptions) or "continuation rate"
    headline_rate: float
    respond_rate: float
    resume_rate: float
    uncertain_rate: float
    stop_rate: float
    take_over_rate: float  # v1 TOR
    action_rate: float | None  # share of samples with an action (ours) whose action was met
    action_samples: int  # samples with a known action
    stop_latency: Distribution
    response_latency: Distribution
    take_over_latency: Distribution  # v1: negative counted as 0
    horizon_clipped: int  # samples whose horizon reached the end of the file
    playing_at_start: int  # samples with a reply playing at the overlap's start (PLAYING)
    headline_rate_playing: float | None  # the headline label's share of those; None if none
    posed_samples: int  # samples whose data's action is the headline's behaviour (POSED)
    headline_rate_posed: float | None  # the headline label's share of those; None if none
    passable_samples: int | None = None  # of those, the ones the data's assistant passes
    headline_rate_passable: float | None = None  # the headline's share of those
    heard_samples: int | None = None  # of those, the ones whose first reply is the data's
    headline_rate_heard: float | None = None  # the headline's share of those


@dataclass(frozen=True)
class V1Summary:
    """A v1 measure over one task folder."""

    task: str
    measure: str  # "TOR (interruption)", "TOR (pause handling)", "turn-taking"
    samples: int
    take_over_rate: float
    latency: Distribution | None  # None where v1 reports no latency (pause handling)


@dataclass(frozen=True)
class ScoreReport:
    """Everything ``venus eval score`` writes, for one system."""

    system: str
    data: str
    outputs: str
    rules: Rules
    scenarios: tuple[ScenarioSummary, ...]
    v1: tuple[V1Summary, ...]
    samples: tuple[SampleScore, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "system": self.system,
            "data": self.data,
            "outputs": self.outputs,
            "rules": asdict(self.rules),
            "scenarios": [asdict(s) for s in self.scenarios],
            "v1": [asdict(v) for v in self.v1],
            "samples": [_sample_json(s) for s in self.samples],
        }


def summarize(
    system: str,
    data: Path,
    outputs: Path,
    samples: Sequence[SampleScore],
    rules: Rules,
    passable: Mapping[tuple[str, str], bool] | None = None,
    heard: Mapping[str, bool] | None = None,
) -> ScoreReport:
    """The report of ``samples`` (one system's scores); ``passable``: (task, id) ->
    whether the data's own assistant passes it (``reference.passes``), if known;
    ``heard``: ``task/id`` -> whether the system's first reply there opens as the data's
    (``duplex_report.first_replies``: it heard the question, roughly), if known."""
    tasks = sorted({s.task for s in samples})
    scenarios = []
    v1 = []
    for task in tasks:
        group = [s for s in samples if s.task == task]
        overlaps = [s for s in group if s.overlap is not None]
        if overlaps:
            summary = _scenario(task, overlaps, passable, heard)
            scenarios.append(summary)
            if summary.scenario == "interruption":
                v1.append(
                    V1Summary(task, "TOR (interruption)", summary.samples,
                              summary.take_over_rate, summary.take_over_latency)
                )  # fmt: skip
        turns = [s for s in group if s.turn is not None]
        if turns:
            v1.append(_v1_turns(task, turns))
    return ScoreReport(
        system, str(data), str(outputs), rules, tuple(scenarios), tuple(v1), tuple(samples)
    )


def _scenario(
    task: str,
    group: list[SampleScore],
    passable: Mapping[tuple[str, str], bool] | None,
    heard: Mapping[str, bool] | None,
) -> ScenarioSummary:
    outcomes = [s.overlap for s in group if s.overlap is not None]
    n = len(outcomes)
    labels = Counter(o.label for o in outcomes)
    why = Counter(o.why for o in outcomes)
    scenario = group[0].scenario
    rate = {b: labels[b] / n for b in Behaviour}
    met = [
        m for m in (action_met(s.action, s.overlap) for s in group if s.overlap) if m is not None
    ]
    interruption = scenario == "interruption"
    headline = headline_label(scenario)
    playing = sum(why[w] for w in PLAYING)
    posed = [s for s in group if s.overlap and s.action in POSED[headline]]
    fair = None if passable is None else [s for s in posed if passable.get((s.task, s.sample_id))]
    fair_heard = None if fair is None or heard is None else [
        s for s in fair if heard.get(f"{s.task}/{s.sample_id}")
    ]  # fmt: skip
    return ScenarioSummary(
        task=task,
        scenario=scenario,
        samples=n,
        labels={b.value: labels[b] for b in Behaviour},
        why={w.value: why[w] for w in Why if why[w]},
        headline="response rate" if interruption else "continuation rate",
        headline_rate=rate[headline],
        respond_rate=rate[Behaviour.RESPOND],
        resume_rate=rate[Behaviour.RESUME],
        uncertain_rate=rate[Behaviour.UNCERTAIN],
        stop_rate=sum(why[w] for w in STOPPED) / n,
        take_over_rate=sum(o.take_over for o in outcomes) / n,
        action_rate=sum(met) / len(met) if met else None,
        action_samples=len(met),
        stop_latency=Distribution.of(o.stop_latency_s for o in outcomes),
        response_latency=Distribution.of(o.response_latency_s for o in outcomes),
        take_over_latency=Distribution.of(
            (o.take_over_latency_s for o in outcomes), floor_zero=True
        ),
        horizon_clipped=sum(o.horizon_clipped for o in outcomes),
        playing_at_start=playing,
        headline_rate_playing=labels[headline] / playing if playing else None,
        posed_samples=len(posed),
        headline_rate_posed=_share(posed, headline),
        passable_samples=None if fair is None else len(fair),
        headline_rate_passable=None if fair is None else _share(fair, headline),
        heard_samples=None if fair_heard is None else len(fair_heard),
        headline_rate_heard=None if fair_heard is None else _share(fair_heard, headline),
    )


def _share(group: Sequence[SampleScore], label: Behaviour) -> float | None:
    """The share of ``group`` labelled ``label``; None if it is empty."""
    if not group:
        return None
    return sum(s.overlap is not None and s.overlap.label == label for s in group) / len(group)


def _v1_turns(task: str, group: list[SampleScore]) -> V1Summary:
    turns = [s.turn for s in group if s.turn is not None]
    tor = sum(t.take_over for t in turns) / len(turns)
    if group[0].scenario == "pause_handling":
        return V1Summary(task, "TOR (pause handling)", len(turns), tor, None)
    latency = Distribution.of((t.latency_s for t in turns), floor_zero=True)
    return V1Summary(task, "turn-taking", len(turns), tor, latency)


def write_report(report: ScoreReport, out: Path) -> tuple[Path, Path]:
    """``out/report.json`` and ``out/report.md`` (``out`` created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / REPORT_JSON, out / REPORT_MD
    json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown([report]), encoding="utf-8")
    return json_path, md_path


def render_markdown(reports: Sequence[ScoreReport]) -> str:
    """Markdown tables of ``reports`` side by side (a ``system`` column per row)."""
    lines = ["# Full-Duplex-Bench overlap scores (judge-free)", ""]
    for r in reports:
        lines.append(f"- `{r.system}`: data `{r.data}`, outputs `{r.outputs}`, "
                     f"{len(r.samples)} samples")  # fmt: skip
    lines += ["", "## Overlap behaviour", ""]
    lines += _table(
        ["task", "system", "n", "headline", "rate", "RESPOND", "RESUME", "UNCERTAIN",
         "stop rate", "TOR", "action met", "playing at start", "rate when playing",
         "rate as posed", "where the data passes", "where it passes and was heard"],
        [
            [s.task, r.system, str(s.samples), s.headline, pct(s.headline_rate),
             pct(s.respond_rate), pct(s.resume_rate), pct(s.uncertain_rate),
             pct(s.stop_rate), pct(s.take_over_rate), pct(s.action_rate),
             str(s.playing_at_start), pct(s.headline_rate_playing),
             f"{pct(s.headline_rate_posed)} of {s.posed_samples}",
             "-" if s.passable_samples is None
             else f"{pct(s.headline_rate_passable)} of {s.passable_samples}",
             "-" if s.heard_samples is None
             else f"{pct(s.headline_rate_heard)} of {s.heard_samples}"]
            for s, r in _by_task(reports)
        ],
    )  # fmt: skip
    types = _type_rows(reports)
    if types:
        lines += ["", "## By type (our data)", ""]
        lines += _table(["task", "type", "system", "the data's action", "n", "headline rate",
                         "action met", "playing at start"], types)  # fmt: skip
    lines += ["", "## Latency (s)", ""]
    rows = []
    for s, r in _by_task(reports):
        for name, d in (("stop", s.stop_latency), ("response", s.response_latency)):
            rows.append([s.task, r.system, name, *_dist(d)])
    lines += _table(["task", "system", "latency", "n", "mean", "p50", "p90", "min", "max"], rows)
    why_rows = [
        [s.task, r.system, ", ".join(f"{k} {v}" for k, v in s.why.items())]
        for s, r in _by_task(reports)
    ]
    lines += ["", "## Why (the case that decided each label)", ""]
    lines += _table(["task", "system", "cases"], why_rows)
    v1 = [(v, r) for r in reports for v in r.v1]
    if v1:
        lines += ["", "## v1 measures", ""]
        lines += _table(
            ["task", "system", "measure", "n", "TOR", "latency mean (s)", "latency p50 (s)"],
            [
                [v.task, r.system, v.measure, str(v.samples), pct(v.take_over_rate),
                 _num(v.latency.mean_s if v.latency else None),
                 _num(v.latency.p50_s if v.latency else None)]
                for v, r in sorted(v1, key=lambda x: (x[0].task, x[1].system))
            ],
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def headline_label(scenario: str) -> Behaviour:
    """The label a scenario's headline rate counts: answering an interruption, else
    carrying on."""
    return Behaviour.RESPOND if scenario == "interruption" else Behaviour.RESUME


def _type_rows(reports: Sequence[ScoreReport]) -> list[list[str]]:
    """One row per task, our data's type and system: its actions, the headline label's
    share, the action met's and how many found a reply playing."""
    groups: dict[tuple[str, str, int], list[SampleScore]] = {}
    for k, r in enumerate(reports):
        for x in r.samples:
            if x.overlap is not None and x.scenario_type is not None:
                groups.setdefault((x.task, x.scenario_type, k), []).append(x)
    rows = []
    for (task, kind, k), group in sorted(groups.items()):
        label = headline_label(group[0].scenario)
        pairs = [(x.action, x.overlap) for x in group if x.overlap is not None]
        met = [m for m in (action_met(a, o) for a, o in pairs) if m is not None]
        actions = Counter(a or "-" for a, _ in pairs)
        rows.append([
            task, kind, reports[k].system,
            ", ".join(f"{a} {c}" for a, c in sorted(actions.items())), str(len(pairs)),
            pct(sum(o.label == label for _, o in pairs) / len(pairs)),
            pct(sum(met) / len(met) if met else None),
            str(sum(o.why in PLAYING for _, o in pairs)),
        ])  # fmt: skip
    return rows


def _by_task(reports: Sequence[ScoreReport]) -> list[tuple[ScenarioSummary, ScoreReport]]:
    pairs = [(s, r) for r in reports for s in r.scenarios]
    return sorted(pairs, key=lambda p: p[0].task)  # stable: systems keep their order


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return table(header, rows, left=3)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _dist(d: Distribution) -> list[str]:
    return [str(d.n), *(_num(v) for v in (d.mean_s, d.p50_s, d.p90_s, d.min_s, d.max_s))]


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    at = q * (len(xs) - 1)
    lo = math.floor(at)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _sample_json(s: SampleScore) -> dict[str, Any]:
    out: dict[str, Any] = {
        "task": s.task,
        "id": s.sample_id,
        "scenario": s.scenario,
        "type": s.scenario_type,
        "action": s.action,
        "timestamps": s.timestamps.as_list(),
        "window": s.window.as_list(),
        "window_source": s.window_source,
        "duration_s": _r(s.duration_s),
        "output_duration_s": _r(s.output_duration_s),
        "output_rate_hz": s.output_rate_hz,
        "user_segments": [g.as_list() for g in s.user],
        "model_segments": [g.as_list() for g in s.model],
    }
    if s.overlap is not None:
        o = s.overlap
        out |= {
            "label": o.label.value,
            "why": o.why.value,
            "audio_label": o.audio_label.value,
            "audio_why": o.audio_why.value,
            "action_met": action_met(s.action, o),
            "timeline_label": o.timeline_label.value if o.timeline_label else None,
            "speaking_at_start": o.speaking_at_start,
            "stop_s": _r(o.stop_s),
            "response_onset_s": _r(o.response_onset_s),
            "stop_latency_s": _r(o.stop_latency_s),
            "response_latency_s": _r(o.response_latency_s),
            "take_over": o.take_over,
            "take_over_latency_s": _r(o.take_over_latency_s),
            "horizon_clipped": o.horizon_clipped,
        }
    if s.turn is not None:
        out |= {
            "take_over": s.turn.take_over,
            "turn_onset_s": _r(s.turn.onset_s),
            "turn_latency_s": _r(s.turn.latency_s),
        }
    return out
