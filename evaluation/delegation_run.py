"""``venus eval delegation``'s running half: the samples of a ``venus datagen`` set through
the daemon's offline path with the real harness, and the hypotheses read back.

Per sample (``OUT/samples/<id>/``): a fresh journal (``journal.sqlite3``), the harness
with the built-ins (``clock``, ``calculator``, ``timer``) and the benchmark's stand-ins
(:mod:`venus.evaluation.delegation_env`), and :func:`run_offline` over ``input.wav`` (and
``video.avi`` in the video group), as ``venus run --offline --journal`` runs it, session
id the sample's. It writes ``timeline.jsonl``, ``output.wav``, ``conversation.wav``,
``summary.json`` and ``items.jsonl`` (the journal's items, oldest first).

A hypothesis dir (``--hypothesis``, or what a run wrote) holds ``<id>/timeline.jsonl``
and, optionally, ``<id>/items.jsonl`` (:mod:`venus.evaluation.delegation_tracks`) per
sample; ``samples/<id>/`` is looked in too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus.daemon.frontend.timeline import TimelineError, TimelineWriter, read_timeline
from venus.datagen.domains_contracts import contracts
from venus.errors import EvaluationError
from venus.evaluation.delegation import SampleScore, SetScore, score_sample, score_set
from venus.evaluation.delegation_tracks import (
    hypothesis_track,
    journal_items,
    read_items,
    reference_items,
    reference_timeline,
    reference_track,
    write_items,
)

if TYPE_CHECKING:
    from venus.daemon.config.schema import VenusConfig
    from venus.daemon.frontend.policy import DecisionPolicy
    from venus.engines.runners import Engines

__all__ = [
    "OTHERS",
    "Evaluated",
    "SetSample",
    "choose",
    "default_engines",
    "evaluate",
    "find_set",
    "run_config",
    "run_samples",
    "schemas",
    "score_dir",
    "write_reference",
]

log = logging.getLogger(__name__)

DELEGATION = "delegation"
TIMELINE, ITEMS = "timeline.jsonl", "items.jsonl"
OTHERS = 0.2  # the share of the other categories run for unnecessary delegations


@dataclass(frozen=True)
class SetSample:
    sample_id: str
    index: int
    category: str
    folder: Path  # samples/<id>/
    trajectory: Mapping[str, Any]


def default_engines() -> Path:
    """The tiny engines shipped with venus (what ``venus demo`` runs)."""
    return Path(str(files("venus.demo").joinpath("engines").joinpath("tiny")))


def schemas() -> dict[str, Mapping[str, Any]]:
    """Every capability's input schema (built-ins and the mock domains)."""
    return {name: c.input_schema for name, c in contracts().items()}


def find_set(data: Path) -> list[SetSample]:
    """Every sample of a ``venus datagen`` set, by index."""
    index = data / "index.jsonl"
    if not index.is_file():
        raise EvaluationError(
            f"{data}: no index.jsonl; give a directory written by `venus datagen`"
        )
    out = []
    for line in index.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        path = data / rec["path"]
        try:
            traj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise EvaluationError(f"{path}: cannot read the trajectory ({e})") from e
        out.append(SetSample(rec["sample_id"], rec["index"], rec["category"], path.parent, traj))
    return sorted(out, key=lambda s: s.index)


def choose(samples: Sequence[SetSample], others: float) -> list[SetSample]:
    """Every ``delegation`` sample, and ``others`` (0-1) of the rest, evenly spread by
    index (at least one when ``others`` > 0 and there are any)."""
    if not 0.0 <= others <= 1.0:
        raise EvaluationError(f"--others {others}: a share from 0 to 1")
    rest = [s for s in samples if s.category != DELEGATION]
    k = min(len(rest), math.ceil(others * len(rest)))
    picked = {rest[math.floor(i * len(rest) / k)].sample_id for i in range(k)}
    return [s for s in samples if s.category == DELEGATION or s.sample_id in picked]


