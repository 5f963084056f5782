"""The `venus train-voice` run: units, flow decoder and vocoder steps, measurements,
resumable state (``voice.py`` has the parts).

A run fits the codebook on the training split (``units.safetensors``, kept on resume),
loads every assistant reply, then takes ``max(flow.steps, vocoder.steps)`` steps: each
trains the flow decoder on ``flow.batch`` windows until its steps and the vocoder on
``vocoder.batch`` segments until its (a Griffin-Lim vocoder has no steps: it is given the
codebook's mel statistics and trains nothing). Every draw (windows, segments, t, noise) depends only
on the seed and the step, so a resumed run ends with the weights of an uninterrupted one.

At each checkpoint a handful of held-out replies are measured (``Measure``): the word
error rate (PocketSphinx, the ``asr`` extra; skipped with a warning without it) of (a)
the original audio, (b) its mel through the vocoder, (c) its codes through the flow
decoder and vocoder as the daemon streams them, and (units) its codes' centroids through
the vocoder; the log-mel L1 of (b), (c) and (units) against the original; the flow
decoder's and vocoder's compute time per second of audio; with a sine source, how the
vocoder's f0 head agrees with the tracked f0 (median error in cents on frames both call
voiced, ``f0_cents``; the share of frames whose voicing agrees, ``voicing_agreement``).
OUT/train/ holds ``recipe.toml``, ``state.pt`` (written atomically), ``history.jsonl``,
``metrics.json`` and ``loss.png``; a finished run, rerun, reports it and loads nothing.
The state is saved at each measurement and when a SIGINT or SIGTERM stops the run: it
ends the step in hand first (``stopping.py``).
"""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from venus.errors import EvaluationError
from venus.evaluation.asr import NO_ERRORS, PocketSphinx, Recognizer, WordErrors, word_errors
from venus.export.model.config import PRESETS, FlowDecoderConfig, VocoderConfig
from venus.export.model.flow import FlowDecoder, token_groups
from venus.export.model.griffin_lim import GriffinLimVocoder
from venus.export.model.init import component_generator, init_component
from venus.export.model.vocoder import Vocoder
from venus.export.model.vocoders import AnyVocoder, make_vocoder
from venus.train.data import read_index
from venus.train.pitch import f0_agreement
from venus.train.progress import Pace
from venus.train.runlog import append, note_machine, restore, same_recipe, save_state
from venus.train.sets import split
from venus.train.speech_units import FRAMES_PER_TOKEN, SAMPLE_RATE, Codebook, fit_units
from venus.train.stopping import StopRequest
from venus.train.voice import (
    UNITS_FILE,
    VOICE_JSON,
    Reply,
    Window,
    flow_losses,
    load_replies,
    log_mel,
    reference_text,
    save_units,
    save_voice,
    speak,
    vocode,
    vocoder_losses,
)
from venus.train.voice_config import VoiceConfig, VoiceConfigError, parse_voice_config
from venus.train.voice_report import LOSS_KEYS, measure_line, plot_voice_history

__all__ = ["Measure", "VoiceResult", "train_voice"]

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 5.0
FINAL_LR = 0.1  # of the peak, at a part's last step
CONTEXT_FRAMES = 8  # mel before a vocoder segment, run but not scored (160 ms)
PROBE_S = (1.5, 10.0)  # a measured reply's length


@dataclass(frozen=True)
class VoiceResult:
    out: Path
    steps: int
    resumed_from: int
    metrics: dict[str, float | None]
    stopped_by: signal.Signals | None = None  # a signal stopped the run early (stopping.py)


def probes(replies: Sequence[Reply], count: int, chunk_tokens: int) -> list[Reply]:
    """Up to ``count`` replies to measure: whole, ``PROBE_S`` long, one a sample first."""
    fit = [r for r in replies if not r.cut and len(reference_text(r.text).split()) >= 3
           and PROBE_S[0] <= len(r.codes) / chunk_tokens <= PROBE_S[1]]  # fmt: skip
    first: list[Reply] = []
    rest: list[Reply] = []
    seen: set[str] = set()
    for r in fit:
        (rest if r.sample_id in seen else first).append(r)
        seen.add(r.sample_id)
    return (first + rest)[:count]


