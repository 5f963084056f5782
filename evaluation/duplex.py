"""``venus eval duplex``: the daemon's offline path over a Full-Duplex-Bench data dir, once
per decision policy, scored with the timeline as the decider and the audio as confirmation.

For each policy (``model``, ``vad``, ``always-continue``: ``daemon/frontend/policy.py``) and
each sample (:func:`venus.evaluation.score.find_samples`), :func:`run_offline` (what
``venus run --offline`` runs: same engines, loop and seed, no harness) reads the sample's
``input.wav`` and writes ``OUT/<policy>/<task>/<id>/``: ``output.wav`` (the assistant alone,
exactly as long as the input), ``timeline.jsonl``, ``conversation.wav`` and
``summary.json``. The sample is then scored on its ``output.wav``
(:func:`venus.evaluation.score.score_sample`) and each overlap relabelled with the hints
its timeline gives (:mod:`venus.evaluation.hints`). A sample depends only on the engines,
the seed, the temperature, the policy and its input: ``--jobs`` changes the wall time, not
the timelines or the labels (workers share the CPUs out among their ONNX sessions, and
another thread count may move output samples by one least significant bit).

**The camera.** A sample cut from a ``venus datagen`` sample of the video group
(``metadata.json`` ``source``) runs with that sample's ``video.avi`` as the camera, read
from the cut's start (``source.offset_s``), as the daemon would have seen it
(:func:`venus.evaluation.source.source_video`); the benchmark's own samples and
audio-group ones run without a camera, and so does everything with
``DuplexSetup(video=False)`` (``--no-video``, the figures before 2026-12-03).
``summary.json`` names the video and offset used.

**Scored again.** :func:`rescore_duplex` (``--rescore``) scores the outputs a run left
under ``OUT`` again, with this version's rules and the data's annotations as they are
now, without running the daemon: each sample's ``output.wav`` and ``timeline.jsonl``
(the chunk length read off the timeline's own starts). A missing or unreadable one is an
error naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.channel import HarnessChannel
from venus.daemon.frontend.offline import run_offline
from venus.daemon.frontend.outputs import OUTPUT_WAV, TIMELINE_JSONL
from venus.daemon.frontend.policy import policy_named
from venus.daemon.frontend.sampling import sampling_of
from venus.daemon.frontend.session import engine_options
from venus.daemon.frontend.timeline import ChunkRecord, PolicyName, TimelineError, read_timeline
from venus.engines.runners import Engines
from venus.errors import EngineError, EvaluationError
from venus.evaluation.hints import reply_playbacks, timeline_hints
from venus.evaluation.metrics import DEFAULT_RULES, Rules, label_overlap
from venus.evaluation.score import INPUT_WAV, SampleRef, SampleScore, find_samples, score_sample
from venus.evaluation.source import source_video

__all__ = [
    "DuplexRun",
    "DuplexSetup",
    "HarnessFor",
    "Runner",
    "limit_samples",
    "rescore_duplex",
    "run_duplex",
    "score_run",
]

log = logging.getLogger(__name__)

HarnessFor = Callable[[SampleRef], HarnessChannel | None]  # tests: results to inject
Progress = Callable[[PolicyName], None]  # called once per sample done
# Loggers whose levels workers copy from the parent (the command quiets the per-run ones).
QUIETED = ("venus", "venus.daemon", "venus.engines", "venus.evaluation")


@dataclass(frozen=True)
class DuplexSetup:
    """How every sample is run: the engines, the seed and temperature, the scoring rules."""

    engines: Path  # an engine dir (holds manifest.json)
    seed: int = 0
    temperature: float | None = None  # 0: greedy; None: the daemon's choice
    listen_bias: float = 0.0  # [model] listen_bias: > 0 talks less, < 0 more
    rules: Rules = DEFAULT_RULES
    intra_op_threads: int = 0  # per ONNX session; 0: ONNX Runtime picks
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "venus")
    video: bool = True  # the source sample's video as the camera, where there is one

    def config(self) -> VenusConfig:
        """The defaults with these engines, seed, temperature, listen bias, threads and
        cache (as ``venus demo``)."""
        cfg = VenusConfig()
        model = dataclasses.replace(
            cfg.model,
            engines=self.engines,
            seed=self.seed,
            temperature=self.temperature,
            listen_bias=self.listen_bias,
        )
        engines = dataclasses.replace(
            cfg.engines, intra_op_threads=self.intra_op_threads, cache_dir=self.cache_dir
        )
        return dataclasses.replace(cfg, model=model, engines=engines)


@dataclass(frozen=True)
class DuplexRun:
    """One policy's scores, in sample order."""

    policy: PolicyName
    scores: tuple[SampleScore, ...]


