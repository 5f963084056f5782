"""The daemon's subcommands: ``venus config check``, ``venus doctor``.

Handlers import what they need when they run, never at registration.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from venus.daemon.config.schema import DEFAULT_CONFIG_PATH, VenusConfig
from venus.logs import setup_logging

log = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction[Any]) -> None:
    config = commands.add_parser(
        "config",
        help="check a configuration file",
        description="Work with venus.toml, the daemon's configuration file.",
    )
    actions = config.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="validate a configuration file and print it resolved",
        description=(
            "Validate every key of a configuration file. On success print the resolved "
            "configuration (defaults filled in, secrets masked) and exit 0; otherwise print "
            "every problem, each naming its key, and exit 1."
        ),
    )
    check.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help=f"file to check (default: --config, else $VENUS_CONFIG, else {DEFAULT_CONFIG_PATH})",
    )
    check.add_argument(
        "--json", action="store_true", help="print the resolved configuration as JSON"
    )
    check.set_defaults(run=_config_check)

    doctor = commands.add_parser(
        "doctor",
        help="check this machine for the daemon and say what to fix",
        description=(
            "Check the configuration, audio devices, one second of microphone level, the "
            "camera, ONNX Runtime providers, the GPU, the MQTT broker and the engine "
            "directory; print a verdict with the fix for each problem. Without a "
            "configuration file the defaults are checked. Exit 0 without failures "
            "(warnings allowed), 1 with any."
        ),
    )
    doctor.add_argument("--json", action="store_true", help="print the checks as a JSON list")
    doctor.add_argument(
        "--hashes",
        action="store_true",
        help="also check every engine file's sha256 (reads gigabytes at real size)",
    )
    doctor.set_defaults(run=_doctor)


def config_path(args: argparse.Namespace) -> Path:
    """The configuration file a command should read: --config, $VENUS_CONFIG, the default."""
    given = getattr(args, "file", None) or args.config or os.environ.get("VENUS_CONFIG")
    return Path(given) if given else DEFAULT_CONFIG_PATH


def load_for_command(args: argparse.Namespace) -> VenusConfig:
    """Load the command's configuration and apply its logging settings.

    ``--log-level`` on the command line wins over ``[logging] level``.
    """
    from venus.daemon.config import load_config

    path = config_path(args)
    cfg = load_config(path)
    setup_logging(args.log_level or cfg.logging.level, cfg.logging.format)
    log.debug("configuration loaded from %s", path)
    return cfg


def _doctor(args: argparse.Namespace) -> int:
    from venus.daemon.doctor import doctor

    return doctor(args)


def _config_check(args: argparse.Namespace) -> int:
    from venus.daemon.config import ConfigInvalid, render_config

    path = config_path(args)
    try:
        cfg = load_for_command(args)
    except ConfigInvalid as e:
        print(str(e), file=sys.stderr)  # noqa: T201 - the command's report
        return 1
    sys.stdout.write(render_config(cfg, "json" if args.json else "toml"))
    print(f"{path}: OK", file=sys.stderr)  # noqa: T201
    return 0
