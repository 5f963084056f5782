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


DUPLEX_HELP = """\
Run the daemon's offline path (what `venus run --offline` runs) over every sample of a
Full-Duplex-Bench data dir, once per decision policy, and score them side by side.

--policy (repeatable; default all three): model (the model decides, as in production),
vad (a cascade: yield to any overlapping user speech, answer after 0.6 s of silence),
always-continue (never yield while speaking). Each overlap is labelled from the daemon's
timeline and confirmed on output.wav (docs/evaluation.md).

The camera: a sample cut from a `venus datagen` sample of the video group runs with that
sample's video.avi, read from where the cut starts, as the daemon would have seen it; the
benchmark's own samples and audio-group ones run without one (--no-video: none at all).

Writes OUT/<policy>/<task>/<id>/ (output.wav, exactly as long as input.wav;
timeline.jsonl, conversation.wav, summary.json), OUT/<policy>/report.json and report.md,
and OUT/report.json and OUT/report.md with the policies side by side.

--rescore runs nothing: it scores the outputs already in OUT again (after an update of
venus's scoring, or of the data's annotations) and rewrites the reports."""

DUPLEX_EPILOG = """\
examples:
  venus datagen --preset eval --seed 1 --jobs 2 --out eval-set
  venus eval duplex --data eval-set --out eval-run --jobs 2
  venus eval duplex --data eval-set --out try --policy vad --limit 5
  venus eval duplex --data eval-set --out greedy --engines my-engines --temperature 0
  venus eval duplex --data eval-set --out eval-run --rescore"""


ASR_HELP = """\
Optional, word-level: transcribe every output.wav under --outputs with an offline
recogniser whose model ships in its package (PocketSphinx, US English; nothing is
downloaded; install with `pip install 'venus[asr]'`). The other eval commands never need
it.

Where a timeline.jsonl lies beside an output (the daemon's own runs), the word error rate
of what was heard against the text of the replies the daemon spoke to their end. With
--data, the words the system started inside each overlap window and after it.

Writes OUT/asr.json and OUT/asr.md. See docs/evaluation.md."""

ASR_EPILOG = """\
examples:
  venus eval asr --outputs eval-run/vad --data eval-set --out eval-run/vad-asr
  venus eval asr --outputs my-system-out --out words"""


REGRID_HELP = """\
Write a copy of a `venus datagen` set's Full-Duplex-Bench cuts with each cut moved back to
the chunk boundary at or before its start on its source sample: the same events at
another phase of the daemon's one-second chunks, with up to a chunk more audio before
them (timestamps shifted to match; cuts without a source sample copied as they are).
`venus eval duplex` on the set and on the copy is the same test drawn twice: how far the
rates move between the two is the evaluation's noise for that model, and their mean a
steadier figure than either (docs/evaluation.md).

Writes OUT/full_duplex_bench/<task>/<id>/ and OUT/samples (a link to the set's samples)."""

