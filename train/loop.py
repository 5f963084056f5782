"""The training run: split, tokenizer, examples, AdamW steps, validation, resumable state.

``OUT`` becomes a checkpoint `venus export` reads (``config.json``, the safetensors, the
trained ``tokenizer.json``; rewritten at every checkpoint, so a run stopped early can be
exported as it stands) with ``OUT/train/``: ``recipe.toml`` (the resolved recipe),
``state.pt`` (weights, optimiser, step: a run stopped at any point resumes from its last
state with the same command; a finished one returns at once, loading nothing),
``history.jsonl`` (one line per step and per validation),
``loss.png`` (the curves) and ``metrics.json`` (the checkpoint's step and validation).
``train.keep`` (``keep.py``) may keep an earlier validated step in the checkpoint;
``state.pt`` always holds the last step, to resume from, and a run that ends on a step it
did not keep writes that step as ``OUT/last`` too (``saved.py``).

Trained: the backbone, the audio encoder and the vision encoder (what decides and writes
text); with ``--voice`` the speech decoder too, and the voice's flow decoder and vocoder
are copied in. With ``train.ctc_weight`` a listening head (``heard.py``) trains beside
them; it is kept in ``state.pt`` only, never in the checkpoint.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from venus.export.checkpoint import INDEX
from venus.export.model.config import PRESETS, ModelConfig
from venus.export.model.init import init_model
from venus.export.model.venus import VenusModel
from venus.train.addressee import AddresseeHead, class_weights
from venus.train.augment import MelAugment, augment_seed, augmented
from venus.train.batch import Batch, Losses, collate, forward_losses
from venus.train.clip import clip_gradients
from venus.train.config import TrainConfig, TrainConfigError, parse_train_config
from venus.train.data import (
    Builder,
    Example,
    cropped,
    load_examples,
    model_layout,
    sample_texts,
)
from venus.train.device import resolve_device
from venus.train.heard import ListenHead
from venus.train.keep import Kept
from venus.train.listen import listen_losses, listening_line, measure_listening, segments
from venus.train.progress import Pace, plot_history, step_line, step_record
from venus.train.runlog import append, note_machine, restore, same_recipe, save_state
from venus.train.saved import offered
from venus.train.schedule import batch_indices, lr_factor, sampling_share, step_draws
from venus.train.sets import train_and_validation, where
from venus.train.speech_units import decided_units
from venus.train.stopping import StopRequest
from venus.train.tokenizer import load_tokenizer, train_tokenizer
from venus.train.validation import evaluate, validation_line
from venus.train.voice import Voice, load_voice, load_voice_weights
from venus.train.voice_id import same_voice, voice_identity
from venus.train.warm import (
    init_identity,
    init_record,
    take_listen_head,
    take_tokenizer,
    warm_start,
)

__all__ = ["TRAINED", "TrainResult", "resolve_device", "train"]

log = logging.getLogger(__name__)

TRAINED = ("backbone", "audio_encoder", "vision_encoder")
TRAINED_WITH_VOICE = (*TRAINED, "speech_decoder")
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class TrainResult:
    out: Path
    steps: int
    resumed_from: int
    metrics: dict[str, float]  # the checkpoint's validation (the last unless train.keep)
    baseline: dict[str, float]  # the same validation before any step
    kept: int = 0  # the step the checkpoint holds (``steps`` unless train.keep chose another)
    stopped_by: signal.Signals | None = None  # a signal stopped the run early (stopping.py)


def _batch(run: _Run, step: int, cfg: TrainConfig) -> list[Example]:
    """Step ``step``'s examples, a ``cfg.crop`` share of them cut to start at one of their
    crop points (``data.crop_starts``); the draws depend only on the seed and the step."""
    idx = batch_indices(step, len(run.train), cfg.batch_size, cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    draws = torch.rand(len(idx), generator=g).tolist()
    picks = torch.randint(0, 1 << 30, (len(idx),), generator=g).tolist()
    out = []
    for i, draw, pick in zip(idx, draws, picks, strict=True):
        example = run.train[i]
        if draw < cfg.crop and example.crops:
            example = cropped(example, example.crops[pick % len(example.crops)], run.build)
        out.append(example)
    return out


def _step_batch(run: _Run, step: int, cfg: TrainConfig) -> Batch:
    """Step ``step``'s batch (``_batch``), its log-mel augmented (``augment.py``)."""
    examples = _batch(run, step, cfg)
    augment = MelAugment(cfg.mel_warp, cfg.mel_gain_db, cfg.mel_freq_masks)
    return augmented(collate(examples, run.speech_ids), examples, augment, cfg.seed, step)