class Measure:
    """The held-out measurement (module doc); ``recognizer`` None: no word error rates."""

    def __init__(
        self, replies: Sequence[Reply], codebook: Codebook, recognizer: Recognizer | None,
        chunk_tokens: int,
    ) -> None:  # fmt: skip
        self.replies, self.codebook, self.recognizer = list(replies), codebook, recognizer
        self.chunk_tokens = chunk_tokens
        self.std = torch.from_numpy(codebook.stats.std)[:, None]

    def wer(self, waves: Sequence[torch.Tensor | np.ndarray[Any, Any]]) -> float | None:
        if self.recognizer is None or not self.replies:
            return None
        total: WordErrors = NO_ERRORS
        for r, wave in zip(self.replies, waves, strict=True):
            heard = self.recognizer.transcribe(np.asarray(wave, np.float32), SAMPLE_RATE)
            total = total + word_errors(reference_text(r.text), heard.text)
        return total.wer

    def original(self) -> float | None:
        return self.wer([r.audio() for r in self.replies])

    @torch.no_grad()
    def __call__(self, flow: FlowDecoder, vocoder: AnyVocoder) -> dict[str, float | None]:
        was = flow.training, vocoder.training
        flow.eval()
        vocoder.eval()
        voc, chain, units, f0_pred, f0_true = [], [], [], [], []
        l1 = dict.fromkeys(("vocoder", "chain", "units"), 0.0)
        flow_s = vocoder_s = audio_s = 0.0
        for i, r in enumerate(self.replies):
            z, wave = torch.from_numpy(r.z), torch.from_numpy(r.audio())
            began = time.perf_counter()
            frames = self.chunk_tokens * FRAMES_PER_TOKEN  # a chunk's mel, as the daemon feeds it
            voc.append(vocode(vocoder, z[None], frames)[0])
            vocoder_s += time.perf_counter() - began
            if vocoder.source is not None and r.f0 is not None:
                f0_pred.append(vocoder.source.head(z[None]).hz()[0])
                f0_true.append(torch.from_numpy(r.f0))
            began = time.perf_counter()
            z_chain, pcm = speak(flow, vocoder, r.codes, self.chunk_tokens, seed=i)
            flow_s += time.perf_counter() - began
            chain.append(pcm)
            z_units = torch.from_numpy(self.codebook.stats.normalise(self.codebook.decode(r.codes)))
            units.append(vocode(vocoder, z_units[None], frames)[0])
            audio_s += len(wave) / SAMPLE_RATE
            l1["vocoder"] += float((log_mel(voc[-1]) - log_mel(wave)).abs().mean())
            l1["chain"] += float(((z_chain - z) * self.std).abs().mean())
            l1["units"] += float(((z_units - z) * self.std).abs().mean())
        flow.train(was[0])
        vocoder.train(was[1])
        n = len(self.replies)
        f0 = {}
        if f0_pred:
            cents, agree = f0_agreement(torch.cat(f0_pred), torch.cat(f0_true))
            f0 = {"f0_cents": None if cents is None else round(cents, 1),
                  "voicing_agreement": round(agree, 4)}  # fmt: skip
        return {
            "wer_vocoder": self.wer(voc), "wer_chain": self.wer(chain),
            "wer_units": self.wer(units),
            **{f"{k}_mel_l1": round(v / n, 4) if n else None for k, v in l1.items()},
            "vocoder_rtf": round(vocoder_s / audio_s, 4) if n else None,
            "flow_rtf": round(max(0.0, flow_s - vocoder_s) / audio_s, 4) if n else None,
            **f0,
        }  # fmt: skip


def _recognizer(write: Callable[[str], None]) -> Recognizer | None:
    try:
        recognizer = PocketSphinx()
        word_errors("a 1", "a one")  # jiwer and num2words, the rest of the asr extra
    except EvaluationError as e:
        log.warning("no word error rates: %s", e)
        write(f"train-voice: no word error rates ({e})")
        return None
    return recognizer


