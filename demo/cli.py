"""``venus demo``: the bundled scenario through the whole loop, harness included.

The scenario (``scenario/``, from ``scripts/make-demo-scenario``) goes through the tiny
engines shipped in ``engines/tiny`` offline, as ``venus run --offline`` runs a file, with
the harness of ``venus eval delegation``: the built-in capabilities, and stand-ins that
answer the scenario's delegations as its data says (``answers``). It prints a line per
chunk, the summary and what the assistant did about each of the user's turns.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from venus.errors import ConfigError

__all__ = ["demo_meta", "register"]

DEMO_HELP = """\
Run the whole loop on the bundled scenario: about a minute of a user asking an assistant
to do things (a shopping list, a sum, a question), talking over it with a backchannel
and an interruption that changes the request, with the camera's video. The user's side
comes from a held-out datagen set (docs/demo.md). It runs on the tiny engines shipped
with venus, with the harness and capabilities behind them (the built-ins, and stand-ins
answering as the scenario's data says): CPU only, no microphone, no broker, no
configuration file. Prints a line per chunk, a summary and what the assistant did about
each turn, and writes the offline outputs of `venus run --offline` to --out DIR, with
items.jsonl (the delegations) and the journal (each run starts a fresh one)."""

SESSION = "demo"


def register(commands: argparse._SubParsersAction[Any]) -> None:
    from venus.evaluation.sampling import temperature_arg

    demo = commands.add_parser(
        "demo",
        help="run the bundled scenario on the shipped tiny engines (CPU, no devices)",
        description=DEMO_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--out", type=Path, default=Path("venus-demo"), metavar="DIR", help="(default: venus-demo)"
    )
    demo.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    demo.add_argument(
        "--temperature",
        type=temperature_arg,
        default=0.0,
        metavar="T",
        help="sampling temperature for text and speech (default 0: greedy, what a model this "
        "small decodes best with; the daemon's own default is 0.7)",
    )
    demo.add_argument("--quiet", action="store_true", help="no line per chunk")
    demo.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> int:
    import dataclasses
    from importlib.resources import as_file, files

    from venus.daemon.frontend.offline import run_offline
    from venus.daemon.frontend.outputs import read_wav_mono
    from venus.daemon.frontend.session import engine_options
    from venus.daemon.frontend.summary import render
    from venus.daemon.run_cli import progress_printer, with_engine_schedule
    from venus.demo.report import behaviour, render_behaviour
    from venus.engines.runners import Engines
    from venus.evaluation.delegation_env import Answer, bench_harness
    from venus.evaluation.delegation_run import run_config
    from venus.evaluation.delegation_tracks import journal_items, write_items

    if not args.log_level:  # the demo's own lines say what happens; keep start-up quiet
        for name in ("venus.engines", "venus.daemon.harness", "venus.capabilities"):
            logging.getLogger(name).setLevel(logging.WARNING)
    data = files("venus.demo")
    scenario = json.loads((data / "scenario" / "scenario.json").read_text())
    answers = [Answer(**a) for a in scenario.get("answers", [])]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "journal.sqlite3"
    for stale in (journal, *(journal.with_name(journal.name + s) for s in ("-wal", "-shm"))):
        stale.unlink(missing_ok=True)  # each run starts with an empty journal
    shutil.rmtree(journal.with_suffix(".evidence"), ignore_errors=True)  # and its evidence
    with (
        as_file(data / "engines" / "tiny") as engines_dir,
        as_file(data / "scenario" / "scenario.wav") as wav,
        as_file(data / "scenario" / "scenario.avi") as video,
    ):
        if not (Path(engines_dir) / "manifest.json").is_file():
            raise ConfigError(
                f"the demo engines are missing from {engines_dir}; run scripts/make-tiny-engines"
            )
        cfg = run_config(Path(engines_dir), args.seed, args.temperature)
        engines = Engines.open(Path(engines_dir), engine_options(cfg))
        chunk_s = engines.manifest.schedule.chunk_s
        cfg = with_engine_schedule(cfg, chunk_s)
        meta = demo_meta(engines.manifest.trained)
        sys.stdout.write(f"venus demo: {meta['weights_said']}\n")
        chunks = round(float(scenario["duration_s"]) / chunk_s + 0.4999)
        progress = progress_printer(chunk_s, chunks, args.quiet)
        with bench_harness(journal, answers, cfg.model.seed, chunk_s) as (harness, advance):

            def on_record(record: Any) -> None:
                progress(record)
                advance(record)

            done = run_offline(
                cfg,
                engines,
                Path(wav),
                out,
                Path(video),
                on_record,
                harness=harness,
                session_id=SESSION,
                extra_summary={**meta, "seed": args.seed, "temperature": args.temperature},
            )
    items = journal_items(journal, SESSION)
    write_items(out / "items.jsonl", items)
    said, rate = read_wav_mono(out / "output.wav")
    names = {str(i["item_id"]): str(i["capability"]) for i in items}
    moments = behaviour(scenario, done.records, said, rate, names)
    summary = json.loads((out / "summary.json").read_text())
    summary["behaviour"] = [dataclasses.asdict(m) for m in moments]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    sys.stdout.write("\n" + render(done.summary) + "\n" + render_behaviour(moments, scenario))
    sys.stdout.write(
        f"\noutputs in {done.out_dir}/: timeline.jsonl, output.wav, conversation.wav, "
        "summary.json, items.jsonl, journal.sqlite3\n"
    )
    return 0


def demo_meta(trained: dict[str, object] | None) -> dict[str, object]:
    """What the demo's summary says of its weights: the manifest's record of how they were
    trained (``venus export`` copies it from ``venus train``'s), or that they were not."""
    if trained is None:
        said = ("the tiny engines have UNTRAINED (seeded random) weights: the loop, timing "
                "and outputs are real, the assistant's words and voice are noise.")  # fmt: skip
    else:
        figures = trained.get("validation") or {}
        first = figures.get("opening_accuracy") if isinstance(figures, dict) else None
        recipe = trained.get("recipe")
        settings = recipe.get("train") if isinstance(recipe, dict) else None
        keep = settings.get("keep", "last") if isinstance(settings, dict) else "last"
        beside = trained.get("beside")
        if beside is not None:  # OUT/last: chosen over the kept step (closed-loop-validation)
            why = f" (the run's last; train.keep = {keep} held step {beside})"
        else:
            why = f" (its best validation, train.keep = {keep})" if keep != "last" else ""
        said = (f"the engines' weights were trained by {trained.get('by', 'venus train')}: "
                f"{trained.get('preset') or 'the'} preset, step {trained.get('step')}"
                + (f" of {trained['steps']}" if trained.get("steps") else "") + why
                + (f", a reply's first chunk {100 * float(first):.0f}% right in validation"
                   if isinstance(first, int | float) else "") + ".")  # fmt: skip
    return {"engines": "tiny (shipped with venus)", "trained": trained is not None,
            "weights": trained, "weights_said": said}  # fmt: skip
