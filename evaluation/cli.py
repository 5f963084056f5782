"""``venus eval``: the evaluation suite's commands (docs/evaluation.md).

A subcommand is one ``add_parser`` in :func:`register` and one ``_<name>`` function.
Registration imports nothing heavy; a command imports its modules when it runs, so
``venus --help`` stays instant.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HELP = """\
Evaluate full-duplex behaviour offline, without ASR or an LLM judge: overlap behaviour
(RESPOND / RESUME / UNCERTAIN) and its rates per scenario, stop and response latency,
and the v1 take-over measures, on Full-Duplex-Bench-style data. See docs/evaluation.md."""

SCORE_HELP = """\
Score any system's output.wav files against a Full-Duplex-Bench data dir.

--data: a set written by `venus datagen` (its full_duplex_bench/ is used) or a directory
of task folders (user_interruption, user_backchannel, talking_to_other,
background_speech; v1's synthetic_user_interruption, candor_pause_handling,
synthetic_pause_handling, candor_turn_taking), one folder per sample with input.wav and
metadata.json (timestamps: [start, end], the overlap window).

--outputs: per sample OUTPUTS/<task>/<id>/output.wav (or OUTPUTS/<id>/output.wav): the
system's audio alone, aligned with input.wav from t = 0, any PCM sample rate, no longer
than the input.

Writes OUT/report.json (per sample and per scenario) and OUT/report.md (tables)."""

SCORE_EPILOG = """\
examples:
  venus datagen --preset smoke --seed 1 --out smoke
  venus eval score --data smoke --outputs my-system-out --out scores"""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    cmd = commands.add_parser(
        "eval",
        help="evaluate full-duplex behaviour (overlap labels, latencies) offline",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = cmd.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)

    score = sub.add_parser(
        "score",
        help="score any system's output.wav files against a Full-Duplex-Bench data dir",
        description=SCORE_HELP,
        epilog=SCORE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    score.add_argument("--data", type=Path, required=True, metavar="DIR", help="the data dir")
    score.add_argument(
        "--outputs", type=Path, required=True, metavar="DIR", help="the system's outputs"
    )
    score.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where the report goes"
    )
    score.add_argument(
        "--system",
        metavar="NAME",
        help="the system's name in the report (default: the outputs dir's name)",
    )
    score.set_defaults(run=_score)


def _score(args: argparse.Namespace) -> int:
    from venus.evaluation.metrics import DEFAULT_RULES
    from venus.evaluation.score import find_samples, score_samples
    from venus.evaluation.summary import summarize, write_report

    refs = find_samples(args.data)
    log.info("scoring %d samples of %s against %s", len(refs), args.data, args.outputs)
    scores = score_samples(refs, args.outputs, rules=DEFAULT_RULES)
    system = args.system or args.outputs.resolve().name
    report = summarize(system, args.data, args.outputs, scores, DEFAULT_RULES)
    json_path, md_path = write_report(report, args.out)
    for s in report.scenarios:
        print(f"{s.task}: {s.headline} {100 * s.headline_rate:.1f}% of {s.samples}")  # noqa: T201
    print(f"{len(scores)} samples scored: {json_path}, {md_path}")  # noqa: T201
    return 0