def _lr_factor(step: int, warmup: int, steps: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return FINAL_LR + (1 - FINAL_LR) * 0.5 * (1 + math.cos(math.pi * progress))


def component_configs(cfg: VoiceConfig, codebook: int) -> tuple[FlowDecoderConfig, VocoderConfig]:
    """The preset's flow decoder and vocoder with the recipe's sizes."""
    base = PRESETS[cfg.train.preset]()
    f, v = cfg.flow, cfg.vocoder
    flow = replace(base.flow, d_model=f.d_model, heads=f.heads, ffn_dim=f.ffn_dim,
                   encoder_layers=f.encoder_layers, estimator_layers=f.estimator_layers,
                   euler_steps=f.euler_steps)  # fmt: skip
    if codebook > flow.codebook:
        raise VoiceConfigError(f"units.k {codebook} exceeds the model's {flow.codebook} codes")
    vocoder = replace(base.vocoder, channels=v.channels, resblock_kernels=v.kernels,
                      resblock_dilations=v.dilations, source=v.source,
                      harmonics=v.harmonics, kind=v.kind, iterations=v.iterations)  # fmt: skip
    return flow, vocoder


class _Draws:
    """Each step's windows and segments: functions of the seed and the step only."""

    def __init__(self, cfg: VoiceConfig, replies: Sequence[Reply], chunk_tokens: int,
                 lookahead: int) -> None:  # fmt: skip
        self.cfg, self.replies, self.chunk_tokens = cfg, replies, chunk_tokens
        self.groups = max(1, round(cfg.flow.window_s * 25 / chunk_tokens))
        self.windows: list[tuple[int, int]] = []  # (reply, first group)
        for i, r in enumerate(replies):
            n = len(token_groups(len(r.codes), chunk_tokens, lookahead))
            self.windows += [(i, g) for g in range(max(1, n - self.groups + 1))]
        self.frames = round(cfg.vocoder.segment_s * 50)
        self.offsets = np.cumsum([0] + [r.z.shape[1] for r in replies])

    def generator(self, step: int, part: str) -> torch.Generator:
        return component_generator(self.cfg.train.seed, f"{part}:{step}")

    def flow(self, gen: torch.Generator) -> list[Window]:
        picks = torch.randint(len(self.windows), (self.cfg.flow.batch,), generator=gen)
        out = []
        for k in picks.tolist():
            i, first = self.windows[k]
            out.append(Window(self.replies[i], first, self.groups))
        return out

    def vocoder(self, step: int) -> list[tuple[int, int]]:
        gen = self.generator(step, "vocoder")
        picks = torch.randint(int(self.offsets[-1]), (self.cfg.vocoder.batch,), generator=gen)
        out = []
        for frame in picks.tolist():
            i = int(np.searchsorted(self.offsets, frame, side="right")) - 1
            last = max(0, self.replies[i].z.shape[1] - self.frames)
            out.append((i, min(frame - int(self.offsets[i]), last)))
        return out


@dataclass
class _Run:
    """What a run works on: its place, its state on disk (when resuming), its data."""

    work: Path
    recipe: str
    state: dict[str, Any] | None
    chunk_tokens: int
    codebook: Codebook
    replies: list[Reply]
    measure: Measure
    draws: _Draws


def _saved_state(cfg: VoiceConfig, data: Path, out: Path) -> dict[str, Any] | None:
    """``OUT``'s resumable state (None: a new run), checked to be this run's."""
    path = out / "train" / "state.pt"
    if not path.is_file():
        return None
    state: dict[str, Any] = torch.load(path, weights_only=False)
    same = same_recipe(state["recipe"], parse_voice_config, cfg)
    if same and state["data"] == str(data.resolve()):
        return state
    raise VoiceConfigError(
        f"{out}: holds a voice run with another recipe or data ({path.parent / 'recipe.toml'});"
        " resume it with the same --config and --data, or train into another --out"
    )


def _finished(cfg: VoiceConfig, out: Path, state: dict[str, Any],
              write: Callable[[str], None]) -> VoiceResult | None:  # fmt: skip
    """The run, when ``state`` has every step and the voice it wrote is that step's: its
    last measurement (``voice.json``'s), nothing loaded."""
    try:
        doc = json.loads((out / VOICE_JSON).read_text("utf-8"))
    except (OSError, ValueError):
        return None  # the slow way, as before: loaded, nothing trained
    metrics = doc.get("metrics") if isinstance(doc, dict) else None
    if not isinstance(metrics, dict) or not state["step"] == doc.get("step") == cfg.steps:
        return None
    write(f"train-voice: {out} has run all {cfg.steps} steps of its recipe; nothing to train")
    return VoiceResult(out, cfg.steps, cfg.steps, metrics)


def _records(cfg: VoiceConfig, data: Path) -> list[Any]:
    """The samples of ``data`` the voice trains and measures on, checked."""
    records = read_index(data)
    if cfg.data.samples and len(records) < cfg.data.samples:
        raise VoiceConfigError(
            f"--data {data}: {len(records)} samples; data.samples (or --samples) asks "
            f"for the first {cfg.data.samples}"
        )
    records = records[: cfg.data.samples or None]  # the first N: a set's larger one begins so
    if len(records) < 2:
        raise VoiceConfigError(f"--data {data}: {len(records)} samples; need at least 2")
    return records


def _open(cfg: VoiceConfig, data: Path, out: Path, write: Callable[[str], None],
          state: dict[str, Any] | None, records: list[Any]) -> _Run:  # fmt: skip
    """Split, fit (or reload) the codebook, load the replies; ``state``: ``_saved_state``'s."""
    import tomli_w

    work, recipe = out / "train", tomli_w.dumps(cfg.to_toml_dict())
    work.mkdir(parents=True, exist_ok=True)
    (work / "recipe.toml").write_text(recipe, "utf-8")
    train_recs, val_recs = split(records, cfg.data.validation, cfg.data.seed)
    began = time.monotonic()

    def progress(what: str) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            if done == total or done % 50 == 0:
                write(f"train-voice: {what} {done}/{total} ({time.monotonic() - began:.0f} s)")

        return report

    if state is None or not (out / UNITS_FILE).is_file():
        u = cfg.units
        _, book = fit_units(data, train_recs, u.k, iterations=u.iterations, seed=cfg.data.seed,
                            progress=progress("units: reading"))  # fmt: skip
        save_units(out, book)
    codebook = Codebook.load(out / UNITS_FILE)
    chunk = PRESETS[cfg.train.preset]().speech_tokens_per_chunk
    pitch = cfg.vocoder.source == "sine"
    replies = load_replies(data, train_recs, codebook, chunk, progress("loading replies"),
                           pitch=pitch)  # fmt: skip
    if not replies:
        raise VoiceConfigError(f"--data {data}: no assistant speech in the training split")
    held = load_replies(data, val_recs, codebook, chunk, pitch=pitch) if val_recs else replies
    recognizer = _recognizer(write) if cfg.eval.utterances else None
    measure = Measure(probes(held, cfg.eval.utterances, chunk), codebook, recognizer, chunk)
    lookahead = PRESETS[cfg.train.preset]().flow.lookahead_tokens
    write(f"train-voice: {len(replies)} replies ({sum(len(r.codes) for r in replies) / 25:.0f} s "
          f"of speech), {len(measure.replies)} held out to measure")  # fmt: skip
    draws = _Draws(cfg, replies, chunk, lookahead)
    return _Run(work, recipe, state, chunk, codebook, replies, measure, draws)


class _Parts:
    """The two components with their optimisers and schedules (none for a Griffin-Lim
    vocoder: it has no weights, only the codebook's mel statistics)."""

    def __init__(self, cfg: VoiceConfig, codebook: Codebook) -> None:
        flow_cfg, vocoder_cfg = component_configs(cfg, codebook.size)
        self.flow, self.vocoder = FlowDecoder(flow_cfg), make_vocoder(vocoder_cfg)
        init_component(self.flow, cfg.train.seed, "flow_decoder")
        init_component(self.vocoder, cfg.train.seed, "vocoder")
        if isinstance(self.vocoder, GriffinLimVocoder):
            stats = codebook.stats
            self.vocoder.set_stats(torch.from_numpy(stats.mean), torch.from_numpy(stats.std))
        f, v = cfg.flow, cfg.vocoder
        self.opt_f = torch.optim.AdamW(self.flow.parameters(), lr=f.learning_rate)
        self.sch_f = torch.optim.lr_scheduler.LambdaLR(
            self.opt_f, lambda s: _lr_factor(s, f.warmup_steps, f.steps)
        )
        self.trained: dict[str, Any] = {}
        if cfg.vocoder_steps:
            self.opt_v = torch.optim.AdamW(self.vocoder.parameters(), lr=v.learning_rate)
            self.sch_v = torch.optim.lr_scheduler.LambdaLR(
                self.opt_v, lambda s: _lr_factor(s, v.warmup_steps, v.steps)
            )
            self.trained = {"opt_v": self.opt_v, "sch_v": self.sch_v}

    def named(self) -> dict[str, Any]:
        return {"flow": self.flow, "vocoder": self.vocoder, "opt_f": self.opt_f,
                "sch_f": self.sch_f, **self.trained}  # fmt: skip

    def step(self, cfg: VoiceConfig, run: _Run, step: int) -> dict[str, Any]:
        """Step ``step`` of each component still training -> its history record."""
        record: dict[str, Any] = {"step": step + 1}
        with torch.enable_grad():  # whatever the caller set
            if step < cfg.flow.steps:
                gen = run.draws.generator(step, "flow")
                windows = run.draws.flow(gen)
                fm, prior = flow_losses(self.flow, windows, run.chunk_tokens, gen)
                _update(self.opt_f, self.sch_f, self.flow, fm + cfg.flow.prior_weight * prior)
                record |= {"flow_loss": round(fm.item(), 5), "flow_prior": round(prior.item(), 5),
                           "flow_lr": self.sch_f.get_last_lr()[0]}  # fmt: skip
            if step < cfg.vocoder_steps and isinstance(self.vocoder, Vocoder):
                v = cfg.vocoder
                stft, mel, f0 = vocoder_losses(self.vocoder, run.replies,
                                               run.draws.vocoder(step), run.draws.frames,
                                               CONTEXT_FRAMES)  # fmt: skip
                loss = stft + v.mel_weight * mel + v.f0_weight * f0
                _update(self.opt_v, self.sch_v, self.vocoder, loss)
                record |= {"vocoder_loss": round(stft.item(), 5),
                           "vocoder_mel": round(mel.item(), 5),
                           "vocoder_lr": self.sch_v.get_last_lr()[0]}  # fmt: skip
                if v.source != "none":
                    record["vocoder_f0"] = round(f0.item(), 5)
        return record


def train_voice(
    cfg: VoiceConfig, data: Path, out: Path, write: Callable[[str], None],
    *, stop_after: int | None = None,
) -> VoiceResult:  # fmt: skip
    """Run (or resume) the voice recipe on ``data`` into ``out`` (module doc).
    ``stop_after``: stop after that many steps of this call (a test of resuming)."""
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    records = _records(cfg, data)  # the data's errors before the state's
    state = _saved_state(cfg, data, out)
    done = None if state is None else _finished(cfg, out, state, write)
    if done is not None:
        return done
    run = _open(cfg, data, out, write, state, records)
    parts = _Parts(cfg, run.codebook)
    history = run.work / "history.jsonl"
    if run.state is not None:
        step, original = restore(run.state, parts.named(), history), run.state["wer_original"]
        write(f"train-voice: resuming {out} at step {step}/{cfg.steps}")
    else:
        step, original = 0, run.measure.original()
        baseline = {"wer_original": original, **run.measure(parts.flow, parts.vocoder)}
        history.write_text(json.dumps({"step": 0, "validation": baseline}) + "\n", "utf-8")
        write(measure_line(0, baseline))
    resumed_from, metrics = step, {"wer_original": original}
    note_machine(run.work, step, "cpu")  # the voice trains on the CPU
    shown, pace = time.monotonic(), Pace(step)
    with StopRequest() as stop:  # a signal ends the step and saves (stopping.py)
        while (step < cfg.steps and not stop.signal
               and (stop_after is None or step - resumed_from < stop_after)):  # fmt: skip
            record = parts.step(cfg, run, step)
            step += 1
            append(history, record)
            if time.monotonic() - shown >= PROGRESS_EVERY_S or step == cfg.steps:
                shown = time.monotonic()
                rate = pace.rate(step)
                losses = ", ".join(f"{k} {record[k]:.3f}" for k in LOSS_KEYS if k in record)
                write(f"train-voice: step {step}/{cfg.steps} {losses}, {rate:.2f} s/step, "
                      f"ETA {rate * (cfg.steps - step):.0f} s")  # fmt: skip
            measured = step % cfg.train.checkpoint_every == 0 or step == cfg.steps
            if measured:
                metrics = {"wer_original": original, **run.measure(parts.flow, parts.vocoder)}
                append(history, {"step": step, "validation": metrics})
                write(measure_line(step, metrics))
                save_voice(out, parts.flow, parts.vocoder, step, metrics)
                (run.work / "metrics.json").write_text(
                    json.dumps({"step": step, "validation": metrics}, indent=2) + "\n", "utf-8"
                )
                plot_voice_history(history, run.work / "loss.png")
            if measured or stop.signal:
                snapshot = {name: part.state_dict() for name, part in parts.named().items()}
                snapshot |= {"step": step, "wer_original": original, "recipe": run.recipe,
                             "data": str(data.resolve())}  # fmt: skip
                save_state(run.work / "state.pt", snapshot)
    if stop.signal:
        write(f"train-voice: {stop.signal.name}: stopped at step {step}/{cfg.steps}, the "
              "state saved; the same command goes on from it")  # fmt: skip
    if step == cfg.steps:
        write(f"train-voice: wrote the voice {out}")
    return VoiceResult(out, step, resumed_from, metrics, stopped_by=stop.signal)


def _update(opt: torch.optim.Optimizer, sched: Any, module: torch.nn.Module, loss: Any) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    opt.step()
    sched.step()
