"""``venus train``: registration only; torch is imported when the command runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

HELP = """\
Train the tiny model on a `venus datagen` set (torch; CPU or an NVIDIA GPU): the control
token of every chunk, the assistant's text, its delegation calls with arguments and what
it says after an injected result, teacher-forced on the exact token layout the daemon
runs (docs/training.md). Only the assistant's positions are supervised.

OUT becomes a checkpoint for `venus export` (config.json, safetensors, a byte-level BPE
tokenizer.json trained on the set) with OUT/train/: the recipe, a resumable state, the
loss history and loss.png. Stopped, the same command resumes from the last state; Ctrl-C
or SIGTERM (systemctl stop, kill) ends the step in hand and saves the state first, then
exits 130 or 143 (a second one stops at once, back to the last saved state). With
train.keep = "balanced_events" a run that ends on a step it did not keep writes that step
as OUT/last too (scripts/closed-loop-validation compares the two in the closed loop).

With --voice (made by `venus train-voice`), the speech decoder learns to emit the voice's
speech units for what the assistant says, and the voice's flow decoder and vocoder go
into the checkpoint: the exported engines then speak.

--device auto trains on the first CUDA GPU that torch sees, else on the CPU; a run may
resume on another device (the state is saved device-free). --jobs loads the samples in
that many processes (loading a 2,400-sample set takes ~3 minutes on one core).

