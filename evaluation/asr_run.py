"""``venus eval asr``: the words in a system's outputs (optional, see ``asr.py``).

For every ``output.wav`` under ``--outputs`` (any depth: ``venus eval duplex`` writes
``<policy>/<task>/<id>/``), the recogniser transcribes the system's speech (the model
segments ``score.py`` finds, each decoded as one utterance) with word times. Then:

- **Intelligibility**, where a ``timeline.jsonl`` lies beside the output (our daemon's
  runs): the reference is the text of every reply the daemon spoke to its end (a reply
  with a chunk whose playback was stopped is left out: its audio holds only part of its
  text). The word error rate of what was heard against it, per sample and pooled over
  the set (errors summed, divided by the reference words summed).
- **Words in the overlap**, with ``--data`` (the Full-Duplex-Bench data dir the outputs
  answer): how many words the system started inside the scored overlap window, and
  whether it said any after the window (its reply). The word-level view of what the
  judge-free labels measure with segments.

Writes ``OUT/asr.json`` (per sample: words with times, reference, edit counts; per
scenario and pooled figures) and ``OUT/asr.md``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from venus.daemon.frontend.outputs import read_wav_mono
from venus.daemon.frontend.timeline import TimelineError, read_timeline
from venus.errors import DeviceError, EvaluationError
from venus.evaluation.asr import NO_ERRORS, Recognizer, Transcript, WordErrors, word_errors
from venus.evaluation.markdown import cell, pct, table
from venus.evaluation.progress import PolicyProgress
from venus.evaluation.score import OUTPUT_WAV, SampleRef, find_output, find_samples, score_sample
from venus.evaluation.vad import Segment

__all__ = ["AsrReport", "SampleWords", "reference_text", "transcribe_outputs", "write_asr_report"]

log = logging.getLogger(__name__)

REPORT_JSON, REPORT_MD = "asr.json", "asr.md"
TIMELINE = "timeline.jsonl"


@dataclass(frozen=True)
class SampleWords:
    name: str  # the output's folder, relative to --outputs
    scenario: str | None  # with --data
    transcript: Transcript
    reference: str | None  # the text of the replies spoken to their end (timeline)
    errors: WordErrors | None
    window: Segment | None  # the overlap window scored (with --data)
    words_in_overlap: int | None
    words_after_overlap: int | None

    def to_json(self) -> dict[str, Any]:
        e = self.errors
        return {
            "sample": self.name,
            "scenario": self.scenario,
            "heard": self.transcript.text,
            "words": [[w.text, round(w.start_s, 3), round(w.end_s, 3)]
                      for w in self.transcript.words],
            "reference": self.reference,
            "wer": None if e is None else e.wer,
            "edits": None if e is None else {"reference_words": e.reference_words,
                                              "substitutions": e.substitutions,
                                              "deletions": e.deletions,
                                              "insertions": e.insertions},
            "window": None if self.window is None else self.window.as_list(),
            "words_in_overlap": self.words_in_overlap,
            "words_after_overlap": self.words_after_overlap,
        }  # fmt: skip


@dataclass(frozen=True)
class AsrReport:
    recognizer: str
    outputs: str
    data: str | None
    samples: tuple[SampleWords, ...]

    @property
    def pooled(self) -> WordErrors:
        total = NO_ERRORS
        for s in self.samples:
            if s.errors is not None:
                total = total + s.errors
        return total

    def scenarios(self) -> list[dict[str, Any]]:
        out = []
        for scenario in sorted({s.scenario for s in self.samples if s.scenario is not None}):
            rows = [s for s in self.samples if s.scenario == scenario]
            inside = [s.words_in_overlap for s in rows if s.words_in_overlap is not None]
            after = [s.words_after_overlap for s in rows if s.words_after_overlap is not None]
            out.append({
                "scenario": scenario,
                "samples": len(rows),
                "mean_words_in_overlap": _mean(inside),
                "spoke_in_overlap_rate": _mean([float(n > 0) for n in inside]),
                "spoke_after_overlap_rate": _mean([float(n > 0) for n in after]),
            })  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        p = self.pooled
        return {
            "recognizer": self.recognizer,
            "outputs": self.outputs,
            "data": self.data,
            "pooled": {"wer": p.wer, "reference_words": p.reference_words,
                       "substitutions": p.substitutions, "deletions": p.deletions,
                       "insertions": p.insertions,
                       "samples_with_reference": sum(s.errors is not None for s in self.samples)},
            "scenarios": self.scenarios(),
            "samples": [s.to_json() for s in self.samples],
        }  # fmt: skip


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def reference_text(timeline: Path) -> str | None:
    """The text of every reply in ``timeline`` spoken to its end, in order; None when no
    reply was (module doc)."""
    try:
        records = read_timeline(timeline)
    except TimelineError as e:
        raise EvaluationError(str(e)) from e
    texts: dict[int, list[str]] = {}
    cut: set[int] = set()
    for r in records:
        if r.reply_id is None:
            continue
        texts.setdefault(r.reply_id, []).append(r.text)
        if r.playback_stopped:
            cut.add(r.reply_id)
    whole = [" ".join(t) for reply, t in texts.items() if reply not in cut]
    text = " ".join(" ".join(whole).split())
    return text or None


def transcribe_outputs(
    outputs: Path,
    recognizer: Recognizer,
    data: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AsrReport:
    """Every output under ``outputs`` transcribed and scored (module doc)."""
    if not outputs.is_dir():
        raise EvaluationError(f"--outputs {outputs}: not a directory")
    refs: dict[Path, SampleRef] = {}
    if data is not None:
        for ref in find_samples(data):
            path = find_output(outputs, ref)
            if path is not None:
                refs[path] = ref
    paths = sorted(outputs.rglob(OUTPUT_WAV))
    if not paths:
        raise EvaluationError(f"--outputs {outputs}: no {OUTPUT_WAV} in it or below it")
    if data is not None and not refs:
        raise EvaluationError(
            f"none of the {len(paths)} outputs under {outputs} is a sample of --data {data}"
        )
    done = []
    for n, path in enumerate(paths, start=1):
        done.append(_sample(outputs, path, refs.get(path), recognizer))
        if progress is not None:
            progress(n, len(paths))
    return AsrReport(recognizer.name, str(outputs), None if data is None else str(data),
                     tuple(done))  # fmt: skip


def _sample(
    outputs: Path, path: Path, ref: SampleRef | None, recognizer: Recognizer
) -> SampleWords:
    window: Segment | None = None
    scenario: str | None = None
    if ref is not None:
        score = score_sample(ref, path)
        segments, scenario = score.model, score.scenario
        window = score.window if score.overlap is not None else None
    try:
        said, rate = read_wav_mono(path)
    except DeviceError as e:
        raise EvaluationError(f"{path}: cannot be transcribed: {e}") from e
    transcript = recognizer.transcribe(said, rate, segments if ref is not None else None)
    timeline = path.parent / TIMELINE
    reference = reference_text(timeline) if timeline.is_file() else None
    errors = None if reference is None else word_errors(reference, transcript.text)
    inside = after = None
    if window is not None:
        inside = sum(window.start_s <= w.start_s < window.end_s for w in transcript.words)
        after = sum(w.start_s >= window.end_s for w in transcript.words)
    return SampleWords(
        name=str(path.parent.relative_to(outputs)),
        scenario=scenario,
        transcript=transcript,
        reference=reference,
        errors=errors,
        window=window,
        words_in_overlap=inside,
        words_after_overlap=after,
    )


def write_asr_report(report: AsrReport, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    doc = report.to_json()
    (out / REPORT_JSON).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", "utf-8")
    (out / REPORT_MD).write_text(render_markdown(report), "utf-8")
    return out / REPORT_JSON, out / REPORT_MD


def render_markdown(report: AsrReport) -> str:
    p = report.pooled
    lines = [
        "# Words in the outputs (offline ASR)",
        "",
        f"- recogniser: {report.recognizer}",
        f"- outputs `{report.outputs}`" + (f", data `{report.data}`" if report.data else ""),
        f"- {len(report.samples)} outputs, "
        f"{sum(bool(s.transcript.words) for s in report.samples)} with words heard",
        "",
        "## Intelligibility (heard against the text the daemon spoke)",
        "",
    ]
    lines += table(
        ["samples with a reference", "reference words", "WER", "substitutions", "deletions",
         "insertions"],
        [[str(sum(s.errors is not None for s in report.samples)), str(p.reference_words),
          pct(p.wer), str(p.substitutions), str(p.deletions), str(p.insertions)]]
        if p.reference_words else [],
    )  # fmt: skip
    scenarios = report.scenarios()
    if scenarios:
        lines += ["", "## Words in the overlap window", ""]
        lines += table(
            ["scenario", "n", "mean words in overlap", "spoke in overlap", "spoke after"],
            [[s["scenario"], str(s["samples"]),
              "-" if s["mean_words_in_overlap"] is None else f"{s['mean_words_in_overlap']:.2f}",
              pct(s["spoke_in_overlap_rate"]), pct(s["spoke_after_overlap_rate"])]
             for s in scenarios],
        )  # fmt: skip
    heard = [s for s in report.samples if s.transcript.words][:10]
    if heard:
        lines += ["", "## Heard (first 10 outputs with words)", ""]
        lines += table(
            ["sample", "heard", "meant", "WER"],
            [[s.name, cell(s.transcript.text), cell(s.reference or "-"),
              pct(None if s.errors is None else s.errors.wer)] for s in heard],
            left=3,
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def run(
    outputs: Path, out: Path, data: Path | None, recognizer: Recognizer, stream: TextIO
) -> tuple[AsrReport, Sequence[Path]]:
    """``venus eval asr``: transcribe, report, with a progress line on ``stream``."""
    shown: list[PolicyProgress] = []

    def progress(_done: int, total: int) -> None:
        if not shown:
            shown.append(PolicyProgress(stream, ["outputs"], total, name="eval asr"))
        shown[0]("outputs")

    report = transcribe_outputs(outputs, recognizer, data, progress)
    if shown:
        shown[0].finish()
    return report, write_asr_report(report, out)
