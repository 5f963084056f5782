"""``timer``: countdown timers; a timer that runs out answers late.

One capability, three actions. ``set`` registers a timer and its call stays running until
the timer is due: the handler reports progress at once ("timer t1 set for 5 minutes") and
then waits on the call's cancel token with a timeout, so the answer ("Your 5 minute timer
for pasta is done.") is the call's final result, arriving late, which the harness offers
like any other (``deliver: interrupt``: a timer going off is said even while the
assistant is talking). ``cancel`` ends a pending timer, named by id (``t3``) or label;
``list`` answers at once with what is pending and how long is left.

Cancelling, whoever asks, sets the ``set`` call's token: a harness cancel of the item or
a transport ``stop`` through the transport, a ``cancel`` action through the registry,
which keeps each pending timer's token for that. The handler wakes, raises
``CallCancelled`` and the call ends ``cancelled`` (the in-process transport answers a
``CallCancelled`` that way whether or not it set the token itself).

Each pending timer holds one worker thread for as long as it runs, so whoever serves this
capability needs ``max_timers`` threads beyond those other calls use (``builtin_transport``
has them, and so has ``venus worker`` by default: ``worker_concurrency``). The
wait runs on real (monotonic) time (``WallTime``), or in an offline run on the sample
clock (``SampleTime``: a timer set at second 3 of a sample for 15 s runs out at second 18
of it, however fast the machine runs the sample); ``clock`` only dates the due time
reported.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, Protocol

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import CallCancelled, Capability, Context
from venus.capabilities.result import ToolResult
from venus.errors import CapabilityError

MAX_TIMERS = 16  # pending at once; each holds a worker thread
MAX_SECONDS = 86_400  # the longest timer: a day
MAX_LABEL = 64  # characters
TIMEOUT_MARGIN_S = 60.0  # the contract's timeout is the longest timer plus this

_TIMER_FIELDS: dict[str, Any] = {
    "timer": {"type": "string", "pattern": "^t[0-9]+$", "description": "the timer's id"},
    "label": {"type": ["string", "null"], "description": "what it is for, if given"},
    "seconds": {"type": "number", "description": "the duration it was set for"},
    "due": {"type": "string", "description": "ISO 8601, seconds and UTC offset"},
}
_PENDING = {
    "type": "object",
    "properties": {
        **_TIMER_FIELDS,
        "left_s": {"type": "number", "minimum": 0, "description": "seconds until it is due"},
    },
    "required": ["timer", "label", "seconds", "left_s", "due"],
    "additionalProperties": False,
}

TIMER = Contract(
    name="timer",
    title="Timer",
    description=(
        "Countdown timers. action=set starts one (seconds, optional label) and answers "
        "when it runs out; action=cancel stops one (timer: its id such as t3, or its "
        "label); action=list says which are running and how long each has left."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "action": {"enum": ["set", "cancel", "list"]},
            "seconds": {
                "type": "number",
                "minimum": 1,
                "maximum": MAX_SECONDS,
                "description": "set: the duration in seconds (1 to 86400)",
            },
            "label": {
                "type": "string",
                "maxLength": MAX_LABEL,
                "description": "set: what the timer is for, e.g. pasta",
            },
            "timer": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_LABEL,
                "description": "cancel: the timer's id (t3) or label",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
        "allOf": [
            {"if": {"properties": {"action": {"const": "set"}}}, "then": {"required": ["seconds"]}},
            {
                "if": {"properties": {"action": {"const": "cancel"}}},
                "then": {"required": ["timer"]},
            },
        ],
    },
    output_schema={
        "type": "object",
        "oneOf": [
            {
                "description": "set: the timer that ran out",
                "properties": _TIMER_FIELDS,
                "required": ["timer", "label", "seconds", "due"],
                "additionalProperties": False,
            },
            {
                "description": "cancel: the timer cancelled",
                "properties": {"cancelled": _PENDING},
                "required": ["cancelled"],
                "additionalProperties": False,
            },
            {
                "description": "list: the pending timers, soonest first",
                "properties": {"timers": {"type": "array", "items": _PENDING}},
                "required": ["timers"],
                "additionalProperties": False,
            },
        ],
    },
    annotations={"readOnlyHint": False, "idempotentHint": False, "openWorldHint": False},
    timeout_s=MAX_SECONDS + TIMEOUT_MARGIN_S,  # a set call runs as long as its timer
    freshness_s=300.0,  # "your timer is done" five minutes late is still worth saying
    evidence="none",
    idempotent=False,  # a second dispatch would be a second timer
    cancellable=True,
    deliver="interrupt",  # a timer going off does not wait for a pause
)


class TimerTime(Protocol):
    """What a timer waits on: seconds that only move forward."""

    def start(self, item_id: str) -> float:
        """When the ``set`` call ``item_id`` started its timer."""
        ...

    def now(self) -> float: ...

    def wait(self, token: threading.Event, until: float) -> None:
        """Return once ``now() >= until`` or ``token`` is set."""
        ...


class WallTime:
    """Real time (``time.monotonic``): the daemon's and ``venus worker``'s timers."""

    def start(self, item_id: str) -> float:
        return time.monotonic()

    def now(self) -> float:
        return time.monotonic()

    def wait(self, token: threading.Event, until: float) -> None:
        while (left := until - time.monotonic()) > 0:
            if token.wait(left):
                return


class SampleTime:
    """An offline run's sample clock, which moves only when the run says (``advance``):
    a timer runs out at the same point of the sample however fast the machine runs it.
    A call starts its timer at the start of the chunk that made it (``made_at``, the
    journal's chunk index; the boundary reached last when that is unknown); at the end of
    chunk ``k`` the time is ``(k + 1) * chunk_s``."""

    POLL_S = 0.05  # a cancel sets the call's token without waking us: look this often

    def __init__(
        self, chunk_s: float, made_at: Callable[[str], int | None] = lambda _item: None
    ) -> None:
        if not chunk_s > 0:
            raise CapabilityError(f"chunk_s must be > 0, got {chunk_s!r}")
        self.chunk_s = chunk_s
        self.made_at = made_at
        self._now = 0.0
        self._moved = threading.Condition()

    def start(self, item_id: str) -> float:
        chunk = self.made_at(item_id)
        return self.now() if chunk is None else chunk * self.chunk_s

    def now(self) -> float:
        with self._moved:
            return self._now

    def advance(self, chunk: int) -> float:
        """The end of chunk ``chunk``: wake the timers due by then; the time now."""
        with self._moved:
            self._now = max(self._now, (chunk + 1) * self.chunk_s)
            self._moved.notify_all()
            return self._now

    def wait(self, token: threading.Event, until: float) -> None:
        with self._moved:
            while self._now < until and not token.is_set():
                self._moved.wait(self.POLL_S)


@dataclass(eq=False)
class Timer:
    """One pending timer: its ``set`` call's token wakes it, whoever cancels."""

    id: str
    label: str | None
    seconds: float
    due_s: float  # clock() time it is due, for the ISO time reported
    ends_at: float  # the TimerTime it is due, for the wait
    token: threading.Event  # the set call's Context.cancelled
    now: Callable[[], float]  # its TimerTime's now
    zone: tzinfo | None = None  # of the due time reported (None: the machine's)
    cancelled_by: str = ""  # set by a cancel action before it sets the token

    def left_s(self) -> float:
        return max(0.0, self.ends_at - self.now())

    def fields(self) -> dict[str, Any]:
        due = datetime.fromtimestamp(self.due_s, self.zone).astimezone(self.zone)
        due_iso = due.isoformat(timespec="seconds")
        return {"timer": self.id, "label": self.label, "seconds": self.seconds, "due": due_iso}

    def pending(self) -> dict[str, Any]:
        return {**self.fields(), "left_s": round(self.left_s(), 1)}

    def named(self) -> str:
        """``the 5 minute timer for pasta (t1)``."""
        what = f" for {self.label}" if self.label else ""
        return f"the {duration(self.seconds, adjective=True)} timer{what} ({self.id})"


class Timers:
    """The pending timers of one capability, shared by its calls (under one lock)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        max_timers: int = MAX_TIMERS,
        pace: TimerTime | None = None,
        zone: tzinfo | None = None,
    ):
        if max_timers < 1:
            raise CapabilityError(f"max_timers must be at least 1, got {max_timers}")
        self.clock = clock
        self.pace: TimerTime = pace or WallTime()
        self.zone = zone
        self.max_timers = max_timers
        self._lock = threading.Lock()
        self._timers: dict[str, Timer] = {}
        self._made = 0  # timers ever set: the next id is t{made + 1}

    def handle(self, ctx: Context) -> ToolResult:
        action = ctx.arguments["action"]
        if action == "set":
            return self.set_timer(ctx)
        if action == "cancel":
            return self.cancel_timer(ctx.arguments["timer"], ctx.item_id)
        return self.list_timers()

    def set_timer(self, ctx: Context) -> ToolResult:
        """Register a timer, then wait until it is due or cancelled (CallCancelled)."""
        seconds = float(ctx.arguments["seconds"])
        label = ctx.arguments.get("label", "").strip() or None
        with self._lock:
            live = self._live()
            if len(live) >= self.max_timers:
                names = ", ".join(t.id for t in live)
                return ToolResult.failed(
                    "too_many_timers",
                    f"{len(live)} timers are already running, the most there can be "
                    f"({names}); cancel one before setting another",
                )
            self._made += 1
            timer = Timer(
                f"t{self._made}",
                label,
                seconds,
                self.clock() + seconds,
                self.pace.start(ctx.item_id) + seconds,
                ctx.cancelled,
                self.pace.now,
                self.zone,
            )
            self._timers[timer.id] = timer
        try:
            what = f" ({label})" if label else ""
            ctx.progress(0.0, f"timer {timer.id} set for {duration(seconds)}{what}")
            self.pace.wait(ctx.cancelled, timer.ends_at)
        finally:
            with self._lock:
                self._timers.pop(timer.id, None)
        if ctx.cancelled.is_set():
            raise CallCancelled(timer.cancelled_by or f"timer {timer.id} was cancelled")
        for_what = f" for {label}" if label else ""
        text = f"Your {duration(seconds, adjective=True)} timer{for_what} is done."
        return ToolResult.ok(text, timer.fields())

    def cancel_timer(self, ref: str, by_item: str) -> ToolResult:
        """End the pending timer ``ref`` names (an id, else a label, in any case)."""
        key = ref.strip().casefold()
        with self._lock:
            live = self._live()
            found = [t for t in live if t.id == key] or [
                t for t in live if t.label and t.label.casefold() == key
            ]
            if len(found) == 1:
                found[0].cancelled_by = f"{found[0].named()} was cancelled by item {by_item[:8]}"
                found[0].token.set()
        if not found:
            known = "; ".join(t.named() for t in live) or "none is running"
            message = f"no timer is called {ref!r} (timers: {known})"
            return ToolResult.failed("invalid_arguments", message)
        if len(found) > 1:
            names = ", ".join(t.id for t in found)
            message = f"{len(found)} timers are labelled {ref!r} ({names}); name one by its id"
            return ToolResult.failed("invalid_arguments", message)
        (timer,) = found
        return ToolResult.ok(f"Cancelled {timer.named()}.", {"cancelled": timer.pending()})

    def list_timers(self) -> ToolResult:
        with self._lock:
            live = sorted(self._live(), key=lambda t: t.ends_at)
        if not live:
            return ToolResult.ok("No timers are running.", {"timers": []})
        said = "; ".join(f"{t.named()}: {duration(math.ceil(t.left_s()))} left" for t in live)
        count = "1 timer is" if len(live) == 1 else f"{len(live)} timers are"
        return ToolResult.ok(f"{count} running: {said}.", {"timers": [t.pending() for t in live]})

    def _live(self) -> list[Timer]:
        """The pending timers not cancelled yet (the lock is held): a cancelled one leaves
        the registry only when its handler has woken."""
        return [t for t in self._timers.values() if not t.token.is_set()]


def duration(seconds: float, adjective: bool = False) -> str:
    """``1 hour 5 minutes``, or as an adjective ``1 hour 5 minute`` (a 5 minute timer);
    whole seconds, at least one."""
    total = max(1, round(seconds))
    parts = []
    for unit, size in (("hour", 3600), ("minute", 60), ("second", 1)):
        n, total = divmod(total, size)
        if n:
            parts.append(f"{n} {unit}" + ("s" if n > 1 and not adjective else ""))
    return " ".join(parts)


def timer_capability(
    clock: Callable[[], float] = time.time,
    max_timers: int = MAX_TIMERS,
    pace: TimerTime | None = None,
    zone: tzinfo | None = None,
) -> Capability:
    """The ``timer`` capability with its own registry; ``clock`` dates the due times
    reported (in ``zone``, default the machine's), ``pace`` is what the timers wait on
    (default ``WallTime``)."""
    timers = Timers(clock, max_timers, pace, zone)
    return Capability(TIMER, timers.handle)
