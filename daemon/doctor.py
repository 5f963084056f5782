"""``venus doctor``: check this machine for the daemon, and say what to fix.

Checks, in order: the configuration file, the audio devices, one second from the
microphone, the camera, ONNX Runtime's providers, the GPU, the broker, the engine
directory and the memory file. Each is a function returning a frozen ``Check`` (``doctor_checks``,
``doctor_devices``, ``doctor_broker``); here they run one after another, each on its own
thread with a deadline, so a device that hangs costs its timeout and the command still
ends in seconds. Output is an aligned table, the audio devices, and a verdict with the
fix for every problem; ``--json`` prints the list of checks instead. Exit 0 without
failures (warnings allowed), 1 with any. Logging is at WARNING unless ``--log-level``
says otherwise: the report is the output, the devices' INFO lines would only interleave.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from venus import __version__
from venus.daemon.cli import config_path, load_for_command
from venus.daemon.config.schema import VenusConfig
from venus.daemon.doctor_broker import check_broker
from venus.daemon.doctor_checks import (
    Check,
    check_engines,
    check_gpu,
    check_memory,
    check_providers,
)
from venus.daemon.doctor_devices import check_audio_devices, check_camera, check_microphone
from venus.errors import ConfigError
from venus.logs import setup_logging

log = logging.getLogger(__name__)

ENGINES_HASH_TIMEOUT_S = 600.0  # hashing every engine file: gigabytes at real size
NAME_WIDTH = 12
STATUS_WIDTH = 6
_SHOWN = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skipped": "skip"}


@dataclasses.dataclass(frozen=True)
class Planned:
    """A check to run: its name, its deadline, and the call that makes it."""

    name: str
    timeout_s: float
    run: Callable[[], Check]
    fix_on_timeout: str
    after: str = ""  # skipped when the check of this name failed


def plan(cfg: VenusConfig, hashes: bool = False) -> list[Planned]:
    """The checks of ``cfg``, in the order they run and print."""
    audio, video = cfg.audio, cfg.video
    return [
        Planned(
            "audio",
            5.0,
            lambda: check_audio_devices(audio.backend),
            "restart the audio server (`systemctl --user restart pipewire pulseaudio`)",
        ),
        Planned(
            "microphone",
            6.0,
            lambda: check_microphone(audio),
            "check the input device with `pactl list short sources` or `arecord -l`",
            after="audio",
        ),
        Planned(
            "camera",
            12.0,
            lambda: check_camera(video),
            "the camera hangs in its driver: re-plug it, or set video.enabled = false",
        ),
        Planned(
            "providers",
            10.0,
            lambda: check_providers(cfg.engines.providers),
            "check the onnxruntime install (`python -c 'import onnxruntime'`)",
        ),
        Planned("gpu", 8.0, check_gpu, "the NVIDIA driver hangs: check `nvidia-smi`"),
        Planned(
            "broker",
            8.0,
            lambda: check_broker(cfg.harness),
            "check the network path to harness.broker_url",
        ),
        Planned(
            "engines",
            ENGINES_HASH_TIMEOUT_S if hashes else 15.0,
            lambda: check_engines(cfg.model, hashes),
            "the engine directory is slow to read (network mount?); try --hashes later",
        ),
        Planned(
            "memory",
            12.0,
            lambda: check_memory(cfg.memory, cfg.harness.journal),
            "the memory file is locked: stop `venus memory wipe` or check the disk",
        ),
    ]


def run_one(planned: Planned, abandoned: list[threading.Thread]) -> Check:
    """Run one check on its own thread; a timeout or an escaped exception becomes a fail."""
    box: list[Check] = []

    def target() -> None:
        try:
            box.append(planned.run())
        except Exception as e:  # the supervisor of the checks: report, never raise
            log.debug("check %s raised", planned.name, exc_info=True)
            box.append(
                Check(
                    planned.name,
                    "fail",
                    f"unexpected error: {type(e).__name__}: {e}",
                    fix="run with --log-level DEBUG and report the traceback",
                )
            )

    thread = threading.Thread(target=target, name=f"doctor-{planned.name}", daemon=True)
    thread.start()
    thread.join(planned.timeout_s)
    if thread.is_alive() or not box:
        abandoned.append(thread)
        return Check(
            planned.name,
            "fail",
            f"no answer within {planned.timeout_s:g} s",
            fix=planned.fix_on_timeout,
        )
    return box[0]


def load(args: argparse.Namespace) -> tuple[VenusConfig, Check]:
    """The configuration to check with, and the check that says where it came from."""
    path = config_path(args)
    details = {"path": str(path)}
    if not path.exists():
        return VenusConfig(), Check(
            "config",
            "warn",
            f"{path} not found; checking with the defaults",
            details,
            fix=f"copy systemd/venus.toml to {path} and edit it (or pass --config FILE)",
        )
    try:
        cfg = load_for_command(args)
    except ConfigError as e:
        details["error"] = str(e)
        first = str(e).splitlines()[0]
        return VenusConfig(), Check(
            "config",
            "fail",
            f"{first} (checking with the defaults)",
            details,
            fix=f"`venus config check {path}` lists every problem",
        )
    return cfg, Check("config", "ok", str(path), details)


def doctor(args: argparse.Namespace) -> int:
    """The ``venus doctor`` command."""
    cfg, config_check = load(args)
    if args.log_level is None:
        setup_logging("WARNING", cfg.logging.format)
    checks = [config_check]
    abandoned: list[threading.Thread] = []
    if not args.json:
        _print(f"venus doctor {__version__}: checking this machine for `venus run`\n")
        _print(_line(Check("check", "ok", "result"), header=True))
        _print(_line(config_check))
    for planned in plan(cfg, args.hashes):
        failed = any(c.name == planned.after and c.status == "fail" for c in checks)
        if failed:
            check = Check(planned.name, "skipped", f"not tried: the {planned.after} check failed")
        else:
            check = run_one(planned, abandoned)
        checks.append(check)
        if not args.json:
            _print(_line(check))
    if args.json:
        _print(json.dumps([dataclasses.asdict(c) for c in checks], indent=2, default=str))
    else:
        _print(render_tail(checks))
    code = 1 if any(c.status == "fail" for c in checks) else 0
    if abandoned:  # a hung driver call must not keep the process alive (or crash its exit)
        log.debug("%d check(s) still running; exiting without waiting", len(abandoned))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _line(check: Check, header: bool = False) -> str:
    status = "status" if header else _SHOWN[check.status]
    return f"  {check.name:<{NAME_WIDTH}}{status:<{STATUS_WIDTH + 2}}{check.summary}"


def render_tail(checks: list[Check]) -> str:
    """The audio device table, then the verdict and the fix for each problem."""
    lines: list[str] = []
    audio = next((c for c in checks if c.name == "audio"), None)
    if audio is not None and audio.details.get("devices"):
        lines += ["", f"audio devices ({audio.details.get('backend', '')}):"]
        lines += device_table(audio.details["devices"])
    problems = [c for c in checks if c.status in ("fail", "warn") and c.fix]
    lines += ["", verdict(checks)]
    lines += [f"  {c.name + ':':<{NAME_WIDTH}}{c.fix}" for c in problems]
    return "\n".join(lines)


def device_table(devices: list[dict[str, Any]]) -> list[str]:
    rows = [("index", "name", "in", "out", "rate", "default")]
    rows += [
        (
            str(d["index"]),
            str(d["name"]),
            str(d["inputs"]),
            str(d["outputs"]),
            f"{d['rate_hz']:g} Hz",
            ", ".join(d.get("default", [])),
        )
        for d in devices
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {0, 2, 3, 4}
    return [
        "  "
        + "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]


def verdict(checks: list[Check]) -> str:
    fails = [c.name for c in checks if c.status == "fail"]
    warns = [c.name for c in checks if c.status == "warn"]
    warned = f"{len(warns)} warning{'s' * (len(warns) != 1)} ({', '.join(warns)})"
    if fails:
        failed = f"{len(fails)} problem{'s' * (len(fails) != 1)} ({', '.join(fails)})"
        return f"verdict: NOT READY: {failed}" + (f", {warned}" if warns else "") + "; fix:"
    if warns:
        return f"verdict: ready, with {warned}; worth a look:"
    return "verdict: ready: every check passed"


def _print(text: str) -> None:
    print(text, flush=True)  # noqa: T201 - the command's report
