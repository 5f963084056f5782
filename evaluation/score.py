"""Score any system's ``output.wav`` files against a Full-Duplex-Bench data dir.

**Data** (``--data``): a directory holding task folders, or one whose
``full_duplex_bench/`` does (what ``venus datagen`` writes, docs/data.md). A task folder
holds one folder per sample with ``input.wav``:

- v1.5 tasks ``user_interruption``, ``user_backchannel``, ``talking_to_other``,
  ``background_speech``: ``metadata.json`` with ``timestamps: [start, end]``, the overlap
  window in seconds on ``input.wav``'s clock (``type`` and ``action``, ours, are carried
  into the report when present);
- v1 tasks, where the data has them: ``synthetic_user_interruption`` (``interrupt.json``),
  ``candor_pause_handling`` / ``synthetic_pause_handling`` (``pause.json``) and
  ``candor_turn_taking`` (``turn_taking.json``), each a list whose first item's
  ``timestamp`` is ``[start, end]``.

**Outputs** (``--outputs``): per sample ``OUT/<task>/<id>/output.wav`` (also under
``OUT/full_duplex_bench/``, so outputs written next to a set's inputs are found) or
``OUT/<id>/output.wav``: the system's audio alone, from t = 0 of ``input.wav``, at any PCM
sample rate (resampled to 16 kHz for the VAD), mono or mixed to mono. It may be shorter
than its input (silence after its end) but not longer: an output longer than its input
by more than ``LENGTH_TOLERANCE_S`` is not aligned with it and is refused.

**The overlap window** (overlap scenarios) is ``timestamps`` narrowed to the user speech
the VAD finds in ``input.wav`` inside it (first onset to last offset of the merged user
segments that intersect it; ``window_source`` ``vad``), or ``timestamps`` as they are
when it finds none there (``metadata``). A v1 pause or turn-taking window is used as
annotated. Each sample is then scored by
:func:`venus.evaluation.metrics.label_overlap`.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.daemon.frontend.outputs import read_wav_mono
from venus.errors import DeviceError, EvaluationError
from venus.evaluation.metrics import (
    DEFAULT_RULES,
    OverlapOutcome,
    Rules,
    TurnOutcome,
    label_overlap,
    pause_take_over,
    turn_taking,
)
from venus.evaluation.vad import Segment, model_segments, user_segments

__all__ = [
    "LENGTH_TOLERANCE_S",
    "TASKS",
    "V1_TASKS",
    "SampleRef",
    "SampleScore",
    "find_output",
    "find_samples",
    "score_sample",
    "score_samples",
]

log = logging.getLogger(__name__)

# v1.5 task folder -> overlap scenario
TASKS = {
    "user_interruption": "interruption",
    "user_backchannel": "backchannel",
    "talking_to_other": "other_directed",
    "background_speech": "background",
}
# v1 task folder -> (annotation file, what is measured)
V1_TASKS = {
    "synthetic_user_interruption": ("interrupt.json", "interruption"),
    "candor_pause_handling": ("pause.json", "pause_handling"),
    "synthetic_pause_handling": ("pause.json", "pause_handling"),
    "candor_turn_taking": ("turn_taking.json", "turn_taking"),
}
OUTPUT_WAV = "output.wav"
INPUT_WAV = "input.wav"
LENGTH_TOLERANCE_S = 0.01  # an output this much longer than its input is still aligned
MISSING_LISTED = 5  # missing outputs named in the error


@dataclass(frozen=True)
class SampleRef:
    """One sample of the data dir."""

    task: str  # the task folder's name
    sample_id: str  # the sample folder's name
    folder: Path
    annotation: Path  # metadata.json, or the v1 task's file

    @property
    def name(self) -> str:
        return f"{self.task}/{self.sample_id}"


@dataclass(frozen=True)
class SampleScore:
    """One sample's measurements; times in seconds on the input's clock."""

    task: str
    sample_id: str
    scenario: str  # interruption, backchannel, other_directed, background, pause_handling,
    # turn_taking
    scenario_type: str | None  # metadata.json "type" (ours), when present
    action: str | None  # metadata.json "action" (ours): what the data calls for
    timestamps: Segment  # the window as annotated
    window: Segment  # the window scored (module doc)
    window_source: str  # "vad" or "metadata"
    duration_s: float  # the input's
    output_duration_s: float
    output_rate_hz: int
    user: tuple[Segment, ...]  # the user's speech in input.wav (gaps < 0.6 s merged)
    model: tuple[Segment, ...]  # the system's speech in output.wav (gaps < 0.5 s merged)
    overlap: OverlapOutcome | None  # overlap scenarios (v1.5 tasks, v1 interruptions)
    turn: TurnOutcome | None  # v1 pause handling and turn-taking


def find_samples(data: Path) -> list[SampleRef]:
    """Every sample under ``data`` (module doc), by task then sample id."""
    root = _task_root(data)
    refs: list[SampleRef] = []
    for task in sorted(p.name for p in root.iterdir() if p.is_dir()):
        if task in TASKS:
            annotation = "metadata.json"
        elif task in V1_TASKS:
            annotation = V1_TASKS[task][0]
        else:
            continue
        for folder in sorted(p for p in (root / task).iterdir() if p.is_dir()):
            if not (folder / INPUT_WAV).is_file():
                continue
            refs.append(SampleRef(task, folder.name, folder, folder / annotation))
    if not refs:
        raise EvaluationError(f"{data}: no samples (folders with {INPUT_WAV}) in its task folders")
    return refs


def _task_root(data: Path) -> Path:
    if not data.is_dir():
        raise EvaluationError(f"--data {data}: not a directory")
    known = set(TASKS) | set(V1_TASKS)
    for root in (data, data / "full_duplex_bench"):
        if root.is_dir() and any((root / task).is_dir() for task in known):
            return root
    raise EvaluationError(
        f"--data {data}: no Full-Duplex-Bench task folders ({', '.join(sorted(known))}) in it "
        "or in its full_duplex_bench/; point it at a set written by `venus datagen` or at "
        "the benchmark's task folders"
    )


def find_output(outputs: Path, ref: SampleRef) -> Path | None:
    """``ref``'s output.wav under ``outputs`` (module doc); None if absent."""
    for path in (
        outputs / ref.task / ref.sample_id / OUTPUT_WAV,
        outputs / "full_duplex_bench" / ref.task / ref.sample_id / OUTPUT_WAV,
        outputs / ref.sample_id / OUTPUT_WAV,
    ):
        if path.is_file():
            return path
    return None


