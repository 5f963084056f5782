"""``venus bench``: one subcommand per benchmark, registered by the module that owns it."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: argparse._SubParsersAction[Any]) -> None:
    bench = commands.add_parser(
        "bench",
        help="measure speed and memory (ratios against a baseline run side by side)",
        description="Benchmarks. Each prints a markdown table and can write JSON; figures are "
        "ratios against a baseline measured in the same run, never absolute claims.",
    )
    kinds = bench.add_subparsers(dest="kind", metavar="BENCHMARK", required=True)
    from venus.bench.chunk import register as register_chunk
    from venus.bench.engines import register as register_engines
    from venus.bench.estimate import register as register_estimate
    from venus.bench.harness import register as register_harness
    from venus.bench.memory import register as register_memory
    from venus.bench.train_pass import register as register_train_pass

    register_estimate(kinds)
    register_engines(kinds)
    register_chunk(kinds)
    register_harness(kinds)
    register_memory(kinds)
    register_train_pass(kinds)
