"""``venus bench engines``: per-component latency of one chunk, engines beside the torch reference.

The engines are opened through the daemon's runtime (``Engines.open``), so a corrupt
engine directory fails here exactly as it would in the daemon. Given the checkpoint the
engines came from (``--checkpoint``), the torch reference runs the same workloads in the
same process right after the engines, component by component, and the ratio torch /
engines is printed. Workloads: ``venus.bench.workloads``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from venus.bench.report import report
from venus.bench.workloads import Workload, engine_workloads, torch_workloads
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.errors import BenchError, ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p95_ms: float
    runs: int


@dataclass(frozen=True)
class Row:
    component: str
    engines: Latency
    torch: Latency | None

    @property
    def ratio(self) -> float | None:
        """Torch / engines at the median: how many times faster the engines are."""
        return self.torch.p50_ms / self.engines.p50_ms if self.torch else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_runs(work: Workload, runs: int, warmup: int) -> list[float]:
    out = []
    for i in range(warmup + runs):
        work.prepare()
        t0 = time.perf_counter()
        work.run()
        if i >= warmup:
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def latency(times: list[float]) -> Latency:
    return Latency(statistics.median(times), percentile(times, 0.95), len(times))


def measure(engines: Engines, model: Any | None, context: int, runs: int, warmup: int) -> list[Row]:
    ours = engine_workloads(engines, context)
    ref = torch_workloads(model, engines.manifest.schedule, context) if model is not None else {}
    rows = []
    for name, work in ours.items():
        log.info("timing %s (%d runs)", name, runs)
        e_times = time_runs(work, runs, warmup)
        t_times = _time_reference(ref[name], runs, warmup) if name in ref else None
        rows.append(Row(name, latency(e_times), latency(t_times) if t_times else None))
    return rows


def _time_reference(work: Workload, runs: int, warmup: int) -> list[float]:
    """``time_runs`` of a torch workload without autograd (for this call only: the
    process's grad mode is left as the caller had it)."""
    import torch

    with torch.no_grad():
        return time_runs(work, runs, warmup)


def open_reference(checkpoint: Path, engines: Engines) -> Any:
    """The torch model of ``checkpoint``, which must be the one the engines came from."""
    try:
        from venus.export.checkpoint import load_model
        from venus.export.onnx.manifest import checkpoint_sha256
    except ImportError:
        raise BenchError(
            "--checkpoint runs the torch reference: pip install -c constraints.txt "
            "'realtime-venus[export]'"
        ) from None
    if checkpoint_sha256(checkpoint) != engines.manifest.source.get("sha256"):
        raise BenchError(
            f"{checkpoint} is not the checkpoint {engines.root} was exported from "
            f"({engines.manifest.source.get('checkpoint')}); a ratio needs the same model"
        )
    return load_model(checkpoint)


def render(rows: list[Row], info: dict[str, Any]) -> str:
    lines = [
        f"{info['model']} engines ({info['precision']}) on {', '.join(info['providers'])}, "
        f"{info['machine']}; one chunk with {info['context']} tokens of context; "
        f"p50 / p95 of {info['runs']} runs",
        "",
        "| component | engines p50 ms | engines p95 ms | torch p50 ms | torch p95 ms "
        "| torch / engines |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t = (
            f"{r.torch.p50_ms:.2f} | {r.torch.p95_ms:.2f} | {r.ratio:.2f}x"
            if r.torch
            else "- | - | -"
        )
        lines.append(f"| {r.component} | {r.engines.p50_ms:.2f} | {r.engines.p95_ms:.2f} | {t} |")
    total = sum(r.engines.p50_ms for r in rows)
    ref_total = sum(r.torch.p50_ms for r in rows if r.torch)
    ratio = f"{ref_total / total:.2f}x" if ref_total else "-"
    lines.append(f"| total | {total:.2f} | | {ref_total:.2f} | | {ratio} |")
    chunk_ms = info["chunk_s"] * 1e3
    lines += ["", f"real-time factor (engines, sum of p50 / chunk): {total / chunk_ms:.3f}"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    root = args.engines or _config_engines(args)
    options = EngineOptions(intra_op_threads=args.threads)
    engines = Engines.open(root, options)
    model = open_reference(args.checkpoint, engines) if args.checkpoint else None
    rows = measure(engines, model, args.context, args.runs, args.warmup)
    info = {
        "model": engines.manifest.model,
        "precision": engines.manifest.precision,
        "providers": list(engines.sessions["backbone"].providers),
        "chunk_s": engines.manifest.schedule.chunk_s,
        "context": args.context,
        "runs": args.runs,
    }
    return report(rows, info, render, args.json, lambda r: {**asdict(r), "ratio": r.ratio})


def _config_engines(args: argparse.Namespace) -> Path:
    from venus.daemon.cli import load_for_command

    try:
        return load_for_command(args).model.engines
    except ConfigError as e:
        raise BenchError(f"{e}; or name the engines with --engines DIR") from e


def register(kinds: argparse._SubParsersAction[Any]) -> None:
    p = kinds.add_parser(
        "engines",
        help="per-component latency of one chunk; with --checkpoint, beside the torch reference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--engines",
        type=Path,
        metavar="DIR",
        help="engine directory (default: [model] engines of the configuration)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        metavar="CKPT",
        help="the checkpoint the engines came from: time torch side by side",
    )
    p.add_argument("--runs", type=int, default=20, help="timed runs per component (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument(
        "--context", type=int, default=512, help="backbone tokens before the chunk (default 512)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="ONNX Runtime intra-op threads; 0 lets it pick (default)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.set_defaults(run=run)
