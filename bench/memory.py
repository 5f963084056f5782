"""``venus bench memory``: an hour-long session keeps memory and per-chunk latency flat.

Draws a synthetic hour of video with OpenCV (``long_video``: 3,600 one-second chunks,
scenes of 20 s, a landmark scene at minute 5 shown again, partly occluded, at minute 55)
and runs the daemon's frontend loop over it offline, with quiet synthetic audio, twice
side by side, each in a fresh process of its own: with the long-session memory
(``[memory]``, at ``--budget-mb``) and, as the baseline, without it. Both bound the
backbone's context (attention sinks + a recent window). The model listens all along
(``model.listen_bias`` at its maximum), so the two sides do the same work but the
memory's, and every chunk does what a long session does every second: perceive,
remember, prefill (``--speak`` leaves the decisions to the model; replies are bounded on
their own, see docs/engines.md).

Per chunk it records the process's resident memory (``/proc/self/statm``) and the
chunk's total latency; after the first ten minutes (warm-up: the context fills for the
first time) it fits a line to each and
reports the slope per hour and the last ten minutes over the first ten (median), for
both sides, and plots both against time (PNG). It also says whether, and how many
seconds after the landmark came back on screen, the memory recalled its first showing.

Nothing is kept per chunk but a few numbers (no timeline, no output track), so what
grows is what the daemon itself would grow.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from importlib.resources import as_file, files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from venus.bench.long_video import SCENE_S, LongVideo, make_long_video
from venus.bench.report import command, machine
from venus.daemon.frontend.playback import TrackOut
from venus.errors import BenchError

if TYPE_CHECKING:
    from venus.daemon.config.schema import VenusConfig
    from venus.daemon.frontend.timeline import ChunkRecord
    from venus.engines.runners import Engines
    from venus.hw.audio import AudioChunk

log = logging.getLogger(__name__)

# Left out of the fits: the first ten minutes (a quarter of a short run), in which the
# context fills to max_context_tokens for the first time (the KV cache's pages are touched,
# ONNX Runtime's arenas grow) and the store fills its first tiers.
WARMUP_S = 600
MIN_SECONDS = 120
WINDOW_S = 600  # "first" and "last" ten minutes
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@dataclass
class Side:
    """One run: per chunk, resident memory (MiB) and total latency (ms), and the recalls."""

    name: str
    rss_mib: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    memory_bytes: list[int] = field(default_factory=list)
    memory_ms: list[float] = field(default_factory=list)  # the memory stage (search + store)
    landmark_recalled_after_s: int | None = None  # first recall of the first showing
    wall_s: float = 0.0

    def on_record(self, video: LongVideo) -> Callable[[ChunkRecord], None]:
        first, again = video.chunks(video.landmark_s), video.chunks(video.repeat_s)

        def record(r: ChunkRecord) -> None:
            self.rss_mib.append(rss_bytes() / 2**20)
            self.latency_ms.append(r.latency_ms["total"])
            if r.memory is not None:
                self.memory_bytes.append(r.memory.bytes)
                self.memory_ms.append(r.latency_ms.get("memory", 0.0))
            back = r.index - again[0]  # seconds since the landmark came back
            if r.index in again and self.landmark_recalled_after_s is None:
                recalled = r.memory.recalled if r.memory is not None else ()
                if any(x.first_chunk <= first[-1] and x.last_chunk >= first[0] for x in recalled):
                    self.landmark_recalled_after_s = back

        return record

    def trend(self, values: list[float]) -> dict[str, float]:
        """Slope per hour of a line fitted after the warm-up, and last / first window."""
        warmup = min(WARMUP_S, len(values) // 4)
        y = np.asarray(values[warmup:], np.float64)
        if y.size < 2:
            raise BenchError(f"{self.name}: {len(values)} chunks are too few to fit a trend")
        hours = np.arange(y.size) / 3600.0
        slope = float(np.polyfit(hours, y, 1)[0])
        w = max(1, min(WINDOW_S, y.size // 2))
        first, last = float(np.median(y[:w])), float(np.median(y[-w:]))
        return {
            "slope_per_hour": slope,
            "first": first,
            "last": last,
            "last_over_first": last / first if first else float("nan"),
        }

    def summary(self) -> dict[str, Any]:
        return {
            "chunks": len(self.latency_ms),
            "wall_s": self.wall_s,
            "rss_mib": self.trend(self.rss_mib),
            "latency_ms": self.trend(self.latency_ms),
            "memory_bytes_max": max(self.memory_bytes, default=0),
            "memory_stage_ms": _quantiles(self.memory_ms),
            "landmark_recalled_after_s": self.landmark_recalled_after_s,
        }


def _quantiles(values: list[float]) -> dict[str, float] | None:
    """p50 / p95 / max of ``values`` (None when empty)."""
    if not values:
        return None
    p50, p95, top = np.percentile(np.asarray(values), [50, 95, 100])
    return {"p50": float(p50), "p95": float(p95), "max": float(top)}


class QuietAudio:
    """``seconds`` of quiet noise with a short tone now and then, chunk by chunk (an
    ``AudioSource``): nothing is held but the chunk being read."""

    def __init__(self, seconds: int, chunk_s: float, seed: int = 0) -> None:
        self.seconds, self.chunk_s = seconds, chunk_s
        self.rng = np.random.default_rng(seed)
        self.index = 0

    def read(self, timeout_s: float | None = None) -> AudioChunk:
        from venus.hw.audio import AudioChunk

        if self.index * self.chunk_s >= self.seconds:
            raise EOFError
        n = round(self.chunk_s * 16000)
        samples: NDArray[np.float32] = (0.003 * self.rng.standard_normal(n)).astype(np.float32)
        if self.index % 7 == 0:
            t = np.arange(n // 4) / 16000
            samples[: n // 4] += (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
        chunk = AudioChunk(samples, self.index, self.index * self.chunk_s, 0, 0.0)
        self.index += 1
        return chunk


def median_side(runs: list[Side]) -> Side:
    """Several runs of one side as one: per chunk, the median of their memory and latency
    (the landmark and the store's figures from the first run; wall time the mean)."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]

    def med(values: list[list[float]]) -> list[float]:
        n = min(len(v) for v in values)
        return [float(x) for x in np.median([v[:n] for v in values], axis=0)]

    return dataclasses.replace(
        first,
        rss_mib=med([r.rss_mib for r in runs]),
        latency_ms=med([r.latency_ms for r in runs]),
        wall_s=float(np.mean([r.wall_s for r in runs])),
    )


def isolated(name: str, cfg: VenusConfig, video: LongVideo, seconds: int) -> Side:
    """``run_side`` in a fresh process (spawned), so that each side's resident memory is
    its own: not what the side before it left behind, nor this process's."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_side_in_child, name, cfg, video, seconds).result()


def _side_in_child(name: str, cfg: VenusConfig, video: LongVideo, seconds: int) -> Side:
    from venus.daemon.frontend.session import engine_options
    from venus.engines.runners import Engines
    from venus.logs import setup_logging

    setup_logging("WARNING")
    engines = Engines.open(cfg.model.engines, engine_options(cfg))
    return run_side(name, cfg, engines, video, seconds)


def run_side(name: str, cfg: VenusConfig, engines: Engines, video: LongVideo, seconds: int) -> Side:
    """The frontend loop over ``seconds`` of the video with quiet audio, offline."""
    import time

    from venus.daemon.frontend.clock import OfflineClock
    from venus.daemon.frontend.session import open_frontend
    from venus.hw.frames import VISION_SIZE
    from venus.hw.video_file import VideoFile

    side = Side(name)
    s = engines.manifest.schedule
    track = _Discard(s.sample_rate_out)
    frontend = open_frontend(
        cfg, engines, track, OfflineClock(track, s.sample_rate_out), side.on_record(video),
        keep_records=False,
    )  # fmt: skip
    log.info("%s: %d chunks over %s", name, seconds, video.path)
    started = time.perf_counter()
    with VideoFile(video.path, size=s.image_size or VISION_SIZE) as frames:
        try:
            frontend.loop.run(frontend.stream, QuietAudio(seconds, s.chunk_s), frames.frame_at)
        finally:
            frontend.close(end_session=True)
    side.wall_s = time.perf_counter() - started
    return side


class _Discard(TrackOut):
    """A ``TrackOut`` that keeps the clock and positions but not the audio."""

    def play(self, pcm: Any) -> int:
        with self._lock:
            at = max(self._now, self._end)
            self._end = at + int(np.asarray(pcm).shape[0])
            return int(self._end)

    def flush(self) -> None:
        with self._lock:
            self._end = min(self._end, self._now + self.buffer_samples)


def plot(sides: list[Side], path: Path, title: str) -> bool:
    """Resident memory and latency against time, both sides; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("no matplotlib: no plot (pip install 'realtime-venus[eval]')")
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for side in sides:
        minutes = np.arange(len(side.latency_ms)) / 60.0
        top.plot(minutes, side.rss_mib, label=side.name, lw=1)
        k = 30  # a 30-chunk running median keeps eviction spikes from hiding the trend
        lat = np.asarray(side.latency_ms)
        smooth = [float(np.median(lat[max(0, i - k) : i + 1])) for i in range(lat.size)]
        bottom.plot(minutes, smooth, label=side.name, lw=1)
    top.set_ylabel("resident memory (MiB)")
    bottom.set_ylabel("chunk latency (ms, median of 30)")
    bottom.set_xlabel("session time (minutes)")
    top.legend()
    top.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(report: dict[str, Any]) -> str:
    lines = [
        f"{report['model']} engines, {report['machine']}",
        f"`{report['command']}`",
        f"{report['seconds']} chunks of video; memory budget {report['budget_mb']:g} MiB; "
        f"decisions: {report['decisions']}; per-chunk median of {report['repeat']} run(s) "
        "a side",
        "",
        "| side | chunks | wall s | RSS MiB/h | RSS last/first | latency ms/h "
        "| latency last/first | memory stage p50 / p95 ms | landmark recalled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["sides"].items():
        r, lat = s["rss_mib"], s["latency_ms"]
        q = s["memory_stage_ms"]
        stage = "-" if q is None else f"{q['p50']:.2f} / {q['p95']:.2f}"
        after = s["landmark_recalled_after_s"]
        recalled = "no" if after is None else f"after {after} s"
        lines.append(
            f"| {name} | {s['chunks']} | {s['wall_s']:.0f} | {r['slope_per_hour']:+.2f} "
            f"| {r['last_over_first']:.3f} | {lat['slope_per_hour']:+.3f} "
            f"| {lat['last_over_first']:.3f} | {stage} | {recalled} |"
        )
    if "memory_over_baseline" in report:
        ratio = report["memory_over_baseline"]
        lines += [
            "",
            f"memory / baseline: median latency x{ratio['latency']:.2f}, "
            f"resident memory x{ratio['rss']:.3f} (last ten minutes)",
        ]
    return "\n".join(lines) + "\n"


LISTEN_BIAS = 20.0  # the largest model.listen_bias: the model listens all hour


def memory_config(cfg: VenusConfig, budget_mb: float, enabled: bool, speak: bool) -> VenusConfig:
    """``cfg`` with the memory on or off at ``budget_mb``; listening throughout unless
    ``speak``."""
    try:
        memory = dataclasses.replace(cfg.memory, enabled=enabled, budget_mb=budget_mb)
    except ValueError as e:
        raise BenchError(f"--budget-mb: {e}") from e
    model = cfg.model if speak else dataclasses.replace(cfg.model, listen_bias=LISTEN_BIAS)
    return dataclasses.replace(cfg, memory=memory, model=model)


def run(args: argparse.Namespace) -> int:
    from venus.bench.chunk import bench_config
    from venus.daemon.frontend.session import engine_options
    from venus.engines.runners import Engines

    seconds = round(args.minutes * 60)
    if args.repeat < 1:
        raise BenchError(f"--repeat {args.repeat}: give 1 or more")
    if seconds < MIN_SECONDS:
        raise BenchError(f"--minutes {args.minutes}: give at least {MIN_SECONDS / 60:g}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="venus-bench-")))
        root = args.engines or Path(
            stack.enter_context(as_file(files("venus.demo") / "engines" / "tiny"))
        )
        if not (root / "manifest.json").is_file():
            raise BenchError(f"no engines in {root} (no manifest.json); name them with --engines")
        landmark, repeat = round(seconds / 12), seconds - round(seconds / 12) - SCENE_S
        log.info("drawing %d s of video (landmark at %d s and %d s)", seconds, landmark, repeat)
        video = make_long_video(tmp / "hour.avi", seconds, landmark, repeat)
        cfg = bench_config(root, 0.0, args.seed, args.threads, tmp / "cache")
        engines = Engines.open(root, engine_options(cfg))
        chunk_s = engines.manifest.schedule.chunk_s
        cfg = dataclasses.replace(cfg, schedule=dataclasses.replace(cfg.schedule, chunk_s=chunk_s))
        runs = [("memory", True)] + ([] if args.no_baseline else [("baseline", False)])
        done: dict[str, list[Side]] = {name: [] for name, _ in runs}
        for _ in range(args.repeat):  # interleaved: a slow spell of the machine hits both
            for name, on in runs:
                side_cfg = memory_config(cfg, args.budget_mb, on, args.speak)
                done[name].append(isolated(name, side_cfg, video, seconds))
        sides = [median_side(done[name]) for name, _ in runs]
    report: dict[str, Any] = {
        "model": engines.manifest.model,
        "machine": machine(),
        "command": command(),
        "seconds": seconds,
        "budget_mb": args.budget_mb,
        "repeat": args.repeat,
        "decisions": "model" if args.speak else f"listening (model.listen_bias {LISTEN_BIAS:g})",
        "landmark_s": landmark,
        "repeat_s": repeat,
        "sides": {s.name: s.summary() for s in sides},
    }
    if len(sides) == 2:
        m, b = report["sides"]["memory"], report["sides"]["baseline"]
        report["memory_over_baseline"] = {
            "latency": m["latency_ms"]["last"] / b["latency_ms"]["last"],
            "rss": m["rss_mib"]["last"] / b["rss_mib"]["last"],
        }
    (out / "memory.json").write_text(json.dumps(report, indent=2) + "\n")
    series = {s.name: asdict(s) for s in sides}
    (out / "series.json").write_text(json.dumps(series) + "\n")
    if plot(sides, out / "memory.png", report["command"]):
        report["plot"] = str(out / "memory.png")
    sys.stdout.write(render(report))
    return 0


def register(kinds: argparse._SubParsersAction[Any]) -> None:
    p = kinds.add_parser(
        "memory",
        help="an hour of synthetic video through the loop: memory and latency must stay flat",
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
        "--minutes", type=float, default=60.0, help="session length in minutes (default 60)"
    )
    p.add_argument(
        "--budget-mb",
        type=float,
        default=0.05,
        help="the memory store's budget in MiB (default 0.05: small enough that the tiny "
        "model's hour must be pooled and merged to fit)",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the run without memory")
    p.add_argument(
        "--speak",
        action="store_true",
        help="let the model decide when to speak (default: it listens all along, so both "
        "sides do the same work but the memory's; an untrained model's replies would "
        "differ between them)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each side N times, interleaved, and take the per-chunk median (default 1)",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling and flow-noise seed")
    p.add_argument(
        "--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its choice)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench-memory"),
        metavar="DIR",
        help="where memory.json, series.json and memory.png go (default ./bench-memory)",
    )
    p.set_defaults(run=run)
