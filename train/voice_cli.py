"""``venus train-voice``: registration only; torch is imported when the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HELP = """\
Train the tiny model's voice on a `venus datagen` set's assistant speech (torch, CPU):
a k-means codebook of the output mel (the speech codes), the flow decoder (codes -> mel,
flow matching, chunk-causal as the daemon streams it) and the vocoder (mel -> 24 kHz
PCM, multi-resolution STFT and mel losses), so that `venus train` only has to teach the
speech decoder which codes to emit (docs/training.md).

VOICE gets units.safetensors, voice.json (the components' configs), flow_decoder and
vocoder safetensors, and VOICE/train/: the recipe, a resumable state, the history with
the held-out word error rates (PocketSphinx, the asr extra) and loss.png. Ctrl-C or
SIGTERM ends the step in hand and saves it (twice stops at once); the same command
resumes from the last state."""

EPILOG = """\
examples:
  venus train-voice --data train-set --out voice
  venus train-voice --config train/recipes/voice.toml --data train-set --out voice  # resumes
  venus train-voice --data big-set --samples 2400 --out voice   # the first 2,400 only"""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    cmd = commands.add_parser(
        "train-voice",
        help="train the tiny model's voice (codes, flow decoder, vocoder; torch, CPU; resumable)",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("--config", type=Path, metavar="FILE", help="the recipe (TOML; defaults "
                     "for every key missing)")  # fmt: skip
    cmd.add_argument("--data", type=Path, required=True, metavar="DIR", help="the set")
    cmd.add_argument("--out", type=Path, required=True, metavar="VOICE", help="the voice")
    cmd.add_argument("--samples", type=int, metavar="N", help="train on the set's first N "
                     "samples only (the recipe's data.samples; 0: all): a larger set of the "
                     "same config and seed begins with the smaller one's samples")  # fmt: skip
    cmd.set_defaults(run=_train_voice)


def _train_voice(args: argparse.Namespace) -> int:
    from venus.train.cli import torch_entry, write_line
    from venus.train.voice_config import load_voice_config, with_samples

    cfg = load_voice_config(args.config)
    if args.samples is not None:
        cfg = with_samples(cfg, args.samples)
    train_voice = torch_entry("venus.train.voice_run", "train_voice")
    result = train_voice(cfg, args.data, args.out, write_line)
    if result.stopped_by is not None:  # the state is saved; the same command goes on
        return 128 + int(result.stopped_by)
    from venus.evaluation.markdown import pct

    def wer(key: str) -> str:
        return pct(result.metrics.get(key), "n/a")

    print(  # noqa: T201
        f"{result.steps} steps; held-out word error rate: original {wer('wer_original')}, "
        f"vocoder {wer('wer_vocoder')}, codes -> flow -> vocoder {wer('wer_chain')}: "
        f"{args.out}"
    )
    return 0
