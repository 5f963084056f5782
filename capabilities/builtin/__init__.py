"""Capabilities built into the daemon, served by an ``InProcessTransport``.

``clock``: the current date and time, in an IANA time zone or the machine's own. Time
zones come from ``zoneinfo`` (the system's tz database, or the ``tzdata`` package); on a
machine with neither, an explicit zone fails and the default falls back to UTC, saying
why in the answer.

``calculator``: exact arithmetic and unit conversion (``calculator.py``).

``timer``: countdown timers, set / cancel / list (``timer.py``). A ``set`` call runs until
its timer is due and its answer comes late, so each pending timer holds a worker thread:
``builtin_transport`` has ``MAX_TIMERS`` threads beyond the four other calls use, and so
has a ``venus worker`` serving the timer unless ``--concurrency`` says otherwise
(``worker_concurrency``).

``mqtt_device`` (``mqtt_device.py``) and ``reason`` (``reason.py``) need settings (a
devices file and a broker; an endpoint URL), so they are not in ``BUILTINS``: the daemon
adds them from ``[capabilities]``.
"""

from __future__ import annotations

import os
import time
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone, tzinfo
from pathlib import Path

from venus.capabilities.builtin.calculator import calculator_capability
from venus.capabilities.builtin.timer import MAX_TIMERS, TIMER, TimerTime, timer_capability
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.capabilities.result import ToolResult

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    *("January", "February", "March", "April", "May", "June"),
    *("July", "August", "September", "October", "November", "December"),
)
LOCALTIME = Path("/etc/localtime")  # the machine's zone: a link into the tz database
UTC_NAMES = ("UTC", "Etc/UTC")  # answered without a tz database

CLOCK = Contract(
    name="clock",
    title="Clock",
    description=(
        "The current date and time, in the given IANA time zone "
        "or the machine's local zone when none is given."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "minLength": 1,
                "description": "IANA time zone name, e.g. Europe/Paris; default: local",
            }
        },
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "iso": {"type": "string", "description": "ISO 8601, seconds and UTC offset"},
            "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
            "time": {"type": "string", "pattern": r"^\d{2}:\d{2}$"},
            "weekday": {"enum": list(WEEKDAYS)},
            "timezone": {"type": "string", "description": "the zone used"},
        },
        "required": ["iso", "date", "time", "weekday", "timezone"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    timeout_s=2.0,
    freshness_s=60.0,  # "it is 14:05" is still right, give or take, for a minute
    evidence="none",
    idempotent=True,
    deliver="when_idle",
)