REGRID_EPILOG = """\
examples:
  venus eval regrid --data heldout --out heldout-grid
  venus eval duplex --data heldout-grid --out run-grid --policy model --temperature 0"""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    from venus.evaluation.sampling import add_temperature, idle_wait_arg, listen_bias_arg

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

    delegation = sub.add_parser(
        "delegation",
        help="score delegation: tool selection F1, arguments, Pass@1, missed / unnecessary "
        "calls, time to result",
        description="""\
Score delegation on a `venus datagen` set: tool-selection precision / recall / F1 over
capability names, argument accuracy (schema-normalised exact match, numbers within 5%),
Pass@1, missed and unnecessary delegation rates, decisions on pending work (cancel,
retry, revise, replace), time to result and to the spoken result. By default runs the
`delegation` samples (and --others of the rest) through the daemon offline with the real
harness, the built-ins and stand-ins answering from the trajectory for the mock domains,
into OUT/samples/<id>/. Writes OUT/delegation.json and OUT/delegation.md. See
docs/evaluation.md.""",
        epilog="""\
examples:
  venus datagen --preset eval --seed 1 --out eval-set
  venus eval delegation --data eval-set --out delegation
  venus eval delegation --data eval-set --out greedy --engines my-engines --temperature 0
  venus eval delegation --data eval-set --out check --reference
  venus eval delegation --data eval-set --out other --hypothesis their-runs""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    delegation.add_argument("--data", type=Path, required=True, metavar="DIR", help="the set")
    delegation.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where runs and report go"
    )
    mode = delegation.add_mutually_exclusive_group()
    mode.add_argument(
        "--reference",
        action="store_true",
        help="score the trajectories' own targets against themselves (every figure perfect: "
        "a check of the evaluator)",
    )
    mode.add_argument(
        "--hypothesis",
        type=Path,
        metavar="DIR",
        help="score precomputed runs: DIR/<sample id>/timeline.jsonl, with items.jsonl for "
        "result times",
    )
    delegation.add_argument(
        "--engines", type=Path, metavar="DIR", help="(default: the tiny engines of venus demo)"
    )
    delegation.add_argument(
        "--policy",
        choices=("model", "vad", "always-continue"),
        help="who takes each chunk's decision in the runs (default: model)",
    )
    delegation.add_argument(
        "--others",
        type=float,
        default=0.2,
        metavar="SHARE",
        help="share of the other categories' samples scored too, for unnecessary "
        "delegations (0-1, default 0.2)",
    )
    add_temperature(delegation)
    delegation.add_argument(
        "--free-calls",
        action="store_true",
        help="decode delegation spans without the capabilities' grammar ([model] call_grammar "
        "= false): the calls as the model writes them, malformed ones included",
    )
    delegation.add_argument(
        "--idle-wait",
        type=idle_wait_arg,
        metavar="S",
        help="[harness] idle_wait_s for the runs: results that wait for a pause come in "
        "anyway after S seconds of the user's speech (default: the daemon's)",
    )
    delegation.add_argument("--system", metavar="NAME", help="the system's name in the report")
    delegation.set_defaults(run=_delegation)

    duplex = sub.add_parser(
        "duplex",
        help="run the daemon offline on a Full-Duplex-Bench data dir under each decision "
        "policy and score them side by side",
        description=DUPLEX_HELP,
        epilog=DUPLEX_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    duplex.add_argument("--data", type=Path, required=True, metavar="DIR", help="the data dir")
    duplex.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where outputs and reports go"
    )
    duplex.add_argument(
        "--engines",
        type=Path,
        metavar="DIR",
        help="engines written by `venus export` (default: the tiny engines shipped with venus)",
    )
    duplex.add_argument(
        "--policy",
        action="append",
        choices=("model", "vad", "always-continue"),
        help="a decision policy to run; repeat for several (default: all three)",
    )
    duplex.add_argument(
        "--limit", type=int, metavar="N", help="only the first N samples of each task"
    )
    duplex.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="J",
        help="samples run in J worker processes (0: one per CPU; default 1)",
    )
    duplex.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    duplex.add_argument(
        "--listen-bias",
        type=listen_bias_arg,
        default=0.0,
        metavar="B",
        help="added to the <|listen|> logit at each decision, as [model] listen_bias "
        "(-20 to 20; default 0): > 0 talks less, < 0 more; a model's operating point",
    )
    duplex.add_argument(
        "--no-video",
        dest="video",
        action="store_false",
        help="run every sample without the camera, even where its source sample has a video "
        "(audio only, as the figures before 2026-12-03 were measured)",
    )
    duplex.add_argument(
        "--rescore",
        action="store_true",
        help="run nothing: score the outputs already in --out again (this version's rules, "
        "the data's annotations as they are now) and rewrite its reports",
    )
    add_temperature(duplex)
    duplex.set_defaults(run=_duplex)

    asr = sub.add_parser(
        "asr",
        help="optional: transcribe outputs offline (PocketSphinx) for word error rates and "
        "words in the overlap",
        description=ASR_HELP,
        epilog=ASR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    asr.add_argument(
        "--outputs", type=Path, required=True, metavar="DIR",
        help="a folder holding output.wav files at any depth (e.g. a `venus eval duplex` run)",
    )  # fmt: skip
    asr.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the report goes")
    asr.add_argument(
        "--data", type=Path, metavar="DIR",
        help="the Full-Duplex-Bench data the outputs answer: adds words in the overlap window",
    )  # fmt: skip
    asr.set_defaults(run=_asr)

    regrid = sub.add_parser(
        "regrid",
        help="a set's cuts moved back to their samples' chunk grid: the same test drawn again",
        description=REGRID_HELP,
        epilog=REGRID_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    regrid.add_argument(
        "--data", type=Path, required=True, metavar="DIR",
        help="a `venus datagen` set with Full-Duplex-Bench cuts (its samples/ beside them)",
    )  # fmt: skip
    regrid.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new folder")
    regrid.set_defaults(run=_regrid)


def _score(args: argparse.Namespace) -> int:
    from venus.evaluation.metrics import DEFAULT_RULES
    from venus.evaluation.reference import passes, reference_scores
    from venus.evaluation.score import find_samples, score_samples
    from venus.evaluation.summary import summarize, write_report

    refs = find_samples(args.data)
    log.info("scoring %d samples of %s against %s", len(refs), args.data, args.outputs)
    scores = score_samples(refs, args.outputs, rules=DEFAULT_RULES)
    system = args.system or args.outputs.resolve().name
    # which posed overlaps the data's own assistant passes (a venus datagen set only)
    data_said = reference_scores(refs, args.out / "reference", DEFAULT_RULES)
    passable = None if data_said is None else passes(data_said)
    report = summarize(system, args.data, args.outputs, scores, DEFAULT_RULES, passable)
    json_path, md_path = write_report(report, args.out)
    for s in report.scenarios:
        print(f"{s.task}: {s.headline} {100 * s.headline_rate:.1f}% of {s.samples}")  # noqa: T201
    print(f"{len(scores)} samples scored: {json_path}, {md_path}")  # noqa: T201
    return 0


def _duplex(args: argparse.Namespace) -> int:
    from venus.evaluation.duplex_cli import main

    return main(args)


def _delegation(args: argparse.Namespace) -> int:
    from venus.errors import EvaluationError
    from venus.evaluation.delegation_run import evaluate

    tuned = args.temperature is not None
    if (args.reference or args.hypothesis) and (
        args.engines or args.policy or tuned or args.free_calls or args.idle_wait is not None
    ):
        raise EvaluationError(
            "--engines, --policy, --temperature, --free-calls and --idle-wait go with a run, "
            "not with a given hypothesis"
        )
    done = evaluate(
        args.data,
        args.out,
        args.hypothesis,
        reference=args.reference,
        engines=args.engines,
        policy=args.policy or "model",
        temperature=args.temperature,
        call_grammar=not args.free_calls,
        others=args.others,
        system=args.system,
        idle_wait_s=args.idle_wait,
    )
    f = done.figures

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.1f}%"

    print(  # noqa: T201
        f"{f.samples} samples ({f.with_calls} with reference calls): tool F1 {pct(f.f1)}, "
        f"arguments {pct(f.argument_accuracy)}, Pass@1 {pct(f.pass_at_1)}, missed "
        f"{pct(f.missed_rate)}, unnecessary {pct(f.unnecessary_rate)}"
    )
    print(f"report: {done.json_path}, {done.md_path}")  # noqa: T201
    return 0


def _asr(args: argparse.Namespace) -> int:
    import sys

    from venus.evaluation.asr import PocketSphinx
    from venus.evaluation.asr_run import run

    report, paths = run(args.outputs, args.out, args.data, PocketSphinx(), sys.stderr)
    pooled = report.pooled
    wer = "n/a" if pooled.wer is None else f"{100 * pooled.wer:.1f}%"
    heard = sum(bool(s.transcript.words) for s in report.samples)
    print(  # noqa: T201
        f"{len(report.samples)} outputs, {heard} with words heard; WER {wer} over "
        f"{pooled.reference_words} reference words: {paths[0]}, {paths[1]}"
    )
    return 0


def _regrid(args: argparse.Namespace) -> int:
    from venus.evaluation.regrid import regrid

    done = regrid(args.data, args.out)
    print(  # noqa: T201
        f"{done.moved} cuts moved back to the chunk grid (by {done.mean_shift_s:.2f} s on "
        f"average), {done.copied} copied as they were: {args.out}"
    )
    return 0
