"""The data's own assistant as a system, and the overlaps it passes.

A cut of a ``venus datagen`` sample (``evaluation/source.py``) has the data's assistant
beside it: the source sample's ``assistant.wav``, what the assistant the model learns
from says, when. Cut at the same offset and scored by the same rules, it is the system
the data calls right. It does not pass every overlap the data poses: where the data's
reply ends, or pauses 0.5 s between sentences, within 1.5 s of a backchannel, carrying
on was right and yet v1.5's rule (no stop before the grace end) labels it UNCERTAIN.
A posed overlap is **passable** when the data's assistant gets the headline label there;
the **rate where the data passes** is the headline over those (``evaluation/summary.py``),
the figure that 100% is possible on.

``write_reference_outputs`` writes each cut's output (``OUT/<task>/<id>/output.wav`` and
``conversation.wav``, as ``venus run --offline`` writes them: to listen to, and to score
with ``venus eval score``); ``reference_scores`` scores them.
Both return None where a cut has no source sample with an assistant track (the
benchmark's own data, or its folders copied alone): there is nothing to compare with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from venus.daemon.frontend.outputs import read_wav_mono, write_outputs
from venus.errors import EvaluationError
from venus.evaluation.metrics import DEFAULT_RULES, Rules
from venus.evaluation.score import SampleRef, SampleScore, score_sample
from venus.evaluation.source import source_sample
from venus.evaluation.summary import headline_label

__all__ = ["REFERENCE", "passes", "reference_scores", "write_reference_outputs"]

REFERENCE = "the data's assistant"  # its name in the reports


def write_reference_outputs(refs: Sequence[SampleRef], out: Path) -> Path | None:
    """Each cut's output as the data's assistant says it, under ``out``; None (nothing
    written) unless every cut has a source sample with an assistant track."""
    sources = []  # (cut, its source's assistant track, where the cut starts in it)
    for ref in refs:
        sample = source_sample(ref)
        files = sample.trajectory.get("files") if sample else None
        name = files.get("assistant") if isinstance(files, dict) else None
        if sample is None or not name:
            return None
        sources.append((ref, sample.folder / str(name), sample.offset_s))
    tracks: dict[Path, tuple[NDArray[np.float32], int]] = {}  # a sample's cuts share one
    for ref, track, offset_s in sources:
        if track not in tracks:
            if not track.is_file():
                raise EvaluationError(
                    f"{ref.annotation}: its source's {track} is missing; regenerate the set "
                    "(venus datagen resumes)"
                )
            tracks[track] = read_wav_mono(track)
        said, rate = tracks[track]
        # aligned with the cut's input as the daemon's own outputs are (resampled, cut or
        # padded to its length): output.wav and conversation.wav
        write_outputs(out / ref.task / ref.sample_id, ref.folder / "input.wav",
                      said[round(offset_s * rate) :], rate)  # fmt: skip
    return out


def reference_scores(
    refs: Sequence[SampleRef], out: Path, rules: Rules = DEFAULT_RULES
) -> list[SampleScore] | None:
    """The data's assistant on every cut (its outputs written under ``out``), scored by
    ``rules``; None where the data has no assistant to compare with."""
    if write_reference_outputs(refs, out) is None:
        return None
    return [
        score_sample(ref, out / ref.task / ref.sample_id / "output.wav", rules=rules)
        for ref in refs
    ]


def passes(scores: Sequence[SampleScore]) -> Mapping[tuple[str, str], bool]:
    """(task, sample id) -> whether the data's assistant gets the scenario's headline
    label there (RESPOND for an interruption, RESUME otherwise)."""
    return {
        (s.task, s.sample_id): s.overlap.label == headline_label(s.scenario)
        for s in scores
        if s.overlap is not None
    }
