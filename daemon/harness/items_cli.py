"""``venus items``: list the work items in the journal, read-only.

Reads the journal without writing it (an SQLite read-only open), so it is safe while the
daemon runs, and never creates a journal that is not there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus.daemon.harness.states import State

if TYPE_CHECKING:
    from venus.daemon.harness.item import WorkItem
    from venus.daemon.harness.journal import Journal

ITEMS_HELP = """\
List the daemon's work items (delegations), newest first: id, capability, state,
dispatch attempts, age, session and a one-line result. The journal is read, never
written. --json prints every field, the final result and each transition."""

SHORT_ID = 8  # characters of item and session ids in the table
SUMMARY_CHARS = 40  # of the result column


def register(commands: argparse._SubParsersAction[Any]) -> None:
    items = commands.add_parser(
        "items",
        help="list the work items in the journal",
        description=ITEMS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    items.add_argument(
        "--journal", type=Path, metavar="FILE", help="journal to read (default: [harness] journal)"
    )
    items.add_argument(
        "--state",
        action="extend",
        nargs="+",
        choices=[s.value for s in State],
        metavar="S",
        help=f"only items in these states ({', '.join(s.value for s in State)})",
    )
    items.add_argument("--session", metavar="ID", help="only items of this session")
    items.add_argument("--limit", type=_positive, metavar="N", help="at most N items")
    items.add_argument("--json", action="store_true", help="print a JSON list with every field")
    items.set_defaults(run=run_items)


def run_items(args: argparse.Namespace) -> int:
    from venus.daemon.harness.journal import Journal

    path = args.journal or _configured_journal(args)
    if not path.is_file():
        print(  # noqa: T201 - the command's report
            f"venus items: no journal at {path} (the daemon creates it when it first runs; "
            "--journal FILE reads another)",
            file=sys.stderr,
        )
        return 1
    with Journal.open(path, read_only=True) as journal:
        wanted = [State(s) for s in args.state] if args.state else None
        items = journal.items(states=wanted, session_id=args.session, limit=args.limit)
        if args.json:
            rows = [_as_json(journal, item) for item in items]
            sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
            return 0
        lines = [_table_row(journal, item, time.time()) for item in items]
    sys.stdout.write(_table(lines))
    if not items:
        print(f"no work items in {path}", file=sys.stderr)  # noqa: T201
    return 0


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return n


def _configured_journal(args: argparse.Namespace) -> Path:
    """[harness] journal of the configuration; the default when no file exists and none
    was named with --config."""
    from venus.daemon.cli import config_path, load_for_command
    from venus.daemon.config.schema import HarnessConfig

    if not config_path(args).exists() and not getattr(args, "config", None):
        return HarnessConfig().journal
    return load_for_command(args).harness.journal


HEADER = ("ID", "CAPABILITY", "STATE", "ATTEMPT", "AGE", "SESSION", "RESULT")


def _table_row(journal: Journal, item: WorkItem, now: float) -> tuple[str, ...]:
    final = journal.result(item.id)
    summary = ""
    if final is not None:
        result = final[1]
        if result.error is not None:
            summary = f"{result.error.code}: {result.error.message}"
        else:
            summary = result.text()
        summary = " ".join(summary.split())  # one line
        if len(summary) > SUMMARY_CHARS:
            summary = summary[: SUMMARY_CHARS - 3] + "..."
    return (
        item.id[:SHORT_ID],
        item.capability,
        item.state.value,
        str(item.attempt),
        _age(now - item.created_at),
        item.session_id[:SHORT_ID],
        summary,
    )


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in [HEADER, *rows]
    )


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _as_json(journal: Journal, item: WorkItem) -> dict[str, Any]:
    out = dataclasses.asdict(item)
    out["state"] = item.state.value
    out["delivering_from"] = item.delivering_from.value if item.delivering_from else None
    final = journal.result(item.id)
    out["result_status"] = final[0] if final else None
    out["result"] = final[1].to_json() if final else None
    out["transitions"] = [
        {
            "seq": t.seq,
            "old": t.old.value if t.old is not None else None,
            "new": t.new.value,
            "at": t.at,
            "reason": t.reason,
        }
        for t in journal.transitions(item.id)
    ]
    return out
