"""``venus eval regrid``: a set's Full-Duplex-Bench cuts moved back to their samples' chunk grid.

``venus datagen`` cuts each overlap event out of its sample from 0.5 s before the user's
question (``datagen/fdb.py``), so a cut starts at any phase of the daemon's chunks. The
same event with the cut moved back to the chunk boundary at or before that point (the
source sample's chunk grid) is the same test with another draw of the chunk phase: the
same audio, with up to one chunk more of the sample before it. ``venus eval duplex`` on
both sets measures how far a fixed model's rates move with nothing but that draw: the
evaluation's own noise (docs/training-log.md, sixteenth round: up to 10 points on 30-53
cuts a task).

A moved cut gets the sample's ``clean_input.wav`` from the boundary to the cut's start
put before its ``input.wav`` and its ``clean_input.wav`` (the same audio in both: the
event comes later, and another event's speech there is no part of the test, as the cut
takes earlier events' speech out itself), its ``metadata.json`` with ``timestamps``,
``planned_timestamps`` and ``duration_s`` shifted by the amount moved and
``source.offset_s`` set to the boundary, and the same in the task's ``manifest.json``. A
cut already on the grid, or one without a source sample (the benchmark's own), is copied
as it is. ``OUT/samples`` links to the set's samples, so the camera and the data's replies
are found as for the set itself. The audio moved in is checked against the cut: a cut
that is not its source's audio (at every point its ``input.wav`` or its
``clean_input.wav``) is an error.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from venus.datagen.fdb import RATE_HZ, read_wav, write_wav
from venus.errors import EvaluationError
from venus.evaluation.score import SampleRef, find_samples
from venus.evaluation.source import source_sample

__all__ = ["Regridded", "regrid"]

AUDIO_FILES = ("input.wav", "clean_input.wav")
SHIFTED_KEYS = ("timestamps", "planned_timestamps")
GRID_SLACK_S = 0.001  # an offset within this of a boundary is on it (times in ms)


@dataclass(frozen=True)
class Regridded:
    """What :func:`regrid` wrote: cuts moved, cuts copied as they were, the mean shift."""

    moved: int
    copied: int
    mean_shift_s: float


def regrid(data: Path, out: Path) -> Regridded:
    """``data``'s cuts moved back to their samples' chunk grid, written as a set at ``out``
    (module doc). ``out`` must not exist yet: nothing is overwritten; on an error it is
    removed again."""
    refs = find_samples(data)
    root = refs[0].folder.parent.parent
    if out.exists():
        raise EvaluationError(f"--out {out}: exists; name a new folder")
    try:
        return _regrid(refs, root, out)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # no half-written set left to be read as whole
        raise


def _regrid(refs: list[SampleRef], root: Path, out: Path) -> Regridded:
    target = out / "full_duplex_bench"
    target.mkdir(parents=True)
    samples = root.parent / "samples"
    if samples.is_dir():
        os.symlink(samples.resolve(), out / "samples", target_is_directory=True)
    shifts: dict[tuple[str, str], float] = {}
    for ref in refs:
        folder = target / ref.task / ref.sample_id
        folder.mkdir(parents=True)
        shift = _move(ref, folder)
        if shift is not None:
            shifts[(ref.task, ref.sample_id)] = shift
    for task in sorted({ref.task for ref in refs}):
        manifest = root / task / "manifest.json"
        if manifest.is_file():
            _shift_manifest(manifest, target / task / "manifest.json", task, shifts)
    moved = [s for s in shifts.values() if s > 0]
    return Regridded(len(moved), len(refs) - len(moved), float(np.mean(moved)) if moved else 0.0)


def _move(ref: SampleRef, folder: Path) -> float | None:
    """Write ``ref`` moved to the grid into ``folder``; the shift in seconds, or None when
    it was copied as it is (no source sample)."""
    sample = source_sample(ref)
    if sample is None:
        _copy(ref, folder)
        return None
    chunk_s = float(sample.trajectory.get("chunk_s", 1.0))
    start = math.floor((sample.offset_s + GRID_SLACK_S) / chunk_s) * chunk_s
    shift = max(0.0, sample.offset_s - start)
    if shift < GRID_SLACK_S:
        _copy(ref, folder)
        return 0.0
    files = sample.trajectory.get("files")
    names = [
        str(files.get(key, f"{key}.wav")) if isinstance(files, dict) else f"{key}.wav"
        for key in ("input", "clean_input")
    ]
    whole, control = (read_wav(sample.folder / name) for name in names)
    first, at = round(start * RATE_HZ), round(sample.offset_s * RATE_HZ)
    cut = read_wav(ref.folder / "input.wav")
    span = slice(at, at + len(cut))
    if not (
        len(whole[span]) == len(control[span]) == len(cut)
        and np.all((whole[span] == cut) | (control[span] == cut))
    ):
        raise EvaluationError(
            f"{ref.folder / 'input.wav'}: not {sample.folder / names[0]} from "
            f"{sample.offset_s} s (its metadata's source.offset_s): the cut cannot be moved"
        )
    lead = control[first:at]  # before the cut: in both files (the event comes later)
    for audio in AUDIO_FILES:
        write_wav(folder / audio, np.concatenate([lead, read_wav(ref.folder / audio)]))
    metadata = json.loads(ref.annotation.read_text(encoding="utf-8"))
    for key in SHIFTED_KEYS:
        if isinstance(metadata.get(key), list):
            metadata[key] = [round(float(t) + shift, 3) for t in metadata[key]]
    if isinstance(metadata.get("duration_s"), (int, float)):
        metadata["duration_s"] = round(float(metadata["duration_s"]) + shift, 3)
    metadata["source"]["offset_s"] = round(start, 3)
    _write_json(folder / ref.annotation.name, metadata)
    return shift


def _copy(ref: SampleRef, folder: Path) -> None:
    for path in ref.folder.iterdir():
        if path.is_file():
            shutil.copy2(path, folder / path.name)


def _shift_manifest(path: Path, to: Path, task: str, shifts: dict[tuple[str, str], float]) -> None:
    """The task's manifest with each moved sample's ``source.offset_s`` moved too."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EvaluationError(f"{path}: unreadable ({e})") from e
    entries: Any = manifest.get("samples") if isinstance(manifest, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        shift, source = shifts.get((task, str(entry.get("id")))), entry.get("source")
        if shift and isinstance(source, dict) and isinstance(source.get("offset_s"), (int, float)):
            source["offset_s"] = round(float(source["offset_s"]) - shift, 3)
    _write_json(to, manifest)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
