"""``venus bench chunk``: per-stage latency and real-time factor of the whole frontend loop.

Runs ``venus run --offline`` (``run_offline``: the daemon's loop, chunk step, token-to-wave
thread and timeline) over an input, by default the first ``--seconds`` of the bundled demo
scenario with its video, on the engines. Given the checkpoint the engines came from
(``--checkpoint``), it runs the same loop over the same chunks a second time with the torch
reference behind the same interface (``TorchEngines``) and prints the two side by side.
Each side first runs untimed over the input's first ``WARMUP_S`` seconds, so one-off
costs (allocations, lazy initialisation) stay out of the figures of either.

Per stage of the timeline (``latency_ms``: mel ... token2wave, and the chunk's total) the
p50 / p95 are over the chunks in which the stage ran, as ``venus demo``'s summary gives
them; the real-time factor is wall time / input duration (below 1 keeps up). Decisions
are greedy by default, so fp32 engines and torch should decide alike: whether they did is
reported, never enforced (fp16 engines may well differ).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import wave
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from importlib.resources import as_file, files
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from venus.bench.report import command, machine
from venus.daemon.frontend import timeline
from venus.engines.runners import Engines
from venus.errors import BenchError

if TYPE_CHECKING:
    from venus.daemon.config.schema import VenusConfig
    from venus.daemon.frontend.offline import OfflineRun
    from venus.daemon.frontend.summary import StageLatency

log = logging.getLogger(__name__)

WARMUP_S = 2.0  # untimed run over the input's first 2 s before each side's timed run

STAGES = (*timeline.STAGES, "total")  # the latency_ms keys, in the order a chunk runs them


@dataclass(frozen=True)
class RunInfo:
    """What was measured, where and how (the table's header, the JSON's top level)."""

    model: str
    precision: str
    providers: list[str]
    machine: str
    command: str
    chunk_s: float
    input: str  # file name
    video: bool  # frames went to the vision encoder
    temperature: float
    seed: int
    threads: int  # intra-op threads asked for; 0: each runtime's default


@dataclass(frozen=True)
class Side:
    """One run of the loop: what it decided, how long each stage took, how fast it went."""

    wall_s: float
    input_s: float
    real_time_factor: float | None  # wall_s / input_s
    decisions: list[str]  # per chunk
    latency: dict[str, StageLatency]  # stages that ran, then "total"

    @classmethod
    def of(cls, run: OfflineRun) -> Side:
        s = run.summary
        decisions: list[str] = [r.decision for r in run.records]
        return cls(s.wall_s, s.input_s, s.real_time_factor, decisions, dict(s.latency))


@dataclass(frozen=True)
class Report:
    info: RunInfo
    engines: Side
    torch: Side | None

    @property
    def same_decisions(self) -> bool | None:
        return None if self.torch is None else self.engines.decisions == self.torch.decisions

    def ratio(self, stage: str) -> float | None:
        """Torch / engines at the median: how many times faster the engines are."""
        e = self.engines.latency.get(stage)
        t = self.torch.latency.get(stage) if self.torch else None
        return t.p50_ms / e.p50_ms if e and t and e.p50_ms > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.info),
            "engines": asdict(self.engines),
            "torch": asdict(self.torch) if self.torch else None,
            "ratio": {stage: self.ratio(stage) for stage in STAGES},
            "same_decisions": self.same_decisions,
        }


def render(report: Report) -> str:
    info, e, t = report.info, report.engines, report.torch
    lines = [
        f"{info.model} engines ({info.precision}) on {', '.join(info.providers)}"
        f"{' beside the torch reference' if t else ''}, {info.machine}",
        f"`{info.command}`",
        f"{len(e.decisions)} chunks of {info.chunk_s:g} s ({e.input_s:.1f} s of "
        f"{info.input}{', with video' if info.video else ''}); temperature "
        f"{info.temperature:g}; intra-op threads {info.threads or 'default'}; "
        "p50 / p95 over the chunks in which a stage ran",
        "",
        "| stage | chunks | engines p50 ms | engines p95 ms | torch p50 ms | torch p95 ms "
        "| torch / engines |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stage in STAGES:
        ours = e.latency.get(stage)
        ref = t.latency.get(stage) if t else None
        runs = f"{ours.runs if ours else 0}"
        if t is not None and (ref.runs if ref else 0) != (ours.runs if ours else 0):
            runs += f" / {ref.runs if ref else 0}"
        ratio = report.ratio(stage)
        lines.append(
            f"| {stage} | {runs} | {_ms(ours)} | {_ms(ref)} | "
            f"{f'{ratio:.2f}x' if ratio is not None else '-'} |"
        )
    lines += ["", f"real-time factor (wall / input): engines {_rtf(e)}"]
    if t is not None:
        lines[-1] += f", torch {_rtf(t)}"
        if report.same_decisions:
            lines.append(f"decisions: the same in both runs ({_counts(e.decisions)})")
        else:
            at = [i for i, (a, b) in enumerate(zip_longest(e.decisions, t.decisions)) if a != b]
            lines.append(
                f"decisions: DIFFER at chunks {at[:10]} (engines {_counts(e.decisions)}; "
                f"torch {_counts(t.decisions)}); expected with fp16 engines or sampling"
            )
    return "\n".join(lines) + "\n"


def _ms(s: StageLatency | None) -> str:
    return f"{s.p50_ms:.2f} | {s.p95_ms:.2f}" if s else "- | -"


def _rtf(side: Side) -> str:
    return f"{side.real_time_factor:.3f}" if side.real_time_factor is not None else "-"


def _counts(decisions: list[str]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(decisions).items()))


def trim(wav: Path, seconds: float, out: Path) -> Path:
    """The first ``seconds`` of ``wav`` as ``out`` (``wav`` itself when it is no longer)."""
    try:
        with wave.open(str(wav), "rb") as r:
            keep = round(seconds * r.getframerate())
            if keep >= r.getnframes():
                return wav
            params, data = r.getparams(), r.readframes(keep)
    except (OSError, EOFError, wave.Error) as e:
        raise BenchError(f"{wav}: not a readable PCM WAV file ({e})") from e
    with wave.open(str(out), "wb") as w:
        w.setparams(params)
        w.writeframes(data)
    return out


def bench_config(
    engines_dir: Path, temperature: float, seed: int, threads: int, cache: Path
) -> VenusConfig:
    """The defaults, with the engines, greedy (or ``temperature``) choice, ONNX Runtime's
    intra-op ``threads`` (0: its choice) and a temporary cache."""
    from venus.daemon.config.schema import VenusConfig

    cfg = VenusConfig()
    try:
        model = dataclasses.replace(
            cfg.model, engines=engines_dir, temperature=temperature, seed=seed
        )
        engines = dataclasses.replace(cfg.engines, intra_op_threads=threads, cache_dir=cache)
    except ValueError as e:  # pydantic's ValidationError: out of the field's range
        raise BenchError(f"--temperature / --seed / --threads: {e}") from e
    return dataclasses.replace(cfg, model=model, engines=engines)


def run(args: argparse.Namespace) -> int:
    from venus.bench.torch_engines import TorchEngines
    from venus.daemon.frontend.offline import run_offline
    from venus.daemon.frontend.session import engine_options

    if args.seconds <= 0:
        raise BenchError(f"--seconds {args.seconds}: give a positive duration")
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="venus-bench-")))
        demo = files("venus.demo")
        root = args.engines or Path(stack.enter_context(as_file(demo / "engines" / "tiny")))
        if not (root / "manifest.json").is_file() and args.engines is None:
            raise BenchError(
                f"the demo engines are missing from {root}; run scripts/make-tiny-engines "
                "or name engines with --engines DIR"
            )
        wav, video = args.input, args.video
        if wav is None:
            wav = Path(stack.enter_context(as_file(demo / "scenario" / "scenario.wav")))
            video = video or Path(stack.enter_context(as_file(demo / "scenario" / "scenario.avi")))
        clip = trim(wav, args.seconds, tmp / "input.wav")
        cfg = bench_config(root, args.temperature, args.seed, args.threads, tmp / "cache")
        engines = Engines.open(root, engine_options(cfg))
        chunk_s = engines.manifest.schedule.chunk_s
        cfg = dataclasses.replace(cfg, schedule=dataclasses.replace(cfg.schedule, chunk_s=chunk_s))
        reference = TorchEngines.open(args.checkpoint, engines) if args.checkpoint else None
        if reference is not None and args.threads:
            import torch

            torch.set_num_threads(args.threads)

        warmup = trim(wav, min(WARMUP_S, args.seconds), tmp / "warmup.wav")

        def measure(side: str, runtime: Engines) -> Side:
            log.info("running the loop on the %s over %s", side, wav)
            run_offline(cfg, runtime, warmup, tmp / side / "warmup", video)
            return Side.of(run_offline(cfg, runtime, clip, tmp / side, video))

        ours = measure("engines", engines)
        ref = measure("torch", cast(Engines, reference)) if reference else None
    info = RunInfo(
        model=engines.manifest.model,
        precision=engines.manifest.precision,
        providers=list(engines.sessions["backbone"].providers),
        machine=machine(),
        command=command(),
        chunk_s=chunk_s,
        input=wav.name,
        video=video is not None and engines.vision is not None,
        temperature=args.temperature,
        seed=args.seed,
        threads=args.threads,
    )
    report = Report(info, ours, ref)
    sys.stdout.write(render(report))
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0


def register(kinds: argparse._SubParsersAction[Any]) -> None:
    p = kinds.add_parser(
        "chunk",
        help="per-stage latency and real-time factor of the frontend loop; "
        "with --checkpoint, beside the torch reference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--engines",
        type=Path,
        metavar="DIR",
        help="engine directory (default: the tiny engines shipped with venus)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        metavar="CKPT",
        help="the checkpoint the engines came from: run the loop on torch too",
    )
    p.add_argument(
        "--input",
        type=Path,
        metavar="WAV",
        help="input audio (default: the bundled demo scenario, with its video)",
    )
    p.add_argument("--video", type=Path, metavar="FILE", help="the camera's video for --input")
    p.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        metavar="S",
        help="use the first S seconds of the input (default 20)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="text and speech sampling temperature (default 0: greedy, so both runs "
        "should decide alike)",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling and flow-noise seed (default 0)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="intra-op threads of ONNX Runtime and torch; 0 lets each pick, as the daemon "
        "does (default)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.set_defaults(run=run)
