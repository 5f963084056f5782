"""``venus datagen``: write a data set (trajectories, audio, video, statistics, plots and
the Full-Duplex-Bench layout) from a config or a preset.

Registration imports nothing heavy; the pipeline is imported when the command runs.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from venus.datagen.config import GenerationConfig

log = logging.getLogger(__name__)

PRESETS = ("smoke", "eval")
LINE_EVERY_S = 5.0  # progress lines when stderr is not a terminal

HELP = """\
Write a data set of duplex and delegation trajectories: each sample is planned (turns,
overlap events by function, delegations), synthesized (espeak-ng / flite / SVOX Pico voices, noise,
rooms, background speech; drawn video frames for the video group), aligned on one
timeline and projected onto the 1 s chunk grid, and written to DIR/samples/<id>/
(trajectory.json, input.wav, clean_input.wav, assistant.wav, video.avi).

Then, over the set: DIR/index.jsonl (one record per sample, by index), DIR/config.toml
(the resolved config), DIR/run.json (the seed), DIR/schema/trajectory.schema.json,
DIR/report.json and report.md (statistics), DIR/plots/<id>.png (timelines of a few
samples) and, when the config asks, DIR/full_duplex_bench/ (the Full-Duplex-Bench v1.5
layout). See docs/data.md.

The same config and seed give byte-identical files, whatever --jobs. An interrupted run
resumes: run the same command again; finished samples are kept, unfinished ones redone.
A DIR made with another config or seed is refused."""

EPILOG = """\
examples:
  venus datagen --preset smoke --seed 1            # a few samples, seconds
  venus datagen --preset eval --seed 1 --jobs 4 --out eval-set
  venus datagen --config my.toml --seed 7 --samples 20 --out try
  venus datagen --config train/recipes/train-set.toml --set events.reply_outlasts_s=2.0 \\
      --seed 7 --out try                           # one key changed, the rest as the file"""


def register(commands: argparse._SubParsersAction[Any]) -> None:
    cmd = commands.add_parser(
        "datagen",
        help="write a training / evaluation data set (trajectories, audio, statistics)",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = cmd.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config",
        dest="datagen_config",
        type=Path,
        metavar="FILE",
        help="generation config (TOML; missing keys take the eval preset's values)",
    )
    source.add_argument(
        "--preset",
        choices=PRESETS,
        help="smoke: 6 short samples of every category, seconds; eval: 300 samples, the "
        "paper's mix",
    )
    cmd.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output directory (default: datagen-<preset or config name>-seed<N>)",
    )
    cmd.add_argument("--seed", type=int, default=0, help="the set's seed (default 0)")
    cmd.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="J",
        help="samples generated in J worker processes (0: one per CPU; default 1); the "
        "output does not depend on it",
    )
    cmd.add_argument(
        "--samples",
        type=int,
        metavar="K",
        help="override the config's number of samples",
    )
    cmd.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one key of the config or preset: a dotted key and a TOML value "
        "(events.reply_outlasts_s=2.0, speech.formant=[0.9,1.1]; a bare word is a "
        "string); repeatable; the set's config.toml records the result",
    )
    cmd.set_defaults(run=_datagen)


def _datagen(args: argparse.Namespace) -> int:
    from venus.datagen import runner
    from venus.datagen.config import load_config, preset
    from venus.errors import ConfigError

    if args.seed < 0:
        raise ConfigError(f"--seed {args.seed}: seeds are >= 0")
    if args.preset:
        config = preset(args.preset)
        name = args.preset
    else:
        config = load_config(args.datagen_config)
        name = args.datagen_config.stem
    if args.settings:
        config = with_settings(config, args.settings)
    if args.samples is not None:
        config = with_samples(config, args.samples)
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    out = args.out or Path(f"datagen-{name}-seed{args.seed}")
    log.info("writing %d samples (seed %d) to %s with %d job(s)", config.samples, args.seed,
             out, jobs)  # fmt: skip
    result = runner.run(config, out, args.seed, jobs=jobs, progress=ProgressLine(sys.stderr))
    print(  # noqa: T201 - the command's result
        f"{result.samples} samples in {out} ({result.generated} generated, {result.resumed} "
        f"resumed) in {_clock(result.wall_s)}"
    )
    return 0


def with_samples(config: GenerationConfig, samples: int) -> GenerationConfig:
    """``config`` with ``samples`` samples (validated like the file's key)."""
    from venus.datagen.config import parse_config

    return parse_config({**_dump(config), "samples": samples}, source="--samples")


def with_settings(config: GenerationConfig, settings: Sequence[str]) -> GenerationConfig:
    """``config`` with each ``KEY=VALUE`` of ``settings`` set (``--set``), validated like
    the file's keys: a GenerationConfigError names a malformed item, a key that is not
    there (with the nearest that is) and a value out of range."""
    from venus.datagen.config import GenerationConfigError, parse_config

    data = _dump(config)
    for item in settings:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise GenerationConfigError(
                "--set", [(item, "expected KEY=VALUE, e.g. events.reply_outlasts_s=2.0")]
            )
        *sections, name = key.split(".")
        node = data
        for depth, section in enumerate(sections):
            child = node.get(section)
            if not isinstance(child, dict):
                where = ".".join(sections[: depth + 1])
                sections_here = [k for k, v in node.items() if isinstance(v, dict)]
                close = difflib.get_close_matches(section, sections_here, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise GenerationConfigError("--set", [(where, f"not a section{hint}")])
            node = child
        node[name] = _toml_value(text)
    return parse_config(data, source="--set " + " ".join(settings))


def _toml_value(text: str) -> Any:
    """``text`` read as a TOML value; a bare word (``flite:kal16``) as a string."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10 (JetPack 6)
        import tomli as tomllib

    text = text.strip()
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def _dump(config: GenerationConfig) -> dict[str, Any]:
    from pydantic import TypeAdapter

    from venus.datagen.config import GenerationConfig

    data: dict[str, Any] = TypeAdapter(GenerationConfig).dump_python(config, mode="json")
    return data


class ProgressLine:
    """``done/total``, the rate and the ETA on ``stream``: redrawn in place (``\\r``) on a
    terminal, a line every ``LINE_EVERY_S`` otherwise (and at the end)."""

    def __init__(
        self, stream: TextIO, clock: Callable[[], float] = time.monotonic, tty: bool | None = None
    ) -> None:
        self.stream, self.clock = stream, clock
        self.tty = stream.isatty() if tty is None else tty
        self.total = self.done = self.resumed = 0
        self.started = self.shown = 0.0
        self.last = ""

    def start(self, total: int, done: int) -> None:
        self.total, self.done, self.resumed = total, done, done
        self.started = self.shown = self.clock()
        self._show(force=True)

    def advance(self) -> None:
        self.done += 1
        self._show()

    def finish(self) -> None:
        self._show(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def line(self) -> str:
        elapsed = self.clock() - self.started
        made = self.done - self.resumed
        pct = 100 * self.done / self.total if self.total else 100.0
        text = f"datagen: {self.done}/{self.total} samples ({pct:.0f}%)"
        if made and elapsed > 0:
            rate = made / elapsed
            eta = (self.total - self.done) / rate
            text += f", {rate:.2f} samples/s, ETA {_clock(eta)}"
        return text

    def _show(self, force: bool = False) -> None:
        now, text = self.clock(), self.line()
        if self.tty:
            self.stream.write("\r" + text.ljust(72))
        elif (force and text != self.last) or now - self.shown >= LINE_EVERY_S:
            self.stream.write(text + "\n")
        else:
            return
        self.shown, self.last = now, text
        self.stream.flush()


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"