@dataclass
class _Run:
    """What a run works on: its place, its state on disk (when resuming), its data."""

    work: Path
    recipe: str
    state: dict[str, Any] | None
    model_cfg: ModelConfig
    tokenizer: Tokenizer
    train: list[Example]
    validation: list[Example]
    control: list[int]
    build: Builder
    voice: Voice | None = None
    voice_dir: Path | None = None
    init: Path | None = None
    init_record: dict[str, Any] | None = None  # what ``init`` was, read when it was loaded
    val_data: Path | None = None  # the set validated on, when not a share of the data

    @property
    def speech_ids(self) -> tuple[int, int] | None:
        """The speech decoder's ``start`` and ``end`` when it is trained (with a voice)."""
        s = self.model_cfg.speech
        return None if self.voice is None else (s.start_token, s.end_token)


def _saved_state(
    cfg: TrainConfig, data: Path, out: Path, voice_dir: Path | None, init: Path | None,
    val_data: Path | None,
) -> dict[str, Any] | None:  # fmt: skip
    """``OUT``'s resumable state (None: a new run), checked to be this run's."""
    path = out / "train" / "state.pt"
    if not path.is_file():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    voice = load_voice(voice_dir) if voice_dir is not None else None
    if (
        not same_recipe(state["recipe"], parse_train_config, cfg)
        or state["data"] != str(data.resolve())
        or not same_voice(state.get("voice"), voice_dir, voice)
        or state.get("init") != init_identity(init)
        or state.get("val_data") != where(val_data)
    ):
        raise TrainConfigError(
            f"{out}: holds a run with another recipe, data, voice, --init or --val-data "
            f"({path.parent / 'recipe.toml'}); resume it with the same --config, --data, "
            "--voice, --init and --val-data, or train into another --out"
        )
    return state


def _finished(
    cfg: TrainConfig, out: Path, state: dict[str, Any], write: Callable[[str], None]
) -> TrainResult | None:
    """The run, when ``state`` ended it and its checkpoint is there: nothing is loaded (a
    rerun of ``scripts/make-venus-tiny`` passes its finished stages in seconds)."""
    if state["step"] < cfg.steps or not (out / INDEX).is_file():
        return None
    kept = Kept(cfg.keep, state.get("kept"))
    which = kept.which(cfg.steps)
    write(f"train: {out} has run all {cfg.steps} steps of its recipe; nothing to train "
          f"(the checkpoint{which}; export it with `venus export {out}`)")  # fmt: skip
    metrics = state.get("metrics", state["baseline"])
    return kept.result(TrainResult(out, cfg.steps, cfg.steps, metrics, state["baseline"]))


def _begin(
    cfg: TrainConfig, data: Path, out: Path, write: Callable[[str], None],
    voice_dir: Path | None, init: Path | None, val_data: Path | None,
) -> tuple[tuple[list[Any], list[Any]], dict[str, Any] | None, TrainResult | None]:  # fmt: skip
    """The data's records (its errors before the state's), ``OUT``'s state, checked, and
    the run itself when that state finished it."""
    records = train_and_validation(cfg, data, val_data, write)
    state = _saved_state(cfg, data, out, voice_dir, init, val_data)
    return records, state, None if state is None else _finished(cfg, out, state, write)