def find_zone(name: str) -> tzinfo | None:
    """The zone named ``name``, or None if this machine does not know it."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError: a malformed or absolute key, or a file that is not TZif
        return timezone.utc if name in UTC_NAMES else None


def local_zone(
    environ: Mapping[str, str] = os.environ, localtime: Path = LOCALTIME
) -> tuple[tzinfo, str, str]:
    """The machine's zone as ``(zone, name, note)``; ``note`` says why it is UTC when
    the zone is unknown, and is empty otherwise. ``TZ`` wins over ``/etc/localtime``,
    as in the C library (POSIX rule strings such as ``CET-1CEST`` are not understood)."""
    tz = environ.get("TZ", "")
    if tz:
        name = tz.removeprefix(":")
        zone = find_zone(name)
        if zone is not None:
            return zone, name, ""
        return timezone.utc, "UTC", f"TZ={tz!r} is not a time zone this machine knows"
    try:
        target = str(localtime.resolve(strict=True))
    except OSError:
        return timezone.utc, "UTC", f"the machine's time zone is unknown (no {localtime})"
    name = target.rpartition("zoneinfo/")[2] if "zoneinfo/" in target else ""
    zone = find_zone(name) if name else None
    if zone is not None:
        return zone, name, ""
    try:
        with open(target, "rb") as f:
            return zoneinfo.ZoneInfo.from_file(f, key=name or "localtime"), name or "local", ""
    except (OSError, ValueError):
        return timezone.utc, "UTC", f"the machine's time zone is unknown ({target} is unreadable)"


def unknown_zone(name: str) -> str:
    if not zoneinfo.available_timezones():
        return (
            f"unknown time zone {name!r}: this machine has no time zone database "
            "(install the tzdata package); only UTC is available"
        )
    return f"unknown time zone {name!r}; use an IANA name such as Europe/Paris or Asia/Tokyo"


def clock_capability(
    now_s: Callable[[], float] = time.time,
    local: Callable[[], tuple[tzinfo, str, str]] = local_zone,
) -> Capability:
    """The ``clock`` capability; ``now_s`` and ``local`` are there for tests."""

    def handle(ctx: Context) -> ToolResult:
        name = ctx.arguments.get("timezone")
        if name is None:
            zone, name, note = local()
        else:
            found = find_zone(name)
            if found is None:
                return ToolResult.failed("invalid_arguments", unknown_zone(name))
            zone, note = found, ""
        t = datetime.fromtimestamp(now_s(), zone)
        weekday = WEEKDAYS[t.weekday()]
        structured = {
            "iso": t.isoformat(timespec="seconds"),
            "date": f"{t:%Y-%m-%d}",
            "time": f"{t:%H:%M}",
            "weekday": weekday,
            "timezone": name,
        }
        where = f"{name}; {note}" if note else name
        day = f"{weekday}, {t.day} {MONTHS[t.month - 1]} {t.year}"
        return ToolResult.ok(f"It is {t:%H:%M} on {day} ({where}).", structured)

    return Capability(CLOCK, handle)


BUILTINS: tuple[Capability, ...] = (
    clock_capability(),
    calculator_capability(),
    timer_capability(),  # one registry of pending timers for the process
)
OTHER_CALLS = 4  # threads left for calls other than pending timers


def builtin_transport(
    extra: Sequence[Capability] = (),
    clock_at_s: float | None = None,
    timer_time: TimerTime | None = None,
) -> InProcessTransport:
    """The built-ins, and ``extra`` ones configured by the daemon (``mqtt_device``,
    ``reason``), behind one in-process transport (the daemon and ``venus call``); up to
    ``MAX_TIMERS`` pending timers never starve the other calls.

    Offline runs (``venus demo``, ``venus eval delegation``) give both of the others, so
    that they repeat whenever and wherever they run and a result the model reads cannot
    part two runs of a seed. ``clock_at_s`` stops the clock at that instant (seconds
    since the epoch), its local zone UTC; the timer dates its due times from it too.
    ``timer_time`` is what the timers wait on (``SampleTime``: the sample clock). Either
    gives the transport a timer registry of its own (ids from ``t1``), not the process's."""
    builtins = BUILTINS
    if clock_at_s is not None or timer_time is not None:
        now = time.time if clock_at_s is None else (lambda at=clock_at_s: at)
        zone = None if clock_at_s is None else timezone.utc
        own = [timer_capability(now, pace=timer_time, zone=zone)]
        if clock_at_s is not None:
            own.append(clock_capability(now, lambda: (timezone.utc, "UTC", "")))
        mine = {c.contract.name: c for c in own}  # in BUILTINS' places: the order offered
        builtins = tuple(mine.get(c.contract.name, c) for c in BUILTINS)
    return InProcessTransport([*builtins, *extra], max_workers=OTHER_CALLS + MAX_TIMERS)


def worker_concurrency(capabilities: Sequence[Capability]) -> int:
    """A worker's default thread count: ``OTHER_CALLS``, plus ``MAX_TIMERS`` when it
    serves the timer (each pending timer holds a thread until it is due)."""
    timers = any(c.contract == TIMER for c in capabilities)
    return OTHER_CALLS + (MAX_TIMERS if timers else 0)
