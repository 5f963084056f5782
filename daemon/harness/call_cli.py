"""``venus call CAPABILITY --args JSON``: one work item through the harness, from a shell.

The item takes the daemon's own path (journal, evidence, routing, timeouts, retries) and
the normalized result is printed as JSON. By default the built-in capabilities run in
this process; with ``--broker`` the call goes over MQTT to a capability worker
(``venus worker``), as the daemon's calls do. Exit status: 0 completed, 1 failed, 2
cancelled, expired or timed out.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus.errors import ConfigError

if TYPE_CHECKING:
    from venus.capabilities.transport import Transport

log = logging.getLogger(__name__)

EXIT = {"completed": 0, "failed": 1}  # everything else: 2
DISCOVERY_S = 5.0  # how long --broker waits for a worker to announce the capability


def register(commands: argparse._SubParsersAction[Any]) -> None:
    p = commands.add_parser(
        "call",
        help="run one capability through the harness and print its result as JSON",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("capability", metavar="CAPABILITY", help="capability name, e.g. clock")
    p.add_argument(
        "--args", default="{}", metavar="JSON", help="arguments as a JSON object (default {})"
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="give up (and cancel) after S seconds (default: the contract's timeout + 5)",
    )
    p.add_argument(
        "--journal", type=Path, metavar="FILE", help="override [harness] journal of the config"
    )
    p.add_argument(
        "--broker",
        metavar="URL",
        help="call capability workers over MQTT at this broker (mqtt://HOST:PORT) instead of "
        "the built-ins in this process",
    )
    p.add_argument(
        "--credentials", type=Path, metavar="FILE", help="with --broker: username:password file"
    )
    p.set_defaults(run=_call)


def _call(args: argparse.Namespace) -> int:
    from venus.daemon.harness.core import Capture
    from venus.daemon.harness.service import Harness
    from venus.daemon.harness.states import State

    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--args is not JSON: {e.msg} at character {e.pos}") from None
    if not isinstance(arguments, dict):
        raise ConfigError('--args must be a JSON object, e.g. \'{"timezone": "UTC"}\'')
    journal = args.journal or _configured_journal(args)
    harness = Harness.open(journal, [_transport(args)])
    harness.start(resume=False)
    try:
        if args.broker:
            _discover(harness, args.capability)
        routed = harness.core.route(args.capability)
        timeout = args.timeout or ((routed[0].timeout_s if routed else 5.0) + 5.0)
        capture = Capture(args.capability, arguments, session_id=f"cli-{uuid.uuid4().hex}")
        item_id = harness.submit(capture)
        item = harness.wait(item_id, timeout)
        if item is None:
            harness.cancel(item_id, f"venus call: no answer within {timeout:g} s")
            item = harness.wait(item_id, 5.0)
        if item is not None and item.state in (State.COMPLETED, State.FAILED):
            harness.post(
                lambda core: core.journal.move(item_id, State.DELIVERED, "printed by venus call")
            )
        final = harness.core.journal.result(item_id)
    finally:
        harness.stop()
    status, result = final if final else ("cancelled", None)
    out = {
        "item_id": item_id,
        "capability": args.capability,
        "status": status,
        "result": result.to_json() if result else None,
    }
    sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return EXIT.get(status, 2)


def _transport(args: argparse.Namespace) -> Transport:
    if not args.broker:
        from venus.capabilities.builtin import builtin_transport

        return builtin_transport()
    from venus.capabilities.mqtt_transport import MqttTransport

    node = f"venus-call-{uuid.uuid4().hex[:8]}"
    return MqttTransport(node, args.broker, credentials=args.credentials)


def _discover(harness: Any, capability: str, wait_s: float = DISCOVERY_S) -> None:
    """Wait (a little) for a worker offering ``capability`` to show up on the broker."""
    deadline = time.monotonic() + wait_s
    while harness.core.route(capability) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if harness.core.route(capability) is None:
        log.warning("no worker offers %r at the broker after %.0f s", capability, wait_s)


def _configured_journal(args: argparse.Namespace) -> Path:
    from venus.daemon.cli import config_path, load_for_command
    from venus.daemon.config.schema import HarnessConfig

    if not config_path(args).exists() and not args.config:
        return HarnessConfig().journal
    return load_for_command(args).harness.journal
