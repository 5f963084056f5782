"""``venus worker MODULE[:ATTR] --broker URL --node-id ID``: serve capabilities over MQTT.

MODULE is imported; ATTR names a Capability or a sequence of them. Without ATTR the
module's ``CAPABILITIES`` sequence is used, else its ``BUILTINS``, else every
Capability at its top level (``@capability`` functions). The worker runs until SIGINT
or SIGTERM, then cancels the calls in flight, publishes ``offline`` and exits.

The credentials file holds ``username:password`` on one line and must be readable by its
owner only (chmod 600).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from venus.capabilities.credentials import read_credentials
from venus.errors import CapabilityError

log = logging.getLogger(__name__)

DEFAULT_ATTRS = ("CAPABILITIES", "BUILTINS")  # looked up in this order without ATTR


def register(commands: argparse._SubParsersAction[Any]) -> None:
    p = commands.add_parser(
        "worker",
        help="serve capabilities from a Python module to daemons over MQTT",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "target",
        metavar="MODULE[:ATTR]",
        help="e.g. venus.capabilities.builtin, or mypkg.tools:WEATHER",
    )
    p.add_argument("--broker", required=True, metavar="URL", help="mqtt://HOST[:PORT] or mqtts://")
    p.add_argument("--node-id", required=True, metavar="ID", help="this worker's node id")
    p.add_argument("--tls-ca", type=Path, metavar="FILE", help="CA certificate (PEM)")
    p.add_argument("--tls-cert", type=Path, metavar="FILE", help="client certificate (PEM)")
    p.add_argument("--tls-key", type=Path, metavar="FILE", help="client key (PEM)")
    p.add_argument(
        "--credentials", type=Path, metavar="FILE", help="file with username:password (chmod 600)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="calls run at once (default 4; 20 when serving the timer, whose pending "
        "timers each hold one)",
    )
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from venus.capabilities.builtin import worker_concurrency
    from venus.capabilities.worker import Worker

    capabilities = load_capabilities(args.target)
    credentials = read_credentials(args.credentials) if args.credentials else None
    concurrency = args.concurrency
    if concurrency is None:
        concurrency = worker_concurrency(capabilities)
    if concurrency < 1:
        raise CapabilityError(f"--concurrency must be at least 1, got {args.concurrency}")
    worker = Worker(
        args.node_id,
        capabilities,
        args.broker,
        credentials=credentials,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        concurrency=concurrency,
    )
    done = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("worker %s: %s, stopping", args.node_id, signal.Signals(signum).name)
        done.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker.start()
        done.wait()
    finally:
        worker.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def load_capabilities(target: str) -> list[Any]:
    """The Capabilities named by ``MODULE[:ATTR]`` (see the module's doc)."""
    from venus.capabilities.inprocess import Capability

    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise CapabilityError(f"cannot import {module_name!r}: {e}") from e
    if attr:
        if not hasattr(module, attr):
            raise CapabilityError(f"module {module_name} has no attribute {attr!r}")
        found: object = getattr(module, attr)
    else:
        default = next((a for a in DEFAULT_ATTRS if hasattr(module, a)), None)
        found = getattr(module, default) if default else None
        if found is None:
            found = [v for v in vars(module).values() if isinstance(v, Capability)]
    items = [found] if isinstance(found, Capability) else found
    where = f"{module_name}:{attr}" if attr else module_name
    if not isinstance(items, Sequence) or not all(isinstance(c, Capability) for c in items):
        raise CapabilityError(f"{where} is not a Capability or a sequence of Capabilities")
    if not items:
        raise CapabilityError(
            f"{where} offers no capabilities: define CAPABILITIES or decorate functions "
            "with @capability"
        )
    return list(items)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m venus.capabilities.worker_cli ...``: the same as ``venus worker``."""
    from venus.logs import setup_logging

    parser = argparse.ArgumentParser(prog="venus")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["worker", *(sys.argv[1:] if argv is None else argv)])
    setup_logging("INFO")
    try:
        code: int = args.run(args)
    except CapabilityError as e:
        print(f"venus: error: {e}", file=sys.stderr)  # noqa: T201 - the CLI's own output
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