def _open(
    cfg: TrainConfig,
    data: Path,
    out: Path,
    write: Callable[[str], None],
    voice_dir: Path | None,
    state: dict[str, Any] | None,
    records: tuple[list[Any], list[Any]],
    jobs: int = 1,
    init: Path | None = None,
    val_data: Path | None = None,
) -> _Run:
    """Train (or reload) the tokenizer, load examples (with ``voice_dir``, their speech
    units too); ``state``: ``_saved_state``'s; ``records``: ``train_and_validation``'s."""
    import tomli_w

    train_recs, val_recs = records
    work = out / "train"
    recipe = tomli_w.dumps(cfg.to_toml_dict())
    voice = load_voice(voice_dir) if voice_dir is not None else None
    work.mkdir(parents=True, exist_ok=True)
    (work / "recipe.toml").write_text(recipe, "utf-8")
    model_cfg = PRESETS[cfg.preset]()
    if voice is not None:  # the voice's flow decoder and vocoder, as trained
        model_cfg = voice.model_config(model_cfg)
    vocab = cfg.vocab_size or model_cfg.backbone.vocab_size
    if vocab > model_cfg.backbone.vocab_size:
        raise TrainConfigError(
            f"tokenizer.vocab_size {vocab} exceeds the {cfg.preset} text vocabulary "
            f"({model_cfg.backbone.vocab_size})"
        )
    tok_path = work / "tokenizer.json"
    if state is None or not tok_path.is_file():
        if init is not None:
            take_tokenizer(init, tok_path)  # its token ids are the weights'
        else:
            train_tokenizer(sample_texts(data, train_recs), vocab).save(str(tok_path))
    tok = load_tokenizer(tok_path)

    started = time.monotonic()

    def loading(done: int, total: int) -> None:
        if done == total or done % 50 == 0:
            write(f"train: loading samples {done}/{total} ({time.monotonic() - started:.0f} s)")

    vision = model_cfg.vision
    special = model_cfg.special_token_ids
    build = model_layout(model_cfg, tok, cfg.max_text_tokens)
    load = partial(
        load_examples,
        build=build,
        progress=loading,
        image_size=vision.image_size if vision is not None and not cfg.listen_only else 0,
        units=None
        if voice is None or cfg.listen_only
        else partial(decided_units, codebook=voice.codebook),
        jobs=jobs,
    )
    if val_data is None:
        examples = load(data, train_recs + val_recs)
    else:
        examples = load(data, train_recs) + load(val_data, val_recs)
    truncated = sum(e.layout.stats.truncated_chunks for e in examples)
    if truncated:
        write(f"train: {truncated} chunks' text cut to {cfg.max_text_tokens} tokens (the budget)")
    control = [special[t] for t in ("<|listen|>", "<|speak|>", "<|turn_eos|>")]
    n = len(train_recs)
    return _Run(
        work,
        recipe,
        state,
        model_cfg,
        tok,
        examples[:n],
        examples[n:],
        control,
        build,
        voice,
        voice_dir,
        init,
        None if init is None else init_record(init),
        val_data,
    )


