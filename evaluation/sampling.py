"""``--temperature`` of ``venus eval duplex`` and ``venus eval delegation``: the model's
sampling temperature for text and speech tokens, by default the daemon's own choice (the
engines' recommendation, else ``DEFAULT_TEMPERATURE``) and within the bounds of ``[model]
temperature`` (``daemon/config/schema.py``), so a run can be made greedy (0) without a
configuration file; and the other daemon settings an evaluation run
may take (``--listen-bias``, ``--idle-wait``), within the ranges the configuration allows."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import annotated_types
from pydantic.fields import FieldInfo

from venus.daemon.config.schema import DEFAULT_TEMPERATURE, HarnessConfig, ModelConfig

__all__ = [
    "add_temperature",
    "idle_wait_arg",
    "listen_bias_arg",
    "model_bounds",
    "run_temperature",
    "temperature_arg",
    "temperature_bounds",
]


def run_temperature(engines_dir: Path, given: float | None) -> float:
    """The temperature a run of the daemon on ``engines_dir`` samples with: ``given``
    (``--temperature``), else the daemon's choice for those engines."""
    if given is not None:
        return given
    from venus.daemon.frontend.sampling import sampling_of
    from venus.engines.manifest import load_manifest

    return sampling_of(ModelConfig(), load_manifest(engines_dir)).temperature


def temperature_bounds() -> tuple[float, float]:
    """The inclusive range the daemon's configuration allows for ``[model] temperature``."""
    return model_bounds("temperature")


def model_bounds(name: str, section: type = ModelConfig) -> tuple[float, float]:
    """The inclusive range the daemon's configuration allows for ``[model] name`` (or a
    key of another ``section``)."""
    (info,) = [f.default for f in dataclasses.fields(section) if f.name == name]
    low, high = float("-inf"), float("inf")
    for m in info.metadata if isinstance(info, FieldInfo) else ():
        if isinstance(m, annotated_types.Ge) and isinstance(m.ge, (int, float)):
            low = float(m.ge)
        elif isinstance(m, annotated_types.Le) and isinstance(m.le, (int, float)):
            high = float(m.le)
    return low, high


def add_temperature(parser: argparse.ArgumentParser) -> None:
    """``--temperature T`` on a command that runs the daemon (``args.temperature``; None
    when not given: the daemon's choice)."""
    parser.add_argument(
        "--temperature",
        type=temperature_arg,
        default=None,
        metavar="T",
        help="text and speech sampling temperature of the model; 0 is greedy (default: the "
        "daemon's choice: the engines' recommendation, else "
        f"{DEFAULT_TEMPERATURE:g})",
    )


def temperature_arg(text: str) -> float:
    """``--temperature``'s argparse type: a number within :func:`temperature_bounds`
    (argparse names the option in its error)."""
    return _model_number(text, "temperature", " (0 is greedy)")


def listen_bias_arg(text: str) -> float:
    """``--listen-bias``'s argparse type: a number within ``[model] listen_bias``'s range."""
    return _model_number(text, "listen_bias")


def idle_wait_arg(text: str) -> float:
    """``--idle-wait``'s argparse type: seconds within ``[harness] idle_wait_s``'s range."""
    return _model_number(text, "idle_wait_s", section=HarnessConfig)


def _model_number(text: str, name: str, hint: str = "", section: type = ModelConfig) -> float:
    """``text`` as a number within the range of ``[model] name`` (or ``section``'s), else
    an argparse error."""
    low, high = model_bounds(name, section)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not low <= value <= high:  # NaN included
        raise argparse.ArgumentTypeError(
            f"{text} is out of range; give {low:g} to {high:g}{hint}, the range of the "
            f"daemon's [{'model' if section is ModelConfig else 'harness'}] {name}"
        )
    return value
