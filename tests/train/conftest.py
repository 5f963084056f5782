"""A small generated set, made once for the training tests (datagen with real TTS)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six 8-12 s samples (seed 2), no Full-Duplex-Bench cuts, no plots."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    config = parse_config({
        "samples": 6, "duration": {"min_s": 8.0, "max_s": 12.0},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    })  # fmt: skip
    out = tmp_path_factory.mktemp("train") / "set"
    run(config, out, seed=2)
    return out


@pytest.fixture(scope="session")
def duplex_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three 20-25 s proactive-duplex samples (seed 2): overlap events over replies."""
    from venus.datagen.config import parse_config
    from venus.datagen.runner import run

    mix = dict.fromkeys(("offline_understanding", "proactive_duplex", "delegation"), 0.0)
    out = tmp_path_factory.mktemp("duplex") / "set"
    run(parse_config({
        "samples": 3, "duration": {"min_s": 20.0, "max_s": 25.0},
        "mix": {"category": mix | {"proactive_duplex": 1.0}},
        "output": {"full_duplex_bench": False, "timeline_plots": 0},
    }), out, seed=2)  # fmt: skip
    return out
