"""``venus bench train-pass``: a training step's decoder passes, as training runs them beside
the exported forward.

Training computes the backbone's and the speech decoder's teacher-forced states with
``DecoderStack.hidden_states`` (plain causal attention over right-padded rows) and applies
the LM head only where there are targets. The baseline is the exported signature
(``forward``: an additive padding mask, logits at every position) with the targets picked
from its logits afterwards, which is what training did before. Both run forward and
backward of the same cross-entropy on the same random model, inputs and targets, one
after the other in each run, so the machine's load falls on both alike; the table gives
the milliseconds at the median and baseline / training. The two losses must agree (the
table shows their difference in the last run): a faster pass that computed something
else would be no gain. The rows are a `tiny-wide` training crop's: ``--batch`` backbone
rows of up to 1,104 tokens and half as many again speech rows of up to 379.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from venus.bench.report import report
from venus.errors import BenchError

TARGET_SHARE = 0.4  # of a row's tokens that carry a target (text, decisions, speech units)


@dataclass(frozen=True)
class PassRow:
    decoder: str
    shape: str
    baseline_ms: float
    training_ms: float
    loss_gap: float

    @property
    def ratio(self) -> float:
        """Baseline / training at the median: how many times faster training's pass is."""
        return self.baseline_ms / self.training_ms


def _inputs(stack: Any, rows: int, length: int, seed: int) -> tuple[Any, ...]:
    """Right-padded rows (lengths from ``length`` down to half), their 0/1 mask, positions,
    token ids and targets at ``TARGET_SHARE`` of the kept tokens (``-100`` elsewhere)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(length, max(1, length // 2), rows).round().long()
    keep = torch.arange(length)[None] < lengths[:, None]
    ids = torch.randint(0, stack.shape.vocab, (rows, length), generator=g)
    labels = torch.randint(0, stack.shape.vocab, (rows, length), generator=g)
    chosen = keep & (torch.rand(rows, length, generator=g) < TARGET_SHARE)
    labels = torch.where(chosen, labels, torch.full_like(labels, -100))
    positions = torch.arange(length)[None].expand(rows, length)
    return ids, keep.long(), positions, labels


def _passes(stack: Any, rows: int, length: int, seed: int) -> dict[str, Callable[[], float]]:
    """The two passes over the same inputs, each -> its loss after ``backward``."""
    import torch.nn.functional as F  # noqa: N812

    ids, mask, positions, labels = _inputs(stack, rows, length, seed)
    target = labels != -100

    def baseline() -> float:
        empty = stack.new_cache(rows)
        logits = stack(stack.embed(ids), mask, positions, empty.keys, empty.values)[0]
        loss = F.cross_entropy(logits[target], labels[target])
        loss.backward()  # type: ignore[no-untyped-call]
        return float(loss.detach())

    def training() -> float:
        hidden = stack.hidden_states(stack.embed(ids))
        loss = F.cross_entropy(stack.lm_head(hidden[target]), labels[target])
        loss.backward()  # type: ignore[no-untyped-call]
        return float(loss.detach())

    return {"baseline": baseline, "training": training}


def measure(preset: str, batch: int, runs: int, warmup: int, seed: int = 0) -> list[PassRow]:
    """Time both passes of the backbone and the speech decoder of a random ``preset``
    model at ``batch`` crops (module doc)."""
    import torch

    from venus.export.model.config import PRESETS
    from venus.export.model.init import init_model
    from venus.export.model.venus import VenusModel

    if preset not in PRESETS:
        raise BenchError(f"--preset {preset!r}: not one of {', '.join(sorted(PRESETS))}")
    model = VenusModel(PRESETS[preset]())
    init_model(model, seed)
    shapes = {
        "backbone": (model.backbone, batch, 1104),
        "speech decoder": (model.speech_decoder, max(1, batch * 3 // 2), 379),
    }
    out = []
    for name, (stack, rows, length) in shapes.items():
        passes = _passes(stack, rows, length, seed)
        times: dict[str, list[float]] = {"baseline": [], "training": []}
        losses: dict[str, float] = {}
        with torch.enable_grad():  # whatever the caller set
            for i in range(warmup + runs):
                for which, step in passes.items():
                    stack.zero_grad(set_to_none=True)
                    t0 = time.perf_counter()
                    losses[which] = step()
                    if i >= warmup:
                        times[which].append((time.perf_counter() - t0) * 1e3)
        out.append(
            PassRow(
                decoder=name,
                shape=f"{rows} x {length}",
                baseline_ms=statistics.median(times["baseline"]),
                training_ms=statistics.median(times["training"]),
                loss_gap=abs(losses["baseline"] - losses["training"]),
            )
        )
    return out


def render(rows: list[PassRow], info: dict[str, Any]) -> str:
    lines = [
        f"{info['preset']} (random weights), batch {info['batch']}, forward + backward, "
        f"{info['machine']}, {info['threads']} torch threads; p50 of {info['runs']} runs",
        "",
        "| decoder | rows x tokens | exported forward p50 ms | training pass p50 ms "
        "| forward / training | loss gap |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.decoder} | {r.shape} | {r.baseline_ms:.1f} | {r.training_ms:.1f} "
            f"| {r.ratio:.2f}x | {r.loss_gap:.1e} |"
        )
    base, ours = sum(r.baseline_ms for r in rows), sum(r.training_ms for r in rows)
    lines.append(f"| both | | {base:.1f} | {ours:.1f} | {base / ours:.2f}x | |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError:
        raise BenchError(
            "train-pass times training's torch passes: pip install -c constraints.txt "
            "'realtime-venus[export]'"
        ) from None
    if args.batch < 1 or args.runs < 1 or args.warmup < 0:
        raise BenchError("--batch and --runs must be at least 1, --warmup at least 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = measure(args.preset, args.batch, args.runs, args.warmup)
    info = {
        "preset": args.preset,
        "batch": args.batch,
        "runs": args.runs,
        "threads": torch.get_num_threads(),
    }
    return report(rows, info, render, args.json, lambda r: {**asdict(r), "ratio": r.ratio})


def register(kinds: argparse._SubParsersAction[Any]) -> None:
    p = kinds.add_parser(
        "train-pass",
        help="a training step's decoder passes beside the exported forward (needs torch)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="tiny-wide", help="model preset (default tiny-wide)")
    p.add_argument("--batch", type=int, default=8, help="crops a step (default 8)")
    p.add_argument("--runs", type=int, default=10, help="timed runs of each pass (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 leaves torch's")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.set_defaults(run=run)
