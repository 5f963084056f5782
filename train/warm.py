"""``venus train --init CKPT``: a run that starts from a checkpoint's weights and its
tokenizer instead of fresh ones (a GPU run annealed on the CPU, a model taught more data).

The trained components (``loop.TRAINED``, with a voice the speech decoder too) are
copied from ``CKPT``; the rest (the voice's flow decoder and vocoder) come as usual. The
token ids must mean the same, so the run takes ``CKPT/tokenizer.json`` rather than
training one on its data. Shapes must match: the recipe's preset must be ``CKPT``'s.

A listening stage (a ``CKPT`` whose recipe has ``train.listen_only``) trained only what
its loss reaches: the audio encoder up to its frames, before the projector into the
backbone (``encode_chunk_frames``). Only that is taken from it; the projector and the
other components start from the recipe's own seeded init, which is what the stage saved
when its preset and seed are the recipe's (``init_component`` seeds each component by
its name). So one listening stage serves every preset with its audio encoder: tiny's
serves ``tiny-wide``, whose projector is wider.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from venus.engines.tokenizer import TOKENIZER_FILE
from venus.errors import VenusError
from venus.export.checkpoint import load_model
from venus.export.model.venus import VenusModel
from venus.train.config import TrainConfigError
from venus.train.heard import ListenHead

__all__ = [
    "init_identity",
    "init_record",
    "listened_only",
    "take_listen_head",
    "take_tokenizer",
    "warm_start",
]


LISTENED = "audio_encoder."  # what a listening stage trains: the audio encoder,
PROJECTOR = "audio_encoder.projector."  # but not its projector into the backbone


def init_identity(init: Path | None) -> str | None:
    """What a resumed run must find again (None: no ``--init``)."""
    return None if init is None else str(init.resolve())


def init_record(init: Path) -> dict[str, Any]:
    """How ``init`` was trained, for the run's ``train/metrics.json``: its step and its
    resolved recipe (TOML tables) when it is a `venus train` output, else None for both;
    read as the engines' manifest reads a checkpoint's (a damaged record is named)."""
    from venus.export.onnx.manifest import training_record  # onnx: only with --init

    record = training_record(init) or {}
    return {"path": str(init.resolve()), "step": record.get("step"),
            "recipe": record.get("recipe")}  # fmt: skip


def take_tokenizer(init: Path, to: Path) -> None:
    """``init``'s trained tokenizer as the run's."""
    source = init / TOKENIZER_FILE
    if not source.is_file():
        raise TrainConfigError(
            f"--init {init}: no {TOKENIZER_FILE} (is it a `venus train` output?)"
        )
    shutil.copyfile(source, to)


def warm_start(model: VenusModel, init: Path, trained: Collection[str]) -> None:
    """``model``'s ``trained`` components take ``init``'s weights (module doc)."""
    try:
        source = load_model(init)
    except (VenusError, OSError) as e:
        raise TrainConfigError(f"--init {init}: cannot be read ({e})") from None
    theirs = source.state_dict()
    heard_only = listened_only(init)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.split(".")[0] not in trained:
                continue
            if heard_only and (not name.startswith(LISTENED) or name.startswith(PROJECTOR)):
                continue
            other = theirs.get(name)
            if other is None or other.shape != tensor.shape:
                there = "missing" if other is None else f"{tuple(other.shape)}"
                raise TrainConfigError(
                    f"--init {init}: {name} is {there} there and {tuple(tensor.shape)} in "
                    "this recipe's model; start from a checkpoint of the recipe's preset"
                )
            tensor.copy_(other)


def listened_only(init: Path) -> bool:
    """Whether ``init`` is a listening stage: its recipe says ``train.listen_only``."""
    recipe = init_record(init)["recipe"] or {}
    return bool(recipe.get("train", {}).get("listen_only", False))


def take_listen_head(init: Path, head: ListenHead) -> bool:
    """``head`` takes the listening head of ``init``'s run state; False (and ``head``
    unchanged) when there is none (a checkpoint trained without ``ctc_weight``, or copied
    without its ``train/``)."""
    path = init / "train" / "state.pt"
    if not path.is_file():
        return False
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False).get("listen")
    except Exception as e:  # torch.load raises several kinds on a damaged file
        raise TrainConfigError(f"--init {init}: {path} cannot be read ({e})") from None
    if saved is None:
        return False
    try:
        head.load_state_dict(saved)
    except RuntimeError as e:
        raise TrainConfigError(
            f"--init {init}: its listening head does not fit this recipe's model ({e})"
        ) from None
    return True