def train(
    cfg: TrainConfig,
    data: Path,
    out: Path,
    write: Callable[[str], None],
    *,
    voice: Path | None = None,
    stop_after: int | None = None,
    device: str = "cpu",
    jobs: int = 1,
    init: Path | None = None,
    val_data: Path | None = None,
) -> TrainResult:
    """Run (or resume) the recipe on ``data`` into ``out`` (module doc); with ``voice`` (a
    ``venus train-voice`` output) the speech decoder too, over the voice's units, and the
    voice's flow decoder and vocoder go into the checkpoint. ``stop_after``: stop after
    that many steps of this call (a test of resuming). ``device``: where the model trains
    (``resolve_device``); ``jobs``: processes that load the samples; ``init``: a checkpoint
    to start from (``warm.py``); ``val_data``: a set to validate on, whole, instead of
    ``data.validation``'s share of ``data``."""
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    where = resolve_device(device, write)  # before minutes of loading
    records, state, done = _begin(cfg, data, out, write, voice, init, val_data)
    if done is not None:
        return done
    run = _open(cfg, data, out, write, voice, state, records, jobs, init, val_data)
    model, listen, addressee, groups = _model(run, cfg, where, write)
    forward, measure, line = _objective(
        run, cfg, model, listen, run.validation or run.train[:8], where, addressee
    )
    optim = torch.optim.AdamW([p for g in groups.values() for p in g], lr=cfg.learning_rate,
                              weight_decay=cfg.weight_decay)  # fmt: skip
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: lr_factor(s, cfg))
    history = run.work / "history.jsonl"
    parts = {"model": model, "optim": optim, "sched": sched, "listen": listen,
             "addressee": addressee}  # fmt: skip
    kept = Kept(cfg.keep, None if run.state is None else run.state.get("kept"))
    if run.state is not None:
        step, baseline, metrics = (restore(run.state, parts, history), run.state["baseline"],
                                   run.state.get("metrics", run.state["baseline"]))  # fmt: skip
        write(f"train: resuming {out} at step {step}/{cfg.steps}")
    else:
        step, baseline = 0, measure()
        metrics = baseline
        history.write_text(json.dumps({"step": 0, "validation": baseline}) + "\n", "utf-8")
    resumed_from = step
    note_machine(run.work, step, str(where))
    model.train()
    shown, pace = time.monotonic(), Pace(step)
    with StopRequest() as stop:  # a signal ends the step and saves (stopping.py)
        while (step < cfg.steps and not stop.signal
               and (stop_after is None or step - resumed_from < stop_after)):  # fmt: skip
            losses, total = _update(forward, step, optim, sched, groups, cfg.clip)
            step += 1
            append(history, step_record(step, total, losses, float(sched.get_last_lr()[0])))
            if time.monotonic() - shown >= PROGRESS_EVERY_S or step == cfg.steps:
                shown = time.monotonic()
                write(step_line(step, cfg.steps, total, losses, pace.rate(step)))
            validated = step % cfg.checkpoint_every == 0 or step == cfg.steps
            if validated:
                metrics = measure()
                append(history, {"step": step, "validation": metrics})
                write(line(step, metrics))
                stays = kept.offer(step, metrics)
            if validated or stop.signal:
                _save_state(run.work / "state.pt", _state(run, data, parts, {
                    "step": step, "baseline": baseline, "metrics": metrics, "kept": kept.best,
                }), history)  # fmt: skip
            if validated:
                offered(model, run, out, (step, cfg), metrics, baseline, kept, stays, write)
    if stop.signal:
        write(f"train: {stop.signal.name}: stopped at step {step}/{cfg.steps}, the state "
              "saved; the same command goes on from it")  # fmt: skip
    if step == cfg.steps:
        write(f"train: wrote the checkpoint {out}{kept.which(step)} "
              f"(export it with `venus export {out}`)")  # fmt: skip
    ended = TrainResult(out, step, resumed_from, metrics, baseline, stopped_by=stop.signal)
    return kept.result(ended)


def _update(
    forward: Callable[[int], Losses], step: int, optim: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler, groups: dict[str, list[torch.nn.Parameter]],
    clip: str,
) -> tuple[Losses, float]:  # fmt: skip
    """Step ``step``: its losses, their gradients (clipped by group), the optimiser's and
    the schedule's step; the losses and their total."""
    with torch.enable_grad():  # whatever the caller set (venus bench turns it off)
        losses = forward(step)
        optim.zero_grad(set_to_none=True)
        losses.total.backward()  # type: ignore[no-untyped-call]
    clip_gradients(groups, clip)
    optim.step()
    sched.step()
    return losses, float(losses.total.detach())


Objective = tuple[
    Callable[[int], Losses], Callable[[], dict[str, float]], Callable[[int, dict[str, float]], str]
]