class Runner:
    """The engines, opened once, and the configuration that runs them."""

    def __init__(self, setup: DuplexSetup) -> None:
        self.setup = setup
        cfg = setup.config()
        try:
            self.engines = Engines.open(setup.engines, engine_options(cfg))
        except (EngineError, OSError) as e:
            raise EvaluationError(
                f"--engines {setup.engines}: cannot open the engines ({e}); give a directory "
                "written by `venus export` (it holds manifest.json), or leave --engines out "
                "for the tiny engines shipped with venus"
            ) from e
        self.chunk_s = self.engines.manifest.schedule.chunk_s
        schedule = dataclasses.replace(cfg.schedule, chunk_s=self.chunk_s)
        self.cfg = dataclasses.replace(cfg, schedule=schedule)

    def run(
        self,
        policy: PolicyName,
        ref: SampleRef,
        out: Path,
        harness: HarnessChannel | None = None,
    ) -> SampleScore:
        """``ref`` through the daemon under ``policy`` into ``out/<policy>/<task>/<id>/``,
        scored."""
        folder = out / policy / ref.task / ref.sample_id
        video = source_video(ref) if self.setup.video else None
        done = run_offline(
            self.cfg,
            self.engines,
            ref.folder / INPUT_WAV,
            folder,
            video.path if video else None,
            harness=harness,
            extra_summary={
                "sample": ref.name,
                "engines": str(self.setup.engines),
                "seed": self.cfg.model.seed,
                "temperature": sampling_of(self.cfg.model, self.engines.manifest).temperature,
                "listen_bias": self.cfg.model.listen_bias,
                "video": str(video.path) if video else None,
                "video_offset_s": video.offset_s if video else None,
            },
            policy=policy_named(policy),
            video_offset_s=video.offset_s if video else 0.0,
        )
        return score_run(ref, folder / OUTPUT_WAV, done.records, self.chunk_s, self.setup.rules)


def score_run(
    ref: SampleRef,
    output_wav: Path,
    records: Sequence[ChunkRecord],
    chunk_s: float,
    rules: Rules = DEFAULT_RULES,
) -> SampleScore:
    """``ref`` scored on ``output_wav``, each overlap decided by the timeline's hints and
    confirmed on the audio (v1 pause and turn-taking measures: the audio alone)."""
    score = score_sample(ref, output_wav, rules=rules)
    if score.overlap is None:
        return score
    hints = timeline_hints(
        reply_playbacks(records, chunk_s), score.window, score.duration_s, rules=rules
    )
    overlap = label_overlap(score.model, score.window, score.duration_s, rules=rules, hints=hints)
    return dataclasses.replace(score, overlap=overlap)


def limit_samples(refs: Sequence[SampleRef], limit: int | None) -> list[SampleRef]:
    """The first ``limit`` samples of each task (all with None)."""
    if limit is None:
        return list(refs)
    if limit < 1:
        raise EvaluationError(f"--limit must be at least 1, not {limit}")
    kept: dict[str, int] = {}
    out = []
    for ref in refs:
        if kept.get(ref.task, 0) < limit:
            kept[ref.task] = kept.get(ref.task, 0) + 1
            out.append(ref)
    return out


