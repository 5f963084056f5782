"""``--temperature`` (and ``--listen-bias``, ``--idle-wait``) of ``venus eval duplex`` and
``venus eval delegation``: the daemon's default, its bounds, and an error naming the
option."""

from __future__ import annotations

import pytest

from venus.cli import build_parser
from venus.daemon.config.schema import VenusConfig
from venus.evaluation.sampling import temperature_bounds

COMMANDS = (
    ["eval", "duplex", "--data", "d", "--out", "o"],
    ["eval", "delegation", "--data", "d", "--out", "o"],
)


@pytest.mark.parametrize("command", COMMANDS, ids=["duplex", "delegation"])
def test_temperature_defaults_to_the_daemons_and_parses(command: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(command).temperature == VenusConfig().model.temperature
    assert parser.parse_args([*command, "--temperature", "0"]).temperature == 0.0
    assert parser.parse_args([*command, "--temperature", "1.25"]).temperature == 1.25
    assert parser.parse_args([*command, "--temperature", "2"]).temperature == 2.0


@pytest.mark.parametrize("command", COMMANDS, ids=["duplex", "delegation"])
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("2.5", "out of range; give 0 to 2"),
        ("-0.1", "out of range; give 0 to 2"),
        ("nan", "out of range"),
        ("warm", "'warm' is not a number"),
    ],
)
def test_a_temperature_outside_the_daemons_range_is_a_usage_error_naming_it(
    command: list[str], value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--temperature", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --temperature:" in err and why in err


def test_the_bounds_are_the_configuration_schemas() -> None:
    assert temperature_bounds() == (0.0, 2.0)  # daemon/config/schema.py, ModelConfig


def test_the_listen_bias_of_a_duplex_run_is_the_daemons_setting_within_its_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pathlib import Path

    from venus.evaluation.duplex import DuplexSetup
    from venus.evaluation.sampling import model_bounds

    parser = build_parser()
    duplex = COMMANDS[0]
    assert parser.parse_args(duplex).listen_bias == VenusConfig().model.listen_bias == 0.0
    assert parser.parse_args([*duplex, "--listen-bias", "-1.5"]).listen_bias == -1.5
    assert model_bounds("listen_bias") == (-20.0, 20.0)
    with pytest.raises(SystemExit):
        parser.parse_args([*duplex, "--listen-bias", "21"])
    assert "give -20 to 20" in capsys.readouterr().err
    cfg = DuplexSetup(Path("engines"), listen_bias=-1.5).config()
    assert cfg.model.listen_bias == -1.5 and cfg.model.engines == Path("engines")


def test_the_idle_wait_of_a_delegation_run_is_the_daemons_setting_within_its_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pathlib import Path

    from venus.evaluation.delegation_run import run_config

    parser = build_parser()
    delegation = COMMANDS[1]
    assert parser.parse_args(delegation).idle_wait is None  # the daemon's
    assert parser.parse_args([*delegation, "--idle-wait", "600"]).idle_wait == 600.0
    with pytest.raises(SystemExit):
        parser.parse_args([*delegation, "--idle-wait", "-1"])
    assert "give 0 to 600, the range of the daemon's [harness] idle_wait_s" in (
        capsys.readouterr().err
    )
    assert run_config(Path("e")).harness == VenusConfig().harness
    assert run_config(Path("e"), idle_wait_s=2.5).harness.idle_wait_s == 2.5