def score_samples(
    refs: list[SampleRef], outputs: Path, *, rules: Rules = DEFAULT_RULES
) -> list[SampleScore]:
    """Score every sample; every output must be there (the error names the missing ones)."""
    if not outputs.is_dir():
        raise EvaluationError(f"--outputs {outputs}: not a directory")
    found = {ref: find_output(outputs, ref) for ref in refs}
    missing = [ref.name for ref, path in found.items() if path is None]
    if missing:
        named = ", ".join(missing[:MISSING_LISTED])
        more = f" and {len(missing) - MISSING_LISTED} more" if len(missing) > MISSING_LISTED else ""
        raise EvaluationError(
            f"{len(missing)} of {len(refs)} samples have no {OUTPUT_WAV} under {outputs} "
            f"(looked for OUTPUTS/<task>/<id>/{OUTPUT_WAV} and OUTPUTS/<id>/{OUTPUT_WAV}): "
            f"{named}{more}; run the system on every sample of the data dir"
        )
    scores = []
    for ref, path in found.items():
        if path is not None:  # all are, checked above
            scores.append(score_sample(ref, path, rules=rules))
            log.debug("scored %s", ref.name)
    return scores


def score_sample(ref: SampleRef, output_wav: Path, *, rules: Rules = DEFAULT_RULES) -> SampleScore:
    """One sample's segments, window and outcome (module doc)."""
    meta, timestamps = _annotation(ref)
    heard, in_rate = _read(ref.folder / INPUT_WAV)
    said, out_rate = _read(output_wav)
    duration, out_duration = len(heard) / in_rate, len(said) / out_rate
    if out_duration > duration + LENGTH_TOLERANCE_S:
        raise EvaluationError(
            f"{output_wav}: the output is {out_duration:.3f} s long, longer than its input "
            f"{ref.folder / INPUT_WAV} ({duration:.3f} s); an output.wav must be aligned with "
            "its input.wav from t = 0 and no longer: check how the system's output was "
            "written (a delay, a tail, another sample's file)"
        )
    if timestamps.start_s > duration:
        raise EvaluationError(
            f"{ref.annotation}: the window {timestamps.as_list()} starts after the end of "
            f"{INPUT_WAV} ({duration:.3f} s)"
        )
    user = user_segments(heard, in_rate)
    model = model_segments(said, out_rate)
    scenario = TASKS.get(ref.task) or V1_TASKS[ref.task][1]
    window, source = timestamps, "metadata"
    if scenario not in ("pause_handling", "turn_taking"):  # a pause window holds no user speech
        window, source = _window(timestamps, user)
    overlap: OverlapOutcome | None = None
    turn: TurnOutcome | None = None
    if scenario == "pause_handling":
        turn = pause_take_over(model, window, rules=rules)
    elif scenario == "turn_taking":
        turn = turn_taking(model, timestamps.start_s, rules=rules)
    else:
        overlap = label_overlap(model, window, duration, rules=rules)
    return SampleScore(
        task=ref.task,
        sample_id=ref.sample_id,
        scenario=scenario,
        scenario_type=_text(meta.get("type")),
        action=_text(meta.get("action")),
        timestamps=timestamps,
        window=window,
        window_source=source,
        duration_s=duration,
        output_duration_s=out_duration,
        output_rate_hz=out_rate,
        user=user,
        model=model,
        overlap=overlap,
        turn=turn,
    )


