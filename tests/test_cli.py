"""The ``venus`` command as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENUS = Path(sys.executable).with_name("venus")


def venus(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_help_lists_the_commands() -> None:
    out = venus("--help")
    assert out.returncode == 0
    assert "config" in out.stdout
    assert "exit status" in out.stdout


def test_version() -> None:
    out = venus("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("venus ")


def test_check_example_config() -> None:
    out = venus("config", "check", str(REPO / "systemd" / "venus.toml"))
    assert out.returncode == 0, out.stderr
    assert "[schedule]\nchunk_s = 1.0" in out.stdout
    assert "OK" in out.stderr


def test_check_typo_exits_1_naming_key_and_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text("[audio]\nsample_rte = 16000\n")
    out = venus("config", "check", str(path))
    assert out.returncode == 1
    assert "audio.sample_rte" in out.stderr
    assert "did you mean sample_rate?" in out.stderr
    assert out.stdout == ""


def test_check_range_names_key_and_range(tmp_path: Path) -> None:
    path = tmp_path / "range.toml"
    path.write_text("[schedule]\nchunk_s = -1\n")
    out = venus("config", "check", str(path))
    assert out.returncode == 1
    assert "schedule.chunk_s" in out.stderr
    assert "0.25 <= chunk_s <= 2.0" in out.stderr


def test_check_json_output(tmp_path: Path) -> None:
    path = tmp_path / "v.toml"
    path.write_text('[harness]\nbroker_url = "mqtt://u:pw@localhost"\n')
    out = venus("config", "check", "--json", str(path))
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["harness"]["broker_url"] == "mqtt://u:********@localhost"


def test_config_path_from_option_and_environment(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("")
    assert venus("--config", str(good), "config", "check").returncode == 0
    assert venus("config", "check", env={"VENUS_CONFIG": str(good)}).returncode == 0
    missing = venus("--config", str(tmp_path / "nope.toml"), "config", "check")
    assert missing.returncode == 1
    assert "nope.toml: no such file" in missing.stderr


def test_log_level_from_config_and_command_line(tmp_path: Path) -> None:
    path = tmp_path / "debug.toml"
    path.write_text('[logging]\nlevel = "DEBUG"\nformat = "text"\n')
    assert "DEBUG" in venus("config", "check", str(path)).stderr
    quiet = venus("--log-level", "warning", "config", "check", str(path))
    assert "DEBUG" not in quiet.stderr


def test_usage_error_exits_2() -> None:
    out = venus("config", "frobnicate")
    assert out.returncode == 2
    assert "invalid choice" in out.stderr
