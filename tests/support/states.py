"""Comparing the resumable states two training runs saved (``OUT/train/state.pt``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def assert_same_states(whole: Path, parts: Path, names: Iterable[str]) -> None:
    """The ``names`` parts (state dicts) of two runs' ``train/state.pt`` hold equal tensors:
    a run stopped and resumed ends where an uninterrupted one does."""
    import torch

    a = torch.load(whole / "train" / "state.pt", weights_only=False)
    b = torch.load(parts / "train" / "state.pt", weights_only=False)
    for name in names:
        assert a[name].keys() == b[name].keys(), name
        assert all(torch.equal(a[name][k], b[name][k]) for k in a[name]), name
