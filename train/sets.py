"""Which samples a run trains on and which it validates on: a seeded share of ``--data``
held out (``data.validation``), or, with ``--val-data``, all of ``--data`` to train on and
all of another set to validate on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from venus.train.config import TrainConfig, TrainConfigError
from venus.train.data import read_index

__all__ = ["split", "train_and_validation", "where"]


def split(
    records: Sequence[dict[str, Any]], share: float, seed: int
) -> tuple[list[Any], list[Any]]:
    """(training, validation) records: a seeded shuffle by sample id, ``share`` held out."""
    ordered = sorted(records, key=lambda r: r["sample_id"])
    order = torch.randperm(len(ordered), generator=torch.Generator().manual_seed(seed)).tolist()
    held = min(len(ordered) - 1, max(1 if share > 0 else 0, round(share * len(ordered))))
    shuffled = [ordered[i] for i in order]
    return shuffled[held:], shuffled[:held]


def train_and_validation(
    cfg: TrainConfig, data: Path, val_data: Path | None, write: Callable[[str], None]
) -> tuple[list[Any], list[Any]]:
    """(training, validation) records: ``data.validation``'s share of ``data`` held out, or
    with ``val_data`` all of ``data`` and all of that set."""
    records = read_index(data)
    if val_data is None:
        if len(records) < 2:
            raise TrainConfigError(f"--data {data}: {len(records)} samples; need at least 2")
        return split(records, cfg.validation, cfg.seed)
    val_records = read_index(val_data, "--val-data")
    for option, where, recs in (("--data", data, records), ("--val-data", val_data, val_records)):
        if not recs:
            raise TrainConfigError(f"{option} {where}: no samples")
    train_recs = split(records, 0.0, cfg.seed)[0]  # all of it, in the same seeded order
    write(f"train: {len(train_recs)} samples to train on, the {len(val_records)} of "
          f"{val_data} to validate on (data.validation does not apply)")  # fmt: skip
    return train_recs, val_records


def where(path: Path | None) -> str | None:
    """A set's place as ``state.pt`` records it."""
    return None if path is None else str(path.resolve())