Validation (every train.checkpoint_every steps, and what train.keep chooses by) runs on
data.validation's share of --data, or with --val-data on all of another set: a few
hundred samples made with their own seed rank checkpoints on more overlap events."""

EPILOG = """\
examples:
  venus datagen --preset eval --seed 7 --jobs 2 --out train-set
  venus train --data train-set --out venus-tiny
  venus train --config recipe.toml --data train-set --out venus-tiny   # resumes if stopped
  venus train --device cuda --jobs 0 --data train-set --out venus-tiny  # GPU, load on all CPUs
  venus datagen --preset eval --seed 23 --samples 300 --jobs 2 --out val-set
  venus train --data train-set --val-data val-set --out venus-tiny   # validate on another set
  venus export venus-tiny --out venus-tiny-engines"""


VALIDATE_HELP = """\
The teacher-forced validation figures of a `venus train` checkpoint on every sample of a
set: control accuracy beside chance, speak recall, turn accuracy, the decisions where an
overlap event is decided (and the holds among them, that carry on through one, and the
carrying on in the two chunks after a hold), text accuracy and that of a reply's first
chunk and of its first token (whether it answers the question asked); from the run's
listening head (CKPT/train/state.pt) the character error rate of the user's words; with
--voice, the speech decoder's code accuracy teacher-forced and closed loop (fed its own
codes, as the daemon does). `venus train` reports these on a split of its own training
set; run this on a held-out set (other voices, another seed, the evaluation's mix) to
choose a checkpoint for what the daemon will hear, without running the daemon
(docs/training.md)."""

VALIDATE_EPILOG = """\
examples:
  venus validate venus-tiny --data heldout
  venus validate venus-tiny --data heldout --voice voice --jobs 0 --json heldout.json
  venus validate venus-tiny --data heldout --by-category
  venus validate venus-tiny --data heldout --by-event   # each overlap event, by kind
  venus validate venus-tiny --data heldout --transcripts heard.jsonl   # what it heard"""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    cmd = commands.add_parser(
        "train",
        help="train the tiny model on a venus datagen set (torch, CPU or GPU; resumable)",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("--config", type=Path, metavar="FILE", help="the recipe (TOML; defaults "
                     "for every key missing)")  # fmt: skip
    cmd.add_argument("--data", type=Path, required=True, metavar="DIR", help="the set")
    cmd.add_argument("--out", type=Path, required=True, metavar="CKPT", help="the checkpoint")
    cmd.add_argument("--voice", type=Path, metavar="VOICE", help="a `venus train-voice` output: "
                     "also train the speech decoder on its speech units, and put its flow "
                     "decoder and vocoder into the checkpoint")  # fmt: skip
    cmd.add_argument("--init", type=Path, metavar="CKPT", help="start from this `venus train` "
                     "checkpoint's weights and tokenizer (same preset), e.g. to anneal a GPU "
                     "run on the CPU")  # fmt: skip
    cmd.add_argument("--val-data", type=Path, metavar="DIR", help="validate on every sample "
                     "of this set (e.g. one made with its own seed) and train on all of "
                     "--data, instead of holding out data.validation's share of it")  # fmt: skip
    cmd.add_argument("--device", default="auto", metavar="DEV", help="auto (default: the "
                     "GPU when torch sees one), cpu, cuda or cuda:N")  # fmt: skip
    cmd.add_argument("--jobs", type=int, default=1, metavar="J", help="processes that load "
                     "the samples (0: one per CPU; default 1)")  # fmt: skip
    cmd.set_defaults(run=_train)

    check = commands.add_parser(
        "validate",
        help="a venus train checkpoint's teacher-forced figures on any set (e.g. held-out voices)",
        description=VALIDATE_HELP,
        epilog=VALIDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("checkpoint", type=Path, metavar="CKPT", help="a `venus train` output")
    check.add_argument("--data", type=Path, required=True, metavar="DIR", help="the set")
    check.add_argument("--voice", type=Path, metavar="VOICE", help="the voice it was trained "
                       "with: also the speech decoder, teacher-forced and closed loop")  # fmt: skip
    check.add_argument("--jobs", type=int, default=1, metavar="J", help="processes that load "
                       "the samples (0: one per CPU; default 1)")  # fmt: skip
    check.add_argument("--json", type=Path, metavar="FILE", help="also write the figures "
                       "as JSON")  # fmt: skip
    check.add_argument("--by-category", action="store_true", help="also each category of "
                       "sample apart (delegation, offline_understanding, ...): they ask "
                       "different things")  # fmt: skip
    check.add_argument("--by-event", action="store_true", help="also each overlap event, "
                       "counted by what it is (a backchannel, an aside while speaking or "
                       "waiting, background speech, an interruption by intent): held "
                       "through, stopped for or kept listening as the data does")  # fmt: skip
    check.add_argument("--transcripts", type=Path, metavar="FILE", help="also write each "
                       "user turn the listening head read as a JSON line: its sample, "
                       "start_s and end_s, what was said, what the head heard (greedy CTC) "
                       "and the turn's CER")  # fmt: skip
    check.set_defaults(run=_validate)


def torch_entry(module: str, name: str) -> Any:
    """``module.name``, imported now; without torch (the export extra) a clear error."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as e:
        from venus.errors import VenusError
        from venus.export.cli import TORCH_MISSING

        raise VenusError(f"{TORCH_MISSING} ({e})") from None


def write_line(line: str) -> None:
    """A progress line, on stderr at once."""
    print(line, file=sys.stderr, flush=True)  # noqa: T201


def _train(args: argparse.Namespace) -> int:
    from venus.train.config import load_train_config

    cfg = load_train_config(args.config)
    train = torch_entry("venus.train.loop", "train")
    if args.jobs < 0:
        from venus.errors import VenusError

        raise VenusError(f"--jobs {args.jobs}: use 0 (one per CPU) or more")
    jobs = args.jobs or os.cpu_count() or 1
    result = train(
        cfg, args.data, args.out, write_line,
        voice=args.voice, device=args.device, jobs=jobs, init=args.init, val_data=args.val_data,
    )  # fmt: skip
    if result.stopped_by is not None:  # the state is saved; the same command goes on
        return 128 + int(result.stopped_by)
    which = f" (the checkpoint is step {result.kept}'s)" if 0 < result.kept < result.steps else ""
    print(f"{result.steps} steps{which}; validation {_figures(result.metrics)}: {args.out}")  # noqa: T201
    return 0


def _figures(m: dict[str, float]) -> str:
    """The run's last validation in a few words (a listen-only run has only the CER)."""
    words = []
    if "control_accuracy" in m:
        words += [
            f"control accuracy {100 * m['control_accuracy']:.1f}% "
            f"(chance {100 * m['control_chance']:.1f}%)",
            f"text accuracy {100 * m['text_accuracy']:.1f}%",
        ]
    if "speech_accuracy" in m:
        words.append(f"speech accuracy {100 * m['speech_accuracy']:.1f}%")
    if "heard_cer" in m:
        words.append(f"user speech CER {100 * m['heard_cer']:.1f}%")
    return ", ".join(words)


def _validate(args: argparse.Namespace) -> int:
    import json

    from venus.train.validation import validation_line

    if args.jobs < 0:
        from venus.errors import VenusError

        raise VenusError(f"--jobs {args.jobs}: use 0 (one per CPU) or more")
    validate = torch_entry("venus.train.check", "validate")
    m = validate(args.checkpoint, args.data, write_line, voice=args.voice,
                 jobs=args.jobs or os.cpu_count() or 1, by_category=args.by_category,
                 by_event=args.by_event, transcripts=args.transcripts)  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(m, indent=2) + "\n", "utf-8")
    print(validation_line(0, m, f"{args.checkpoint} on {args.data}"))  # noqa: T201
    for name, figures in m.get("by_category", {}).items():
        print(validation_line(0, figures, f"  {name} ({figures['samples']} samples)"))  # noqa: T201
    if "by_event" in m:
        from venus.train.by_event import event_lines

        print("overlap events, teacher-forced:")  # noqa: T201
        for line in event_lines(m["by_event"]):
            print(f"  {line}")  # noqa: T201
    return 0