def _objective(
    run: _Run,
    cfg: TrainConfig,
    model: VenusModel,
    listen: ListenHead | None,
    held: list[Example],
    where: torch.device,
    addressee: AddresseeHead | None = None,
) -> Objective:
    """What a step computes (step -> losses), the validation (-> figures) and its line:
    the whole model's losses, or with ``listen_only`` the listening loss alone on the
    user's turns (``listen.py``; ``batch_size`` turns a step)."""
    if cfg.listen_only:
        assert listen is not None  # parse_train_config: listen_only needs ctc_weight
        turns, held_turns = segments(run.train, model), segments(held, model)
        if not turns or not held_turns:
            raise TrainConfigError(
                f"train.listen_only: the data has no whole user turn to hear "
                f"({len(turns)} in training, {len(held_turns)} held out)"
            )

        augment = MelAugment(cfg.mel_warp, cfg.mel_gain_db, cfg.mel_freq_masks)

        def heard(step: int) -> Losses:
            idx = batch_indices(step, len(turns), cfg.batch_size, cfg.seed)
            draws = torch.Generator().manual_seed(augment_seed(cfg.seed, step))
            return listen_losses(model, listen, [turns[i] for i in idx], augment, draws)

        size = max(cfg.batch_size, 32)
        return heard, partial(measure_listening, model, listen, held_turns, size), listening_line

    def whole(step: int) -> Losses:
        batch = _step_batch(run, step, cfg).to(where)
        return forward_losses(model, batch, run.control, cfg.decision_weight,
                              cfg.speech_weight, cfg.speech_grad, cfg.turn_weight, listen,
                              cfg.ctc_weight, cfg.reply_weight,
                              call_weight=cfg.call_weight, argument_weight=cfg.argument_weight,
                              event_weight=cfg.event_weight,
                              after_weight=cfg.after_weight,
                              addressee=addressee, addressee_weight=cfg.addressee_weight,
                              speech_sampling=sampling_share(step, cfg),
                              generator=step_draws(step, cfg, where))  # fmt: skip

    measure = partial(evaluate, model, held, control=run.control, size=cfg.batch_size,
                      speech_ids=run.speech_ids, listen=listen,
                      addressee=addressee)  # fmt: skip
    return whole, measure, validation_line


def _model(
    run: _Run, cfg: TrainConfig, device: torch.device, write: Callable[[str], None]
) -> tuple[
    VenusModel, ListenHead | None, AddresseeHead | None, dict[str, list[torch.nn.Parameter]]
]:
    """The initial model (with the voice's flow decoder and vocoder) on ``device``, the
    training-only heads (the listening head with ``ctc_weight``; the addressee head with
    ``addressee_weight``, its classes weighted by the training split) and what is
    trained, by component."""
    model = VenusModel(run.model_cfg)
    init_model(model, cfg.seed)
    if run.voice_dir is not None:
        load_voice_weights(model, run.voice_dir)
    trained: tuple[str, ...] = TRAINED if run.voice is None else TRAINED_WITH_VOICE
    if run.init is not None:
        warm_start(model, run.init, trained)
    if cfg.listen_only:
        trained = ("audio_encoder",)
    model.to(device)
    groups: dict[str, list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if name.split(".")[0] in trained:
            groups.setdefault(name.split(".")[0], []).append(p)
    listen = None
    if cfg.ctc_weight > 0:
        listen = ListenHead(run.model_cfg.audio.d_model)
        if run.init is not None:
            took = take_listen_head(run.init, listen)
            write(f"train: the listening head {'from' if took else 'afresh, none in'} {run.init}")
        listen.to(device)
        groups["listen"] = list(listen.parameters())
    addressee = None
    if cfg.addressee_weight > 0 and not cfg.listen_only:
        weights = class_weights(e.addressed for e in run.train)
        addressee = AddresseeHead(run.model_cfg.backbone.hidden_size, weights).to(device)
        groups["addressee"] = list(addressee.parameters())
    return model, listen, addressee, groups


def _state(run: _Run, data: Path, parts: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """What ``state.pt`` holds: the ``parts``' state dicts (the listening head's None
    without one), the step and figures, and what a resumed run must find again."""
    saved = {k: None if v is None else v.state_dict() for k, v in parts.items()}
    return saved | figures | {"recipe": run.recipe, "data": str(data.resolve()),
                              "voice": voice_identity(run.voice_dir, run.voice),
                              "init": init_identity(run.init),
                              "val_data": where(run.val_data)}  # fmt: skip


def _save_state(path: Path, state: dict[str, Any], history: Path) -> None:
    """The resumable state, atomically, and the curves so far."""
    save_state(path, state)
    plot_history(history, path.parent / "loss.png")
