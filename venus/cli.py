"""The ``venus`` command: one console script, a subcommand per real feature.

Each area registers its own subcommands (``venus.daemon.cli.register``); their modules
import heavy dependencies only when a subcommand runs, so ``venus --help`` is instant.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from venus import __version__
from venus.errors import VenusError
from venus.logs import LEVELS, setup_logging

log = logging.getLogger(__name__)

DESCRIPTION = """\
Realtime-Venus: a full-duplex audio-visual voice assistant daemon for NVIDIA edge GPUs,
handing slow work to capability workers over MQTT while the conversation goes on."""

EPILOG = """\
exit status: 0 success, 1 error (the message says what to fix), 2 usage error.
Run `venus COMMAND --help` for a command's options."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="venus",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file (default: /etc/venus/venus.toml)",
    )
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        type=str.upper,
        help="log level; overrides [logging] level of the configuration",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from venus.bench.cli import register as register_bench
    from venus.capabilities.worker_cli import register as register_worker
    from venus.daemon.cli import register as register_daemon
    from venus.daemon.harness.call_cli import register as register_call
    from venus.daemon.harness.items_cli import register as register_items
    from venus.daemon.memory.cli import register as register_memory
    from venus.daemon.run_cli import register as register_run
    from venus.datagen.cli import register as register_datagen
    from venus.demo.cli import register as register_demo
    from venus.evaluation.cli import register as register_eval
    from venus.export.cli import register as register_export
    from venus.train.cli import register as register_train
    from venus.train.voice_cli import register as register_train_voice

    register_run(commands)
    register_demo(commands)
    register_call(commands)
    register_items(commands)
    register_memory(commands)
    register_worker(commands)
    register_daemon(commands)
    register_export(commands)
    register_bench(commands)
    register_datagen(commands)
    register_eval(commands)
    register_train(commands)
    register_train_voice(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level or "INFO")
    try:
        code: int = args.run(args)
    except VenusError as e:
        log.debug("command failed", exc_info=True)
        print(f"venus: error: {e}", file=sys.stderr)  # noqa: T201 - the CLI's own output
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
