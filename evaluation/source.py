"""What a Full-Duplex-Bench cut of a ``venus datagen`` sample came from.

``venus datagen`` cuts each overlap event of a sample into ``full_duplex_bench/<task>/<id>/``
(``datagen/fdb.py``), and the cut's ``metadata.json`` names its source:
``{"sample_id": ..., "offset_s": ...}``, where the cut starts in the sample. The sample
itself lies beside, in the set's ``samples/<sample_id>/``. From there come the camera the
cut runs with (:func:`source_video`) and the reply the data gives after the cut begins
(:func:`data_reply`). The benchmark's own samples (no ``source``) and a copy of the
benchmark folders alone (no ``samples/`` beside them) have neither: None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from venus.errors import EvaluationError
from venus.evaluation.score import SampleRef

__all__ = ["SourceSample", "SourceVideo", "data_reply", "source_sample", "source_video"]

ONSET_SLACK_S = 0.001  # trajectory times are rounded to the millisecond


@dataclass(frozen=True)
class SourceSample:
    """The sample a cut was made from: its folder, its trajectory, where the cut starts."""

    folder: Path
    trajectory: dict[str, Any]
    offset_s: float


@dataclass(frozen=True)
class SourceVideo:
    """The camera of a cut sample: its source's video, and where the cut starts in it."""

    path: Path
    offset_s: float


def source_sample(ref: SampleRef) -> SourceSample | None:
    """The sample ``ref`` was cut from (module doc); a source named but unreadable is an
    ``EvaluationError`` naming the file."""
    metadata = _read_json(ref.annotation)
    source = metadata.get("source") if isinstance(metadata, dict) else None
    if source is None:
        return None
    sample_id = source.get("sample_id") if isinstance(source, dict) else None
    offset_s = source.get("offset_s") if isinstance(source, dict) else None
    if (
        not isinstance(sample_id, str)
        or not sample_id
        or "/" in sample_id
        or isinstance(offset_s, bool)
        or not isinstance(offset_s, (int, float))
        or not offset_s >= 0
    ):
        raise EvaluationError(
            f'{ref.annotation}: source must be {{"sample_id": ..., "offset_s": >= 0}}, '
            f"not {source!r}"
        )
    folder = ref.folder.parent.parent.parent / "samples" / sample_id
    path = folder / "trajectory.json"
    if not path.is_file():
        return None
    trajectory = _read_json(path)
    if not isinstance(trajectory, dict):
        raise EvaluationError(f"{path}: not a trajectory (a JSON object)")
    return SourceSample(folder, trajectory, float(offset_s))


def source_video(ref: SampleRef) -> SourceVideo | None:
    """The video of the sample ``ref`` was cut from and the cut's offset in it; None
    without a source sample or for one of the audio group (no video). A video named but
    missing is an ``EvaluationError``."""
    sample = source_sample(ref)
    if sample is None:
        return None
    files = sample.trajectory.get("files")
    name = files.get("video") if isinstance(files, dict) else None
    if not name:
        return None
    video = sample.folder / str(name)
    if not video.is_file():
        raise EvaluationError(
            f"{ref.annotation}: its source {sample.folder} names {name} and it is missing; "
            "regenerate the set (venus datagen resumes), or run with --no-video"
        )
    return SourceVideo(video, sample.offset_s)


def data_reply(ref: SampleRef) -> str | None:
    """The text of the data's first assistant turn that starts in the cut (at or after its
    offset): what the daemon's first reply there should be. None without a source sample
    or without such a turn."""
    sample = source_sample(ref)
    if sample is None:
        return None
    for turn in sample.trajectory.get("turns") or ():
        if (
            isinstance(turn, dict)
            and turn.get("speaker") == "assistant"
            and float(turn.get("start_s", -1.0)) >= sample.offset_s - ONSET_SLACK_S
        ):
            return str(turn.get("text", ""))
    return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EvaluationError(f"{path}: unreadable ({e})") from e