def run_duplex(
    data: Path,
    out: Path,
    setup: DuplexSetup,
    policies: Sequence[PolicyName],
    *,
    limit: int | None = None,
    jobs: int = 1,
    progress: Progress = lambda _p: None,
    harness_for: HarnessFor | None = None,
) -> tuple[DuplexRun, ...]:
    """Every sample of ``data`` (the first ``limit`` of each task) under every policy, in
    ``jobs`` worker processes (1: this one; a ``harness_for`` runs here). One
    :class:`DuplexRun` per policy, in the order given."""
    if not policies:
        raise EvaluationError(
            "no decision policy to run; give --policy model, vad or always-continue"
        )
    refs = limit_samples(find_samples(data), limit)
    runner = Runner(setup)  # opened here first: a bad --engines fails before any work
    jobs_list = [(policy, ref) for policy in policies for ref in refs]
    scores: dict[tuple[PolicyName, SampleRef], SampleScore] = {}
    if jobs <= 1 or harness_for is not None or len(jobs_list) <= 1:
        for policy, ref in jobs_list:
            harness = harness_for(ref) if harness_for is not None else None
            scores[policy, ref] = runner.run(policy, ref, out, harness)
            progress(policy)
    else:
        for (policy, ref), score in _in_workers(setup, jobs_list, out, jobs):
            scores[policy, ref] = score
            progress(policy)
    return tuple(
        DuplexRun(policy, tuple(scores[policy, ref] for ref in refs)) for policy in policies
    )


def rescore_duplex(
    data: Path,
    out: Path,
    policies: Sequence[PolicyName],
    *,
    limit: int | None = None,
    rules: Rules = DEFAULT_RULES,
) -> tuple[DuplexRun, ...]:
    """The outputs under ``out/<policy>/`` of an earlier run on ``data`` scored again (module
    doc), one :class:`DuplexRun` per policy in the order given."""
    refs = limit_samples(find_samples(data), limit)
    runs = []
    for policy in policies:
        scores = []
        for ref in refs:
            folder = out / policy / ref.task / ref.sample_id
            output, timeline = folder / OUTPUT_WAV, folder / TIMELINE_JSONL
            if not output.is_file() or not timeline.is_file():
                raise EvaluationError(
                    f"{folder}: no {OUTPUT_WAV} and {TIMELINE_JSONL} to score again; --rescore "
                    "needs the outputs of a run of the same --data, --policy and --limit"
                )
            try:
                records = read_timeline(timeline)
            except TimelineError as e:
                raise EvaluationError(f"{timeline}: {e}") from e
            scores.append(score_run(ref, output, records, _chunk_s(records), rules))
        runs.append(DuplexRun(policy, tuple(scores)))
    return tuple(runs)


def _chunk_s(records: Sequence[ChunkRecord]) -> float:
    """The chunk length of a timeline: the step between its first two chunks (1 s when
    there is one)."""
    if len(records) < 2:
        return 1.0
    return round(records[1].start_s - records[0].start_s, 6)


def worker_threads(jobs: int) -> int:
    """ONNX threads per session for ``jobs`` workers: the CPUs shared out, at least 1."""
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def _in_workers(
    setup: DuplexSetup, todo: list[tuple[PolicyName, SampleRef]], out: Path, jobs: int
) -> Iterator[tuple[tuple[PolicyName, SampleRef], SampleScore]]:
    """``((policy, ref), score)`` in completion order, ``jobs`` processes at a time."""
    if setup.intra_op_threads == 0:
        setup = dataclasses.replace(setup, intra_op_threads=worker_threads(jobs))
    levels = {name: logging.getLogger(name).getEffectiveLevel() for name in QUIETED}
    context = multiprocessing.get_context("spawn")  # no state inherited from this process
    with ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_init, initargs=(setup, levels)
    ) as pool:
        pending: dict[Future[SampleScore], tuple[PolicyName, SampleRef]] = {}
        queue = iter(todo)
        try:
            for item in queue:  # a bounded window, so a failure stops the run early
                pending[pool.submit(_worker_run, *item, out)] = item
                if len(pending) >= 2 * jobs:
                    break
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    item = pending.pop(future)
                    yield item, future.result()
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[pool.submit(_worker_run, *nxt, out)] = nxt
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


_WORKER: list[Runner] = []  # the worker process's runner (set by _worker_init)


def _worker_init(setup: DuplexSetup, levels: dict[str, int]) -> None:
    """Workers leave Ctrl-C to the parent, log at its levels, open the engines once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    _WORKER.append(Runner(setup))


def _worker_run(policy: PolicyName, ref: SampleRef, out: Path) -> SampleScore:
    started = time.perf_counter()
    score = _WORKER[0].run(policy, ref, out)
    log.debug("%s %s in %.1f s", policy, ref.name, time.perf_counter() - started)
    return score
