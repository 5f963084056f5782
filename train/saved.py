"""The exportable checkpoints a run writes: ``OUT`` (every step ``train.keep`` takes) and,
when the keep rule held an earlier step at the end, ``OUT/last`` (the run's last step).

Both are what `venus export` and `venus validate` read: ``config.json``, the safetensors,
the trained ``tokenizer.json`` and ``train/metrics.json`` (the step and its validation).
``OUT/last/train/`` also has the recipe and a link to the run's ``state.pt`` (of the last
step: the listening figures). The kept and the last step are the two candidates that
`scripts/closed-loop-validation` compares in the closed loop (docs/training.md).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from venus.export.checkpoint import INDEX, save_model
from venus.export.model.venus import VenusModel
from venus.train.voice_id import units_sha

if TYPE_CHECKING:
    from venus.train.config import TrainConfig
    from venus.train.keep import Kept
    from venus.train.loop import _Run as Run

__all__ = ["LAST", "offered", "write_checkpoint", "write_last"]

LAST = "last"  # OUT/last: the run's last step, when train.keep kept another


def write_checkpoint(
    model: VenusModel, tokenizer: Tokenizer, out: Path, work: Path, doc: dict[str, Any]
) -> None:
    """``model`` as an exportable checkpoint in ``out`` (its files replaced one by one, so a
    reader never sees a half-written one) and ``doc`` as ``work/metrics.json``."""
    fresh = work / "next-checkpoint"  # the writer wants an empty directory
    shutil.rmtree(fresh, ignore_errors=True)
    save_model(model, fresh)
    tokenizer.save(str(fresh / "tokenizer.json"))  # over save_model's byte tokenizer
    for old in [*out.glob("*.safetensors"), out / INDEX, out / "config.json"]:
        old.unlink(missing_ok=True)
    for path in fresh.iterdir():
        os.replace(path, out / path.name)
    fresh.rmdir()
    (work / "metrics.json").write_text(json.dumps(doc, indent=2) + "\n", "utf-8")


def write_last(
    model: VenusModel, tokenizer: Tokenizer, out: Path, doc: dict[str, Any], kept: int
) -> Path:
    """``OUT/last``: the run's last step beside the checkpoint of step ``kept`` that
    ``train.keep`` chose, with ``doc`` (the last step's validation) as its metrics."""
    last = out / LAST
    work = last / "train"
    work.mkdir(parents=True, exist_ok=True)
    write_checkpoint(model, tokenizer, last, work, {**doc, "beside": kept})
    shutil.copyfile(out / "train" / "recipe.toml", work / "recipe.toml")
    state = work / "state.pt"
    if not state.is_symlink():
        state.unlink(missing_ok=True)
        state.symlink_to(Path("..") / ".." / "train" / "state.pt")
    return last


def offered(
    model: VenusModel,
    run: Run,
    out: Path,
    at: tuple[int, TrainConfig],
    metrics: dict[str, float],
    baseline: dict[str, float],
    kept: Kept,
    stays: str,
    write: Callable[[str], None],
) -> None:
    """The checkpoints after step ``at[0]``'s validation: ``OUT`` when ``train.keep`` took
    the step (``stays`` is empty; a run stopped early is usable), and at the run's end
    ``OUT/last`` when it did not. Each has its validation in ``train/metrics.json``."""
    step, cfg = at
    if not stays:
        doc = _doc(run, step, metrics, baseline)
        if cfg.keep != "last":  # chosen among the validations, not merely the latest
            doc["kept_by"] = cfg.keep
        write_checkpoint(model, run.tokenizer, out, run.work, doc)
        shutil.rmtree(out / LAST, ignore_errors=True)  # the checkpoint is the last step
        return
    write(stays)
    if step == cfg.steps and kept.best is not None:
        write_last(model, run.tokenizer, out, _doc(run, step, metrics, baseline),
                   kept.best["step"])  # fmt: skip
        write(f"train: wrote the last step as {out / LAST} (scripts/closed-loop-validation "
              f"compares it with the checkpoint in the closed loop)")  # fmt: skip


def _doc(
    run: Run, step: int, metrics: dict[str, float], baseline: dict[str, float]
) -> dict[str, Any]:
    """A checkpoint's ``train/metrics.json``: its step, validation and what it came from."""
    doc: dict[str, Any] = {"step": step, "validation": metrics, "baseline": baseline}
    if run.voice is not None and run.voice_dir is not None:  # what `venus validate` checks
        doc["voice"] = {"step": run.voice.step, "units": units_sha(run.voice_dir)}
    if run.init is not None:  # what the run started from (the engines' manifest says it)
        doc["init"] = run.init_record
    return doc