def write_reference(samples: Sequence[SetSample], out: Path) -> Path:
    """The trajectories' targets as hypothesis dirs (``--reference``): ``out/<id>/``."""
    for s in samples:
        folder = out / s.sample_id
        folder.mkdir(parents=True, exist_ok=True)
        with TimelineWriter(folder / TIMELINE) as w:
            for record in reference_timeline(s.trajectory):
                w.write(record)
        write_items(folder / ITEMS, reference_items(s.trajectory))
    return out


def score_dir(
    samples: Sequence[SetSample], hypothesis: Path
) -> tuple[list[SampleScore], list[str]]:
    """Each sample with a timeline under ``hypothesis`` scored; the ids without one."""
    known = schemas()
    scores, missing = [], []
    for s in samples:
        folder = next(
            (
                f
                for f in (hypothesis / s.sample_id, hypothesis / "samples" / s.sample_id)
                if (f / TIMELINE).is_file()
            ),
            None,
        )
        if folder is None:
            missing.append(s.sample_id)
            continue
        try:
            records = read_timeline(folder / TIMELINE)
        except TimelineError as e:
            raise EvaluationError(str(e)) from e
        chunk_s = float(s.trajectory["chunk_s"])
        for r in records:
            if not math.isclose(r.start_s, r.index * chunk_s, abs_tol=1e-3):
                raise EvaluationError(
                    f"{folder / TIMELINE}: chunk {r.index} starts at {r.start_s} s, not on the "
                    f"data's {chunk_s} s grid; run engines with the data's chunk period"
                )
        items = read_items(folder / ITEMS)
        hyp = hypothesis_track(s.sample_id, s.category, chunk_s, records, items)
        scores.append(score_sample(reference_track(s.trajectory), hyp, known))
    return scores, missing


def run_config(
    engines_dir: Path,
    seed: int = 0,
    temperature: float | None = None,
    call_grammar: bool = True,
    idle_wait_s: float | None = None,
) -> VenusConfig:
    """The daemon's defaults with these engines, seed and temperature (None: the
    daemon's choice, the engines' recommendation else its default), ``[model]
    call_grammar`` and ``[harness] idle_wait_s`` (None: the daemon's), the engines' cache
    under ``~/.cache/venus``."""
    from venus.daemon.config.schema import VenusConfig

    cfg = VenusConfig()
    if idle_wait_s is not None:
        cfg = dataclasses.replace(
            cfg, harness=dataclasses.replace(cfg.harness, idle_wait_s=idle_wait_s)
        )
    model = dataclasses.replace(
        cfg.model, engines=engines_dir, seed=seed, call_grammar=call_grammar
    )
    if temperature is not None:
        model = dataclasses.replace(model, temperature=temperature)
    return dataclasses.replace(
        cfg,
        model=model,
        engines=dataclasses.replace(cfg.engines, cache_dir=Path.home() / ".cache" / "venus"),
    )


def run_samples(
    samples: Sequence[SetSample],
    out: Path,
    engines_dir: Path,
    policy: str,
    seed: int = 0,
    temperature: float | None = None,
    call_grammar: bool = True,
    idle_wait_s: float | None = None,
) -> Path:
    """Every sample through the daemon offline with the harness (see the module doc),
    configured by :func:`run_config`; returns the hypothesis dir, ``out/samples``."""
    from venus.daemon.frontend.policy import policy_named
    from venus.daemon.frontend.session import engine_options
    from venus.engines.runners import Engines
    from venus.errors import EngineError

    cfg = run_config(engines_dir, seed, temperature, call_grammar, idle_wait_s)
    try:
        engines = Engines.open(engines_dir, engine_options(cfg))
    except (EngineError, OSError) as e:
        raise EvaluationError(
            f"--engines {engines_dir}: cannot open the engines ({e}); give a directory written "
            "by `venus export`, or leave --engines out for the tiny engines shipped with venus"
        ) from e
    chunk_s = engines.manifest.schedule.chunk_s
    cfg = dataclasses.replace(cfg, schedule=dataclasses.replace(cfg.schedule, chunk_s=chunk_s))
    root = out / "samples"
    for n, s in enumerate(samples, start=1):
        if not math.isclose(chunk_s, float(s.trajectory["chunk_s"])):
            raise EvaluationError(
                f"the engines' chunk is {chunk_s} s, the data's {s.trajectory['chunk_s']} s: "
                "the chunks would not line up"
            )
        _run_one(s, root / s.sample_id, cfg, engines, policy_named(policy))
        log.info("delegation: %d/%d samples run (%s)", n, len(samples), s.sample_id)
    return root


