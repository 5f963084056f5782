"""How the daemon samples text and speech: ``[model] temperature`` / ``top_p`` where set,
else the engines' recommendation (``venus export --temperature / --top-p``), else 0.7 / 0.9."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.frontend import config, write_wav

from venus.daemon.config.schema import (
    DEFAULT_FLOW_TEMPERATURE,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    ModelConfig,
)
from venus.daemon.frontend.sampling import sampling_of
from venus.daemon.frontend.session import make_samplers
from venus.engines.manifest import MANIFEST, Sampling, load_manifest
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.sampler import Greedy, TopP
from venus.errors import EngineError

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "demo" / "engines" / "tiny"
VENUS = Path(sys.executable).with_name("venus")


def advising(tmp_path: Path, sampling: dict[str, object] | None) -> Path:
    """A copy of the shipped engines whose manifest advises ``sampling`` (None: nothing)."""
    root = tmp_path / "engines"
    shutil.copytree(SHIPPED, root)
    manifest = json.loads((root / MANIFEST).read_text())
    manifest.pop("sampling", None)
    if sampling is not None:
        manifest["sampling"] = sampling
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return root


def test_the_config_wins_then_the_engines_then_the_defaults() -> None:
    shipped = load_manifest(SHIPPED)
    # venus-tiny decodes best greedy, and is heard best on the flow decoder's mean path
    assert shipped.sampling == Sampling(temperature=0.0, flow_temperature=0.0)
    bare = dataclasses.replace(shipped, sampling=None)
    top = dataclasses.replace(shipped, sampling=Sampling(top_p=0.5))

    how = sampling_of(ModelConfig(), shipped)
    assert (how.temperature, how.top_p) == (0.0, DEFAULT_TOP_P)
    assert (how.temperature_from, how.top_p_from) == ("engines", "default")
    how = sampling_of(ModelConfig(temperature=1.2), shipped)
    assert (how.temperature, how.temperature_from) == (1.2, "config")
    how = sampling_of(ModelConfig(), bare)
    assert (how.temperature, how.top_p, how.temperature_from) == (
        DEFAULT_TEMPERATURE,
        DEFAULT_TOP_P,
        "default",
    )
    how = sampling_of(ModelConfig(), top)
    assert (how.temperature, how.top_p, how.top_p_from) == (DEFAULT_TEMPERATURE, 0.5, "engines")
    assert sampling_of(ModelConfig(top_p=0.8), top).top_p == 0.8
    assert how.describe() == (
        "temperature 0.7 (default), top_p 0.5 (engines), flow_temperature 1 (default)"
    )
    how = sampling_of(
        ModelConfig(), dataclasses.replace(shipped, sampling=Sampling(flow_temperature=0.2))
    )
    assert (how.flow_temperature, how.flow_temperature_from) == (0.2, "engines")
    how = sampling_of(ModelConfig(flow_temperature=0.5), shipped)
    assert (how.flow_temperature, how.flow_temperature_from) == (0.5, "config")
    how = sampling_of(ModelConfig(), bare)
    assert (how.flow_temperature, how.flow_temperature_from) == (
        DEFAULT_FLOW_TEMPERATURE,
        "default",
    )


def test_the_samplers_follow_the_engines_unless_the_config_says(tmp_path: Path) -> None:
    engines = Engines.open(SHIPPED, EngineOptions())
    cfg = config(SHIPPED)
    samplers = make_samplers(cfg, engines)
    assert isinstance(samplers.text.choose, Greedy) and isinstance(samplers.speech.choose, Greedy)
    model = dataclasses.replace(cfg.model, temperature=0.7)
    samplers = make_samplers(dataclasses.replace(cfg, model=model), engines)
    assert isinstance(samplers.text.choose, TopP) and samplers.text.choose.temperature == 0.7
    assert samplers.speech.choose.top_p == DEFAULT_TOP_P  # type: ignore[union-attr]

    bare = Engines.open(advising(tmp_path, None), EngineOptions())
    samplers = make_samplers(config(bare.root), bare)
    assert isinstance(samplers.text.choose, TopP)
    assert samplers.text.choose.temperature == DEFAULT_TEMPERATURE


def test_venus_run_says_how_it_samples_and_where_that_came_from(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "in.wav", 2)

    def run(engines: Path, *before: str) -> str:
        done = subprocess.run(
            [str(VENUS), *before, "run", "--engines", str(engines), "--offline", str(wav),
             "--out", "o", "--quiet"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    assert "sampling: temperature 0 (engines), top_p 0.9 (default)" in run(SHIPPED)
    conf = tmp_path / "venus.toml"
    conf.write_text("[model]\ntemperature = 0.5\n")
    said = run(SHIPPED, "--config", str(conf))  # [model] engines: --engines wins
    assert "sampling: temperature 0.5 (config), top_p 0.9 (default)" in said
    advised = advising(tmp_path, {"temperature": 1.1, "top_p": 0.6})
    assert "sampling: temperature 1.1 (engines), top_p 0.6 (engines)" in run(advised)


@pytest.mark.parametrize(
    ("sampling", "named"),
    [
        ({"temperature": 3.0}, "sampling.temperature"),
        ({"top_p": 0}, "sampling.top_p"),
        ({"flow_temperature": -0.5}, "sampling.flow_temperature"),
    ],
)
def test_a_recommendation_out_of_range_is_named(
    tmp_path: Path, sampling: dict[str, object], named: str
) -> None:
    with pytest.raises(EngineError, match=rf"invalid manifest: {named}"):
        load_manifest(advising(tmp_path, sampling))


def test_the_flow_noise_follows_flow_temperature(tmp_path: Path) -> None:
    """The shipped engines decode text and speech greedily, so the seed moves only the flow
    decoder's noise: at flow_temperature 0 (here the engines' recommendation) two seeds
    speak the same samples, at 1.0 (the config's here, the default's without either) they
    do not; the log says which held and from where."""
    wav = REPO / "demo" / "scenario" / "scenario.wav"
    quiet_engines = advising(tmp_path / "quiet", {"temperature": 0.0, "flow_temperature": 0.0})
    plain = advising(tmp_path / "plain", {"temperature": 0.0})

    def spoken(engines: Path, seed: int, flow: float | None = None) -> tuple[bytes, str]:
        conf = tmp_path / f"venus-{flow}.toml"
        conf.write_text("" if flow is None else f"[model]\nflow_temperature = {flow}\n")
        out = tmp_path / f"o-{engines.parent.name}-{seed}-{flow}"
        done = subprocess.run(
            [str(VENUS), "--config", str(conf), "run", "--engines", str(engines), "--offline",
             str(wav), "--out", str(out), "--seed", str(seed), "--quiet"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return (out / "output.wav").read_bytes(), done.stderr

    quiet, said = spoken(quiet_engines, 0)
    assert "flow_temperature 0 (engines)" in said
    assert spoken(quiet_engines, 7)[0] == quiet
    noisy, said = spoken(quiet_engines, 0, 1.0)
    assert "flow_temperature 1 (config)" in said
    assert noisy != quiet
    noisy, said = spoken(plain, 0)
    assert "flow_temperature 1 (default)" in said
    assert noisy != quiet and spoken(plain, 7)[0] != noisy