def _window(timestamps: Segment, user: tuple[Segment, ...]) -> tuple[Segment, str]:
    inside = [u for u in user if u.end_s > timestamps.start_s and u.start_s < timestamps.end_s]
    if not inside:
        return timestamps, "metadata"
    start = max(timestamps.start_s, inside[0].start_s)
    end = min(timestamps.end_s, inside[-1].end_s)
    return Segment(start, max(start, end)), "vad"


def _annotation(ref: SampleRef) -> tuple[dict[str, Any], Segment]:
    """The sample's metadata (a dict) and its window, checked."""
    path = ref.annotation
    if not path.is_file():
        raise EvaluationError(f"{ref.name}: no {path.name} in {ref.folder}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvaluationError(f"{path}: not readable JSON ({e})") from e
    if ref.task in TASKS:
        meta, key = data, "timestamps"
    else:  # v1: a list of events, the first one scored
        meta = data[0] if isinstance(data, list) and data else None
        key = "timestamp"
    if not isinstance(meta, dict):
        shape = "an object" if ref.task in TASKS else "a list of objects"
        raise EvaluationError(f"{path}: expected {shape}")
    value = meta.get(key)
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in value)
        or not 0 <= value[0] <= value[1]
    ):
        raise EvaluationError(
            f"{path}: {key!r} must be [start, end] in seconds with 0 <= start <= end, not {value!r}"
        )
    return meta, Segment(float(value[0]), float(value[1]))


def _read(path: Path) -> tuple[NDArray[np.float32], int]:
    try:
        return read_wav_mono(path)
    except DeviceError as e:
        raise EvaluationError(f"{path}: cannot be scored: {e}") from e


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
