"""``venus validate CKPT --data DIR``: a checkpoint's teacher-forced figures on any set.

`venus train` validates on a split of its own training set, spoken by the training
voices. The held-out set's voices are what the daemon is judged on, and its figures part
from the training split's (docs/training.md, fourth round: a reply's first chunk right
on 93% of the training split, the first token on 59% of held-out reply starts). This
runs the same measure (``validation.evaluate``: control, turns, text, a reply's first
chunk; with ``--voice`` the speech decoder teacher-forced and closed loop) on every
sample of another set, so checkpoints can be chosen on unseen voices without running the
daemon. The layout uses the checkpoint's tokenizer and its recipe's text budget. The
listening figures (CTC, user speech CER) are left out: their head is not in a checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from venus.export.checkpoint import load_model
from venus.export.model.venus import VenusModel
from venus.train.config import TrainConfig, TrainConfigError, load_train_config
from venus.train.data import load_examples, model_layout, read_index
from venus.train.speech_units import decided_units
from venus.train.tokenizer import load_tokenizer
from venus.train.validation import evaluate

__all__ = ["validate"]


def validate(
    checkpoint: Path,
    data: Path,
    write: Callable[[str], None],
    *,
    voice: Path | None = None,
    jobs: int = 1,
    batch_size: int = 8,
) -> dict[str, float]:
    """The validation figures (``evaluate``) of ``checkpoint`` over every sample of
    ``data``; with ``voice`` (the one it was trained with) the speech decoder's too."""
    tok_path = checkpoint / "tokenizer.json"
    if not (checkpoint / "config.json").is_file() or not tok_path.is_file():
        raise TrainConfigError(
            f"{checkpoint}: not a `venus train` checkpoint (config.json and tokenizer.json)"
        )
    recipe = checkpoint / "train" / "recipe.toml"
    cfg = load_train_config(recipe) if recipe.is_file() else TrainConfig()
    model: VenusModel = load_model(checkpoint)  # type: ignore[assignment]
    model_cfg = model.cfg
    codebook = None
    if voice is not None:
        from venus.train.voice import load_voice

        codebook = load_voice(voice).codebook
        if model_cfg.speech.codebook < codebook.size:
            raise TrainConfigError(
                f"--voice {voice}: {codebook.size} codes, more than the checkpoint's speech "
                f"decoder has ({model_cfg.speech.codebook})"
            )
    build = model_layout(model_cfg, load_tokenizer(tok_path), cfg.max_text_tokens)
    special, vision = model_cfg.special_token_ids, model_cfg.vision
    records = read_index(data)
    started = time.monotonic()

    def loading(done: int, total: int) -> None:
        if done == total or done % 50 == 0:
            write(f"validate: loading samples {done}/{total} ({time.monotonic() - started:.0f} s)")

    examples = load_examples(
        data, records, build,
        image_size=vision.image_size if vision is not None else 0,
        units=None if codebook is None else partial(decided_units, codebook=codebook),
        progress=loading, jobs=jobs,
    )  # fmt: skip
    control = [special[t] for t in ("<|listen|>", "<|speak|>", "<|turn_eos|>")]
    speech_ids = None
    if codebook is not None:
        speech_ids = (model_cfg.speech.start_token, model_cfg.speech.end_token)
    write(f"validate: {len(examples)} samples teacher-forced")
    with torch.no_grad():
        return evaluate(model, examples, control, batch_size, speech_ids=speech_ids)
