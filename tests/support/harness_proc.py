"""The harness as the daemon runs it (``Harness``: journal, evidence, core, its thread,
the in-process transport), in a process of its own: the SIGKILL durability test starts,
kills and restarts this.

    python harness_proc.py --journal J --effects F --submit 200   # capture 200, run
    python harness_proc.py --journal J --effects F --submit 0     # resume only

Capabilities: ``slow_idem`` (idempotent) and ``slow_once`` (not), each appending the item
id to the effects file (one O_APPEND write: its side effect) and sleeping a little.
Prints ``captured`` once every item is journalled, ``done`` when nothing is unfinished.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.daemon.harness.core import Capture
from venus.daemon.harness.service import Harness

SESSION = "durability"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--journal", type=Path, required=True)
    p.add_argument("--effects", type=Path, required=True)
    p.add_argument("--submit", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.05)
    args = p.parse_args()

    def slow(ctx: Context) -> dict[str, int]:
        fd = os.open(args.effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.item_id}\n".encode())
        finally:
            os.close(fd)
        time.sleep(float(ctx.arguments["sleep_s"]))
        return {"n": int(ctx.arguments["n"])}

    capabilities = [
        Capability(Contract(name="slow_idem", idempotent=True, freshness_s=3600), slow),
        Capability(Contract(name="slow_once", idempotent=False, freshness_s=3600), slow),
    ]
    harness = Harness.open(args.journal, [InProcessTransport(capabilities, max_workers=8)])
    harness.start(resume=True)
    ids = []
    for n in range(args.submit):
        name = "slow_idem" if n % 2 else "slow_once"
        capture = Capture(name, {"n": n, "sleep_s": args.sleep}, SESSION, item_id=f"item-{n:03d}")
        ids.append(harness.submit(capture))
    journal = harness.core.journal
    while any(journal.find(i) is None for i in ids):
        time.sleep(0.01)
    print("captured", flush=True)
    while True:
        time.sleep(0.05)
        if not journal.unfinished():
            break
    harness.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
