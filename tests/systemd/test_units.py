"""The systemd units in ``systemd/``: systemd itself checks them, and they keep their promises.

``systemd-analyze verify`` parses a unit the way systemd does (unknown keys, bad values,
missing binaries). It also requires ExecStart's binary to exist, and ``/opt/venus/bin/venus``
does not on a test machine, so each unit is verified as a copy in a temporary directory
with that one path rewritten to this test environment's real ``venus``; nothing else
changes. A unit with a mistake must fail the check: ``test_verify_catches_a_broken_unit``
proves it does. ``systemd-analyze security --offline`` scores the sandboxing.

Every command line a unit runs is also parsed by ``venus``'s own argument parser, so a
unit cannot call an option the CLI does not have.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.services import require_binary

from venus.cli import build_parser
from venus.daemon.config import load_config

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "systemd"
INSTALLED_VENUS = "/opt/venus/bin/venus"
# (file in systemd/, verified in --user mode)
UNITS = [
    ("venus.service", False),
    ("venus-worker@.service", False),
    ("user/venus.service", True),
]
# systemd-analyze security --offline: overall exposure, 0 (locked down) .. 10 (none).
MAX_EXPOSURE = {"venus.service": 2.0, "venus-worker@.service": 1.5}

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """Sections -> key -> every value given (keys such as DeviceAllow= repeat)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{raw!r} is outside any section"
        assert not line.endswith("\\"), "line continuations are not used in these units"
        key, sep, value = line.partition("=")
        assert sep, f"{raw!r} is not KEY=VALUE"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def load(name: str) -> Unit:
    return parse_unit((SYSTEMD / name).read_text())


def one(unit: Unit, section: str, key: str) -> str:
    values = unit[section].get(key, [])
    assert len(values) == 1, f"[{section}] {key}= given {len(values)} times: {values}"
    return values[0]


def words(unit: Unit, section: str, key: str) -> list[str]:
    return [w for value in unit[section].get(key, []) for w in value.split()]


def venv_venus() -> Path:
    """The `venus` of this test environment (stands in for /opt/venus/bin/venus)."""
    venus = Path(sys.executable).parent / "venus"
    assert venus.is_file() and os.access(venus, os.X_OK), f"{venus} is not executable"
    return venus


def verify(unit_text: str, filename: str, workdir: Path, user: bool) -> list[str]:
    """systemd-analyze's complaints about a unit (every line it prints is one)."""
    analyze = require_binary("systemd-analyze", "systemd")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / filename
    path.write_text(unit_text)
    env = dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="")
    with tempfile.TemporaryDirectory(prefix="venus-rt-") as runtime:
        mode = []
        if user:
            # The user manager wants a runtime directory, even only to parse a unit. A
            # short one: the user units it loads beside ours put sockets in it, and a
            # socket's path must fit in 108 bytes (a pytest-xdist worker's tmp_path may not).
            env["XDG_RUNTIME_DIR"] = runtime
            mode = ["--user"]
        proc = subprocess.run(
            [analyze, *mode, "verify", "--man=no", str(path)],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    if proc.returncode != 0 and not problems:
        problems = [f"systemd-analyze verify exited {proc.returncode}"]
    return problems


def runnable(name: str) -> str:
    """The unit's text with ExecStart's binary pointed at this environment's venus."""
    text = (SYSTEMD / name).read_text()
    assert INSTALLED_VENUS in text
    return text.replace(INSTALLED_VENUS, str(venv_venus()))


@pytest.mark.parametrize(("name", "user"), UNITS)
def test_systemd_analyze_verify_passes(name: str, user: bool, tmp_path: Path) -> None:
    problems = verify(runnable(name), Path(name).name, tmp_path / "units", user)
    assert problems == [], f"systemd-analyze verify {name}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("breakage", "old", "new"),
    [
        ("a misspelled directive", "ProtectHome=true", "ProtectHme=true"),
        ("a bad value", "Type=notify", "Type=notfy"),
        ("a binary that does not exist", None, None),
    ],
)
def test_verify_catches_a_broken_unit(
    breakage: str, old: str | None, new: str | None, tmp_path: Path
) -> None:
    """The check above can fail: each breakage of venus.service is reported."""
    text = runnable("venus.service")
    if old is None or new is None:
        text = text.replace(str(venv_venus()), str(tmp_path / "no-such-venus"))
    else:
        assert text.count(old) == 1
        text = text.replace(old, new)
    problems = verify(text, "venus.service", tmp_path / "units", user=False)
    assert problems, f"systemd-analyze verify missed {breakage}"