def _run_one(
    s: SetSample, folder: Path, cfg: VenusConfig, engines: Engines, policy: DecisionPolicy
) -> None:
    from venus.daemon.frontend.offline import run_offline
    from venus.daemon.frontend.sampling import sampling_of
    from venus.evaluation.delegation_env import answers_of, bench_harness

    shutil.rmtree(folder, ignore_errors=True)  # a rerun starts afresh
    folder.mkdir(parents=True)
    journal = folder / "journal.sqlite3"
    files_ = s.trajectory["files"]
    video = s.folder / files_["video"] if files_.get("video") else None
    answers, chunk_s = answers_of(s.trajectory), engines.manifest.schedule.chunk_s
    with bench_harness(journal, answers, cfg.model.seed, chunk_s) as (harness, on_record):
        run_offline(
            cfg,
            engines,
            s.folder / files_["input"],
            folder,
            video,
            on_record,
            harness=harness,
            session_id=s.sample_id,
            policy=policy,
            extra_summary={
                "seed": cfg.model.seed,
                "temperature": sampling_of(cfg.model, engines.manifest).temperature,
            },
        )
    write_items(folder / ITEMS, journal_items(journal, s.sample_id))


@dataclass(frozen=True)
class Evaluated:
    figures: SetScore
    scores: tuple[SampleScore, ...]
    missing: tuple[str, ...]
    json_path: Path
    md_path: Path


def evaluate(
    data: Path,
    out: Path,
    hypothesis: Path | None = None,
    *,
    reference: bool = False,
    engines: Path | None = None,
    policy: str = "model",
    temperature: float | None = None,
    call_grammar: bool = True,
    others: float = OTHERS,
    system: str | None = None,
    idle_wait_s: float | None = None,
) -> Evaluated:
    """Choose the samples, get the hypotheses (the reference's own targets, a given dir,
    or a run of the daemon at ``temperature``, None: the daemon's, with or without the
    call grammar, results let in after ``idle_wait_s`` of the user's speech, None: the
    daemon's), score them and write the report into ``out``."""
    from venus.evaluation.delegation_report import write_report

    if reference and hypothesis is not None:
        raise EvaluationError("--reference and --hypothesis are two modes; give one")
    samples = choose(find_set(data), others)
    if reference:
        hypothesis, name = write_reference(samples, out / "reference"), "reference"
    elif hypothesis is not None:
        name = hypothesis.resolve().name
    else:
        engines = engines or default_engines()
        hypothesis = run_samples(samples, out, engines, policy, temperature=temperature,
                                 call_grammar=call_grammar, idle_wait_s=idle_wait_s)  # fmt: skip
        how = [policy]
        if temperature is not None:
            how.append(f"temperature {temperature:g}")
        if not call_grammar:
            how.append("free calls")
        if idle_wait_s is not None:
            how.append(f"idle wait {idle_wait_s:g} s")
        name = f"venus {engines.name} ({', '.join(how)})"
    scores, missing = score_dir(samples, hypothesis)
    if not scores:
        raise EvaluationError(
            f"{hypothesis}: no <sample id>/timeline.jsonl for any sample of {data}"
        )
    figures = score_set(scores)
    json_path, md_path = write_report(system or name, data, figures, scores, out, missing)
    return Evaluated(figures, tuple(scores), tuple(missing), json_path, md_path)
