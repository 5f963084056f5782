"""``venus eval duplex`` from parsed arguments (registered in :mod:`venus.evaluation.cli`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from importlib.resources import as_file, files
from pathlib import Path

from venus.daemon.frontend.policy import POLICY_NAMES
from venus.errors import EvaluationError
from venus.evaluation.duplex import (
    DuplexRun,
    DuplexSetup,
    limit_samples,
    rescore_duplex,
    run_duplex,
)
from venus.evaluation.duplex_report import REPORT_JSON, RunInfo, write_duplex_report
from venus.evaluation.metrics import DEFAULT_RULES
from venus.evaluation.progress import PolicyProgress
from venus.evaluation.sampling import run_temperature
from venus.evaluation.score import find_samples
from venus.evaluation.source import source_video

__all__ = ["SHIPPED_ENGINES", "main"]

SHIPPED_ENGINES = "tiny (shipped with venus)"
QUIET = ("venus.daemon", "venus.engines")  # a line per run, per malformed delegation
RUN_FIELDS = {f.name for f in dataclasses.fields(RunInfo)}


def main(args: argparse.Namespace) -> int:
    if args.rescore:
        return _rescore(args)
    if args.jobs < 0:
        raise EvaluationError(f"--jobs must be 0 (one per CPU) or more, not {args.jobs}")
    if not args.log_level:
        for name in QUIET:
            logging.getLogger(name).setLevel(logging.ERROR)
    policies = tuple(dict.fromkeys(args.policy or POLICY_NAMES))  # in order, once each
    jobs = args.jobs or os.cpu_count() or 1
    refs = limit_samples(find_samples(args.data), args.limit)
    total = len(refs)
    with_video = sum(source_video(r) is not None for r in refs) if args.video else 0
    with ExitStack() as stack:
        engines = args.engines
        if engines is None:
            tiny = files("venus.demo") / "engines" / "tiny"
            engines = Path(stack.enter_context(as_file(tiny)))
        setup = DuplexSetup(
            engines,
            seed=args.seed,
            temperature=args.temperature,
            listen_bias=args.listen_bias,
            video=args.video,
        )
        progress = PolicyProgress(sys.stderr, policies, total)
        started = time.perf_counter()
        runs = run_duplex(
            args.data, args.out, setup, policies, limit=args.limit, jobs=jobs, progress=progress
        )
        progress.finish()
        wall_s = time.perf_counter() - started
        temperature = run_temperature(engines, args.temperature)
    info = RunInfo(
        data=str(args.data),
        out=str(args.out),
        engines=str(args.engines) if args.engines else SHIPPED_ENGINES,
        seed=args.seed,
        temperature=temperature,
        limit=args.limit,
        jobs=jobs,
        wall_s=round(wall_s, 1),
        command=_command(args),
        camera=_camera(args.video, with_video, total),
        listen_bias=args.listen_bias,
    )
    json_path, md_path = write_duplex_report(runs, info, setup.rules)
    _print_labels(runs)
    print(  # noqa: T201
        f"{total} samples x {len(policies)} policies in {wall_s:.0f} s: {json_path}, {md_path}"
    )
    return 0


def _rescore(args: argparse.Namespace) -> int:
    """``--rescore``: the outputs of the run in ``--out`` scored again, its reports rewritten."""
    combined = args.out / REPORT_JSON
    try:
        recorded = json.loads(combined.read_text(encoding="utf-8"))
        run = {k: v for k, v in recorded["run"].items() if k in RUN_FIELDS}
        info = RunInfo(**{**run, "data": str(args.data), "out": str(args.out)})
        ran = tuple(p["policy"] for p in recorded["policies"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EvaluationError(
            f"--rescore: {combined} is not the report of a `venus eval duplex` run ({e}); "
            "give the --out of an earlier run"
        ) from e
    policies = tuple(dict.fromkeys(args.policy or ran))
    missing = [p for p in policies if p not in ran]
    if missing:
        raise EvaluationError(f"--rescore: {args.out} has no run of --policy {missing[0]}")
    runs = rescore_duplex(args.data, args.out, policies, limit=info.limit)
    json_path, md_path = write_duplex_report(runs, info, DEFAULT_RULES)
    _print_labels(runs)
    print(f"{len(runs[0].scores)} samples x {len(policies)} policies scored again: "  # noqa: T201
          f"{json_path}, {md_path}")  # fmt: skip
    return 0


def _print_labels(runs: Sequence[DuplexRun]) -> None:
    for run in runs:
        rates = {}
        for task in sorted({s.task for s in run.scores}):
            overlaps = [s.overlap for s in run.scores if s.task == task and s.overlap]
            if overlaps:
                labels = [o.label.value for o in overlaps]
                rates[task] = ", ".join(f"{b} {labels.count(b)}" for b in sorted(set(labels)))
        line = "; ".join(f"{task}: {text}" for task, text in rates.items())
        print(f"{run.policy}: {line}")  # noqa: T201


def _camera(video: bool, with_video: int, total: int) -> str:
    if not video:
        return "none (--no-video)"
    return (
        f"the video of the sample each was cut from, read from the cut's start: {with_video} "
        f"of {total} samples (the rest have none: the audio group, or no source sample)"
    )


def _command(args: argparse.Namespace) -> str:
    """The command line that makes this run again."""
    words = ["venus", "eval", "duplex", "--data", str(args.data), "--out", str(args.out)]
    if args.engines:
        words += ["--engines", str(args.engines)]
    for policy in args.policy or ():
        words += ["--policy", policy]
    if args.limit is not None:
        words += ["--limit", str(args.limit)]
    if args.seed:
        words += ["--seed", str(args.seed)]
    if not args.video:
        words.append("--no-video")
    if args.temperature is not None:
        words += ["--temperature", f"{args.temperature:g}"]
    if args.listen_bias:
        words += ["--listen-bias", f"{args.listen_bias:g}"]
    words += ["--jobs", str(args.jobs)]
    return shlex.join(words)