@pytest.mark.parametrize("name", sorted(MAX_EXPOSURE))
def test_sandbox_exposure(name: str, tmp_path: Path) -> None:
    analyze = require_binary("systemd-analyze", "systemd")
    path = tmp_path / name
    path.write_text(runnable(name))
    threshold = round(MAX_EXPOSURE[name] * 10)  # --threshold counts tenths
    proc = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", f"--threshold={threshold}", str(path)],
        check=False,
        capture_output=True,
        text=True,
        env=dict(os.environ, SYSTEMD_LOG_COLOR="0"),
        timeout=60,
    )
    summary = [line for line in proc.stdout.splitlines() if "Overall exposure" in line]
    assert proc.returncode == 0, (
        f"{name} exposure above {MAX_EXPOSURE[name]}: {summary}\n{proc.stdout[-3000:]}{proc.stderr}"
    )


def test_daemon_unit_promises() -> None:
    unit = load("venus.service")
    svc = unit["Service"]
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "NotifyAccess") == "main"
    assert one(unit, "Service", "WatchdogSec") == "30s"
    assert one(unit, "Service", "Restart") == "on-failure"
    assert "RestartSec" in svc and "TimeoutStartSec" in svc and "TimeoutStopSec" in svc
    assert one(unit, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert one(unit, "Service", "ExecStart") == (
        "/opt/venus/bin/venus --config /etc/venus/venus.toml run"
    )
    assert one(unit, "Service", "User") == "venus" and "DynamicUser" not in svc
    assert words(unit, "Service", "SupplementaryGroups") == ["audio", "video", "render"]
    assert one(unit, "Service", "StateDirectory") == "venus"
    assert one(unit, "Service", "CacheDirectory") == "venus"
    assert one(unit, "Service", "ConfigurationDirectory") == "venus"
    # systemd applies these modes at every start: 0755 would undo install.sh's 0750.
    assert one(unit, "Service", "ConfigurationDirectoryMode") == "0750"
    assert one(unit, "Service", "StateDirectoryMode") == "0750"
    assert one(unit, "Service", "ProtectSystem") == "strict"
    assert one(unit, "Service", "ProtectHome") == "true"
    assert one(unit, "Service", "PrivateTmp") == "true"
    assert one(unit, "Service", "NoNewPrivileges") == "yes"
    assert one(unit, "Service", "SystemCallFilter") == "@system-service"
    assert "MemoryDenyWriteExecute" not in svc, "cffi audio callbacks and GPU JIT need W+X"
    assert set(words(unit, "Service", "RestrictAddressFamilies")) == {
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK",
    }
    assert "PYTHONUNBUFFERED=1" in svc["Environment"]
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


def test_daemon_reaches_audio_video_and_gpus() -> None:
    unit = load("venus.service")
    assert one(unit, "Service", "DevicePolicy") == "closed"
    allowed = {v.split()[0]: v.split()[1] for v in unit["Service"]["DeviceAllow"]}
    assert all(mode == "rw" for mode in allowed.values()), allowed
    wanted = {
        "ALSA": ["char-alsa"],
        "V4L2": ["char-video4linux"],
        "DRM render nodes": ["char-drm"],
        "NVIDIA desktop": [
            "char-nvidia*",
            "/dev/nvidiactl",
            "/dev/nvidia0",
            "/dev/nvidia-uvm",
            "/dev/nvidia-modeset",
        ],
        "Jetson": ["/dev/nvmap", "/dev/nvgpu/igpu0/ctrl", "/dev/nvhost-ctrl-gpu"],
    }
    missing = {what: [d for d in ds if d not in allowed] for what, ds in wanted.items()}
    assert not any(missing.values()), f"DeviceAllow= lacks {missing}"
    # Devices are reached, not hidden: PrivateDevices= would remove them from /dev.
    assert "PrivateDevices" not in unit["Service"]


def test_configured_paths_are_writable_under_protect_system() -> None:
    """The example config's journal, engines and cache sit in StateDirectory/CacheDirectory,
    the only writable places under ProtectSystem=strict."""
    cfg = load_config(SYSTEMD / "venus.toml")
    state, cache = Path("/var/lib/venus"), Path("/var/cache/venus")
    assert cfg.harness.journal.is_relative_to(state)
    assert cfg.model.engines.is_relative_to(state)
    assert cfg.engines.cache_dir.is_relative_to(cache)


def test_worker_template_promises() -> None:
    unit = load("venus-worker@.service")
    svc = unit["Service"]
    assert one(unit, "Service", "Type") == "exec"  # workers do not speak sd_notify
    assert one(unit, "Service", "EnvironmentFile") == "/etc/venus/workers/%i.env"
    assert one(unit, "Service", "Restart") == "on-failure"
    assert "--node-id %i" in one(unit, "Service", "ExecStart")
    assert one(unit, "Service", "DynamicUser") == "yes"
    assert one(unit, "Service", "LoadCredential") == "broker:/etc/venus/workers/%i.credentials"
    assert one(unit, "Service", "PrivateDevices") == "yes"
    assert one(unit, "Service", "ProtectSystem") == "strict"
    assert one(unit, "Service", "NoNewPrivileges") == "yes"
    assert one(unit, "Service", "MemoryDenyWriteExecute") == "yes"
    assert "DeviceAllow" not in svc and "SupplementaryGroups" not in svc
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


def test_user_unit_promises() -> None:
    unit = load("user/venus.service")
    svc = unit["Service"]
    assert "User" not in svc and "Group" not in svc
    assert one(unit, "Service", "Type") == "notify"
    assert "WatchdogSec" in svc
    assert one(unit, "Service", "Restart") == "on-failure"
    after = words(unit, "Unit", "After")
    assert "pipewire-pulse.service" in after and "pulseaudio.service" in after
    wants = words(unit, "Unit", "Wants")
    assert "pipewire-pulse.service" not in wants and "pulseaudio.service" not in wants
    assert one(unit, "Install", "WantedBy") == "default.target"


def env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def command_line(
    name: str, specifiers: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> list[str]:
    """ExecStart as the service manager runs it: specifiers (%i) and ${X} filled in, a
    bare $X word split at whitespace into zero or more arguments."""
    specifiers, env = specifiers or {}, env or {}
    argv: list[str] = []
    for word in shlex.split(one(load(name), "Service", "ExecStart")):
        if word.startswith("$") and not word.startswith("${"):
            argv.extend(env.get(word[1:], "").split())
            continue
        filled = word
        for key, value in env.items():
            filled = filled.replace("${" + key + "}", value)
        for key, value in specifiers.items():
            filled = filled.replace(key, value)
        argv.append(filled)
    return argv


def parses(argv: list[str]) -> None:
    assert argv[0] == INSTALLED_VENUS
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit as e:
        pytest.fail(f"venus rejects the unit's command line {argv} (exit {e.code})")


def test_daemon_command_lines_parse() -> None:
    parses(command_line("venus.service"))
    home = {"%E": "/home/u/.config", "%S": "/home/u/.local/state"}
    user = command_line("user/venus.service", home)
    parses(user)
    assert user[1:3] == ["--config", "/home/u/.config/venus/venus.toml"]
    assert user[-2:] == ["--journal", "/home/u/.local/state/venus/journal.sqlite3"]


def test_worker_command_line_parses_with_the_example_env() -> None:
    example = env_file(SYSTEMD / "worker.env.example")
    assert {"VENUS_WORKER_TARGET", "VENUS_BROKER", "VENUS_WORKER_ARGS"} <= example.keys()
    specifiers = {"%i": "w1", "%d": "/run/creds"}
    argv = command_line("venus-worker@.service", specifiers, example)
    parses(argv)
    assert argv[1:5] == [
        "worker",
        "venus.capabilities.builtin",
        "--broker",
        example["VENUS_BROKER"],
    ]
    assert argv[argv.index("--node-id") + 1] == "w1"
    assert argv[argv.index("--credentials") + 1] == "/run/creds/broker"
    # Extra arguments split at spaces, as systemd splits $VENUS_WORKER_ARGS.
    extra = example | {"VENUS_WORKER_ARGS": "--concurrency 8 --tls-ca /etc/ssl/ca.pem"}
    argv = command_line("venus-worker@.service", specifiers, extra)
    parses(argv)
    assert argv[-4:] == ["--concurrency", "8", "--tls-ca", "/etc/ssl/ca.pem"]
