"""``venus memory``: what the long-session memory file holds, and wiping it.

``show`` lists the sessions in the memory file (``[memory] persist``) with their entries
and bytes; ``wipe`` deletes one session or all of them, zeroing the bytes (the file holds
embeddings of what the camera saw and the microphone heard). ``wipe --file-gone`` is for a
file that cannot be read at all: it removes the file and its write-ahead log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from venus.errors import MemoryStoreError


def register(commands: argparse._SubParsersAction[Any]) -> None:
    memory = commands.add_parser(
        "memory",
        help="show or wipe the long-session memory file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = memory.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="list the sessions the memory file holds")
    show.add_argument("--json", action="store_true", help="print a JSON list")
    wipe = actions.add_parser(
        "wipe",
        help="delete sessions from the memory file (all of them unless --session)",
        description="Delete the memory of one session (--session ID) or of every session. "
        "Stop the daemon first, or it may write the running session back.",
    )
    wipe.add_argument("--session", metavar="ID", help="only this session")
    wipe.add_argument(
        "--file-gone",
        action="store_true",
        help="the file cannot be read: delete it (and its -wal / -shm) instead",
    )
    for p in (show, wipe):
        p.add_argument(
            "--file",
            type=Path,
            metavar="FILE",
            help="memory file (default: [memory] path, else memory.sqlite3 beside the journal)",
        )
        p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from venus.daemon.memory.persist import MemoryFile

    path: Path = args.file or configured_file(args)
    if args.action == "wipe" and args.file_gone:
        gone = [p for p in _with_logs(path) if p.exists()]
        for p in gone:
            p.unlink()
        _say(f"removed {', '.join(map(str, gone))}" if gone else f"no memory file at {path}")
        return 0
    if not path.is_file():
        _say(f"no memory file at {path} (written when [memory] persist is on)")
        return 0 if args.action == "wipe" else 1
    try:
        with MemoryFile(path) as file:
            if args.action == "wipe":
                count = file.wipe(args.session)
                what = f"session {args.session}" if args.session else "every session"
                _say(f"{path}: wiped {what} ({count} entries)")
                return 0
            sessions = file.sessions()
    except MemoryStoreError as e:
        _say(f"venus memory: {e}")
        return 1
    if args.json:
        rows = [{**vars(info), "entries": count, "bytes": size} for info, count, size in sessions]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    now = time.time()
    lines = [f"{'SESSION':<34} {'ENTRIES':>8} {'BYTES':>10} {'CHUNKS':>7}  LAST SAVED"]
    for info, count, size in sessions:
        ago = _ago(now - info.updated_at) + (", ended" if info.ended_at is not None else "")
        lines.append(f"{info.id:<34} {count:>8} {size:>10} {info.last_chunk + 1:>7}  {ago}")
    if not sessions:
        lines.append("(no sessions)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def configured_file(args: argparse.Namespace) -> Path:
    """``[memory] path``, else ``memory.sqlite3`` beside ``[harness] journal``."""
    from venus.daemon.cli import config_path, load_for_command
    from venus.daemon.config.schema import VenusConfig
    from venus.daemon.memory.persist import memory_path

    cfg = VenusConfig()
    if config_path(args).exists() or getattr(args, "config", None):
        cfg = load_for_command(args)
    return memory_path(cfg.memory.path, cfg.harness.journal)


def _with_logs(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _say(text: str) -> None:
    print(text, file=sys.stderr)  # noqa: T201 - the command's report
