"""``venus datagen``'s orchestration: a set of samples written once, in order, resumable.

    run(config, out, seed, jobs=2)

1. **The directory.** ``out/config.toml`` (the resolved config: reproduce the set with
   ``--config out/config.toml``) and ``out/run.json`` (the seed) are written first; a
   directory made with another config or seed is refused (``OutputError``), and so is a
   non-empty one that ``venus datagen`` did not make. ``out/schema/`` gets a copy of the
   trajectory schema.
2. **The samples.** ``generate_sample(config, index, seed, out)`` writes
   ``out/samples/<id>/`` atomically and returns a ``SampleRecord``; with ``jobs > 1`` in
   worker processes. Each finished record is appended to ``out/.progress.jsonl`` (the
   journal, in completion order).
3. **The set.** ``out/index.jsonl`` (the records sorted by index, written atomically), then
   the statistics (``report.json``, ``report.md``), timeline plots (``plots/``) and the
   Full-Duplex-Bench layout (``full_duplex_bench/``), each rebuilt whole and swapped in.
   The journal is removed last.

**Resume.** A sample is done when its record is in the journal or in ``index.jsonl`` and
its ``trajectory.json`` still has the record's sha256 (writes are atomic, so a directory
in place is whole; the hash also catches one edited or replaced since). Everything else
under ``samples/`` (a worker's temporary directory, a sample finished but not journalled
when the run was killed) is removed and generated again. Samples depend only on the
config, the seed and their index, so a resumed set is byte-identical to an uninterrupted
one, whatever ``jobs``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import tomli_w
from pydantic import TypeAdapter

from venus.datagen.config import GenerationConfig, load_config
from venus.errors import ConfigError, DatagenError, VenusError

log = logging.getLogger(__name__)

RUN_FORMAT = 1  # run.json's layout
JOURNAL = ".progress.jsonl"
STAGING = ".staging"  # set-level outputs are built here, then swapped in
SCHEMA = "trajectory.schema.json"
_CONFIG: TypeAdapter[GenerationConfig] = TypeAdapter(GenerationConfig)


class OutputError(DatagenError):
    """The output directory cannot be written, or resumed with this config and seed."""


class Record(Protocol):
    """What a sample function returns (``venus.datagen.sample.SampleRecord``)."""

    def to_json(self) -> str: ...


SampleFn = Callable[[GenerationConfig, int, int, Path], Record]


class Progress(Protocol):
    """Told how the set advances (``venus.datagen.cli.ProgressLine`` draws it)."""

    def start(self, total: int, done: int) -> None: ...

    def advance(self) -> None: ...

    def finish(self) -> None: ...


@dataclass(frozen=True)
class RunResult:
    """What ``run`` did: ``generated`` samples now, ``resumed`` found done, in ``wall_s``."""

    out: Path
    samples: int
    generated: int
    resumed: int
    wall_s: float


def run(
    config: GenerationConfig,
    out: Path,
    seed: int,
    *,
    jobs: int = 1,
    sample_fn: SampleFn | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Write (or finish) the set ``config`` / ``seed`` describes in ``out``.

    ``sample_fn`` defaults to ``venus.datagen.sample.generate_sample``; with ``jobs > 1``
    it must be a module-level function (it is sent to worker processes)."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: at least 1")
    started = time.monotonic()
    if sample_fn is None:
        from venus.datagen.sample import generate_sample

        sample_fn = generate_sample
    prepare(out, config, seed)
    done = resume(out, config.samples)
    todo = [i for i in range(config.samples) if i not in done]
    if done:
        log.info("%s: %d of %d samples already written; resuming", out, len(done), config.samples)
    if progress is not None:
        progress.start(config.samples, len(done))
    with (out / JOURNAL).open("a", encoding="utf-8") as journal:
        for index, line in _generate(sample_fn, config, seed, out, todo, jobs):
            journal.write(line + "\n")
            journal.flush()
            done[index] = line
            if progress is not None:
                progress.advance()
    if progress is not None:
        progress.finish()
    records = [done[i] for i in range(config.samples)]
    write_atomic(out / "index.jsonl", "".join(line + "\n" for line in records))
    finish(out, config, seed, [json.loads(line) for line in records])
    (out / JOURNAL).unlink(missing_ok=True)
    return RunResult(out, config.samples, len(todo), config.samples - len(todo),
                     time.monotonic() - started)  # fmt: skip


# --- the directory --------------------------------------------------------------------------
def config_toml(config: GenerationConfig, seed: int) -> str:
    """The resolved config as TOML, loadable with ``--config``."""
    data = _CONFIG.dump_python(config, mode="json")
    return (
        "# The resolved configuration of this set: `venus datagen --config config.toml "
        f"--seed {seed}`\n# gives it again, byte for byte (the seed is in run.json).\n"
        + tomli_w.dumps(data)
    )


def prepare(out: Path, config: GenerationConfig, seed: int) -> None:
    """Make ``out`` (or check that it holds this config and seed), with the schema copy."""
    run_json = json.dumps({"format": RUN_FORMAT, "seed": seed, "samples": config.samples})
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is a file; --out names a directory")
    if (out / "run.json").exists():
        _check_same(out, config, seed)
    elif out.exists() and any(out.iterdir()):
        raise OutputError(
            f"{out} is not empty and has no run.json, so venus datagen did not make it; "
            "choose a new or empty --out directory"
        )
    try:
        (out / "schema").mkdir(parents=True, exist_ok=True)
        write_atomic(out / "config.toml", config_toml(config, seed))
        write_atomic(out / "run.json", run_json + "\n")
        schema = (resources.files("venus.datagen") / "schemas" / SCHEMA).read_bytes()
        write_atomic(out / "schema" / SCHEMA, schema)
    except OSError as e:
        raise OutputError(f"{out}: {e.strerror}; choose a writable --out directory") from e


def _check_same(out: Path, config: GenerationConfig, seed: int) -> None:
    try:
        made = json.loads((out / "run.json").read_text(encoding="utf-8"))
        made_config = load_config(out / "config.toml")
    except (OSError, ValueError, ConfigError) as e:
        raise OutputError(
            f"{out} holds an unreadable earlier run ({e}); choose a new --out directory"
        ) from e
    if not isinstance(made, dict) or made.get("seed") != seed:
        theirs = made.get("seed") if isinstance(made, dict) else None
        raise OutputError(
            f"{out} was made with --seed {theirs}, not {seed}: resume it with --seed {theirs}, "
            "or choose a new --out directory"
        )
    if made_config != config:
        ours, theirs = _flat(config), _flat(made_config)
        keys = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        diff = ", ".join(f"{k} = {theirs.get(k)!r} there, {ours.get(k)!r} now" for k in keys[:3])
        diff += f", and {len(keys) - 3} more" if len(keys) > 3 else ""
        raise OutputError(
            f"{out} was made with another config ({diff}); resume it with --config "
            f"{out / 'config.toml'}, or choose a new --out directory"
        )


def _flat(config: GenerationConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        else:
            out[prefix.rstrip(".")] = value

    walk("", _CONFIG.dump_python(config, mode="json"))
    return out


def resume(out: Path, samples: int) -> dict[int, str]:
    """The records of the samples already done (index -> JSON line); removes anything
    else under ``out/samples`` (see the module doc)."""
    lines: dict[int, str] = {}
    for name in ("index.jsonl", JOURNAL):
        with contextlib.suppress(FileNotFoundError):
            for line in (out / name).read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the journal's last line, cut short by a kill
                if isinstance(record, dict) and isinstance(record.get("index"), int):
                    lines[record["index"]] = line
    done: dict[int, str] = {}
    keep: set[str] = set()
    for index, line in sorted(lines.items()):
        record = json.loads(line)
        path = out / str(record.get("path", ""))
        if index < samples and path.is_file() and file_sha256(path) == record.get("sha256"):
            done[index] = line
            keep.add(path.relative_to(out / "samples").parts[0])
    samples_dir = out / "samples"
    if samples_dir.is_dir():
        for entry in sorted(samples_dir.iterdir()):
            if entry.name not in keep:
                log.info("removing %s (unfinished or not recorded); it is generated again", entry)
                _remove(entry)
    return done


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the samples ----------------------------------------------------------------------------
def _generate(
    sample_fn: SampleFn,
    config: GenerationConfig,
    seed: int,
    out: Path,
    todo: list[int],
    jobs: int,
) -> Iterator[tuple[int, str]]:
    """``(index, record JSON)`` per sample of ``todo``, in completion order."""
    if jobs == 1 or len(todo) <= 1:
        for index in todo:
            yield index, _one(sample_fn, config, index, seed, out)
        return
    context = multiprocessing.get_context("spawn")  # no state inherited from this process
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init) as pool:
        pending: dict[Future[str], int] = {}
        queue = iter(todo)
        try:
            for index in queue:  # a bounded window, so a failure stops the set early
                pending[pool.submit(_one, sample_fn, config, index, seed, out)] = index
                if len(pending) >= 2 * jobs:
                    break
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=pending.__getitem__):
                    index = pending.pop(future)
                    yield index, future.result()
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[pool.submit(_one, sample_fn, config, nxt, seed, out)] = nxt
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _one(sample_fn: SampleFn, config: GenerationConfig, index: int, seed: int, out: Path) -> str:
    try:
        record = sample_fn(config, index, seed, out)
    except VenusError as e:
        raise OutputError(
            f"sample {index}: {e}\nThe samples written so far are kept: fix the cause and run "
            "the same command again to resume."
        ) from e
    return record.to_json()


def _worker_init() -> None:
    """Workers leave Ctrl-C to the parent, which stops the set (see ``_generate``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- the set-level outputs -------------------------------------------------------------------
def finish(out: Path, config: GenerationConfig, seed: int, records: list[dict[str, Any]]) -> None:
    """The statistics, plots and Full-Duplex-Bench layout, from the written samples."""
    from venus.datagen import fdb, plots, report

    trajectories = Trajectories(out)
    stats = report.build(config, seed, records, trajectories)
    write_atomic(out / "report.json", json.dumps(stats, indent=2) + "\n")
    write_atomic(out / "report.md", report.to_markdown(stats))
    chosen = plots.choose(records, config.output.timeline_plots)
    with staged(out, "plots") as staging:
        for record in chosen:
            plots.write_timeline(trajectories.load(record), staging / f"{record['sample_id']}.png")
    if config.output.full_duplex_bench:
        with staged(out, "full_duplex_bench") as staging:
            fdb.write_layout(out, records, trajectories, staging)
    else:
        _remove(out / "full_duplex_bench")


class Trajectories:
    """Reads ``trajectory.json`` of the samples of ``out`` (a record's ``path``)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def sample_dir(self, record: dict[str, Any]) -> Path:
        return (self.out / str(record["path"])).parent

    def load(self, record: dict[str, Any]) -> dict[str, Any]:
        path = self.out / str(record["path"])
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise OutputError(f"{path}: {e}; remove the sample's directory and resume") from e
        if not isinstance(data, dict):
            raise OutputError(f"{path}: not a trajectory object")
        return data


@contextlib.contextmanager
def staged(out: Path, name: str) -> Iterator[Path]:
    """A fresh directory to fill; on success it replaces ``out/name`` whole."""
    staging = out / STAGING / name
    _remove(staging)
    staging.mkdir(parents=True)
    yield staging
    _remove(out / name)
    staging.rename(out / name)
    with contextlib.suppress(OSError):
        (out / STAGING).rmdir()


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write through a temporary file and rename, so ``path`` is whole or absent."""
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(data, str):
        tmp.write_text(data, encoding="utf-8")
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
