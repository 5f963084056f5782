"""``venus validate CKPT --data DIR``: a checkpoint's teacher-forced figures on any set.

`venus train` validates on a split of its own training set, spoken by the training
voices. The held-out set's voices are what the daemon is judged on, and its figures part
from the training split's (docs/training-log.md, fourth round: a reply's first chunk right
on 93% of the training split, the first token on 59% of held-out reply starts). This
runs the same measure (``validation.evaluate``: control, turns, text, a reply's first
chunk; with ``--voice`` the speech decoder teacher-forced and closed loop) on every
sample of another set, so checkpoints can be chosen on unseen voices without running the
daemon. The layout uses the checkpoint's tokenizer and its recipe's text budget. The
listening figures (CTC, user speech CER: how well the audio encoder hears unseen
voices) come from the run's listening head, kept in ``CKPT/train/state.pt`` beside the
checkpoint that step wrote; a checkpoint without it (copied out, or trained without
``train.ctc_weight``) is measured without them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from venus.export.checkpoint import load_model
from venus.export.model.config import ModelConfig
from venus.export.model.venus import VenusModel
from venus.train.addressee import AddresseeHead
from venus.train.config import TrainConfig, TrainConfigError, load_train_config
from venus.train.data import load_examples, model_layout, read_index
from venus.train.heard import ListenHead
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
    by_category: bool = False,
    by_event: bool = False,
    transcripts: Path | None = None,
) -> dict[str, Any]:
    """The validation figures (``evaluate``) of ``checkpoint`` over every sample of
    ``data``; with ``voice`` (the one it was trained with) the speech decoder's too; with
    ``by_category`` also each category's apart (``by_category``: name -> figures), since
    the categories ask different things (docs/training-log.md, seventh round); with
    ``by_event`` also each overlap event's outcome, counted by what it is (``by_event``:
    group -> counts; by_event.py); with ``transcripts``, each user turn the listening
    head read written there as a JSON line (``evaluate``'s ``heard_turns``)."""
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

        loaded = load_voice(voice)
        codebook = loaded.codebook
        _check_voice(checkpoint, voice, loaded.step)
        if model_cfg.speech.codebook < codebook.size:
            raise TrainConfigError(
                f"--voice {voice}: {codebook.size} codes, more than the checkpoint's speech "
                f"decoder has ({model_cfg.speech.codebook})"
            )
    listen, addressee = _heads(checkpoint, model_cfg, write)
    if transcripts is not None and listen is None:
        raise TrainConfigError(
            f"--transcripts {transcripts}: {checkpoint} has no listening head "
            "(train/state.pt of a run with train.ctc_weight > 0)"
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
    measure = partial(evaluate, model, control=control, size=batch_size,
                      speech_ids=speech_ids, listen=listen, addressee=addressee)  # fmt: skip
    with torch.no_grad():
        turns: list[dict[str, Any]] | None = None if transcripts is None else []
        figures: dict[str, Any] = measure(examples, heard_turns=turns)
        if transcripts is not None and turns is not None:
            transcripts.write_text("".join(json.dumps(t) + "\n" for t in turns), "utf-8")
            write(f"validate: {len(turns)} user turns with what the head heard in {transcripts}")
        if by_category:
            names = sorted({e.category for e in examples})
            figures["by_category"] = {
                name: measure([e for e in examples if e.category == name]) | {
                    "samples": sum(e.category == name for e in examples)}
                for name in names
            }  # fmt: skip
        if by_event:
            from venus.train.by_event import by_event as count_events
            from venus.train.data import trajectory

            trajectories = {r["sample_id"]: trajectory(data, r["sample_id"]) for r in records}
            figures["by_event"] = count_events(model, examples, trajectories, control)
    return figures


def _check_voice(checkpoint: Path, voice: Path, step: int) -> None:
    """``--voice`` must be the voice the run trained with (its step and codebook, as the
    run's ``train/metrics.json`` records them): another voice's units are other codes.
    Without that record (a checkpoint copied out, an older run) the caller checks only
    the codebook's size."""
    from venus.train.voice_id import known_units

    metrics = checkpoint / "train" / "metrics.json"
    if not metrics.is_file():
        return  # a checkpoint copied out: only the codebook's size can be checked
    trained = _read_json(metrics).get("voice")
    if trained is None:
        return  # trained without one, or before runs recorded it: the size check only
    content, legacy = known_units(voice)  # the bytes' hash: runs before 2026-12-05
    given = {"step": step, "units": content}
    if trained not in (given, {"step": step, "units": legacy}):
        raise TrainConfigError(
            f"--voice {voice}: step {given['step']}, units {given['units']}; {checkpoint} "
            f"was trained with step {trained['step']}, units {trained['units']} "
            "(train/metrics.json): give that voice"
        )


def _heads(
    checkpoint: Path, model_cfg: ModelConfig, write: Callable[[str], None]
) -> tuple[ListenHead | None, AddresseeHead | None]:
    """The run's training-only heads from ``CKPT/train/state.pt``, when it has them and
    it is of the step the checkpoint holds (a later state is not this checkpoint's): the
    listening head (``train.ctc_weight``) and the addressee head (``addressee_weight``)."""
    path = checkpoint / "train" / "state.pt"
    metrics = checkpoint / "train" / "metrics.json"
    if not path.is_file():
        write("validate: no train/state.pt beside the checkpoint: no listening figures")
        return None, None
    # a pickle, as `venus train` resumes from: validate only checkpoints you trust
    state = torch.load(path, map_location="cpu", weights_only=False)
    if metrics.is_file():
        step = _read_json(metrics).get("step")
        if step is not None and step != state.get("step"):
            write(f"validate: train/state.pt is of step {state.get('step')}, the checkpoint "
                  f"of step {step}: no listening figures")  # fmt: skip
            return None, None
    listen = None
    if state.get("listen") is None:
        write(
            "validate: no listening head in train/state.pt (train.ctc_weight 0, or an "
            "older run): no listening figures"
        )
    else:
        listen = ListenHead(model_cfg.audio.d_model)
        listen.load_state_dict(state["listen"])
    addressee = None
    if state.get("addressee") is not None:
        addressee = AddresseeHead(model_cfg.backbone.hidden_size)
        addressee.load_state_dict(state["addressee"])
    return listen, addressee


def _read_json(path: Path) -> dict[str, Any]:
    """``path`` (the run's ``train/metrics.json``) as a JSON object, or an error naming it."""
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TrainConfigError(f"{path}: cannot be read ({e})") from e
    if not isinstance(doc, dict):
        raise TrainConfigError(f"{path}: not a JSON object")
    return doc
