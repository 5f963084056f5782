"""The built-in capabilities, through the in-process transport as the daemon runs them."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from venus.capabilities.builtin import (
    BUILTINS,
    CLOCK,
    builtin_transport,
    clock_capability,
    find_zone,
    local_zone,
    worker_concurrency,
)
from venus.capabilities.builtin.calculator import CALCULATOR
from venus.capabilities.builtin.timer import MAX_TIMERS, TIMER
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Context
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import CallRequest, Finished, TransportEvent

WAIT_S = 5.0
# Monday 30 November 2026, 13:05:09 UTC
NOON_ISH = datetime(2026, 11, 30, 13, 5, 9, tzinfo=timezone.utc).timestamp()
needs_tz = pytest.mark.skipif(
    find_zone("Asia/Tokyo") is None, reason="no time zone database (install tzdata)"
)


def call_clock(arguments: dict[str, Any], clock_at_s: float | None = None) -> Finished:
    """One call through ``builtin_transport``, as the daemon makes it."""
    done = threading.Event()
    finals: list[Finished] = []

    def sink(event: TransportEvent) -> None:
        if isinstance(event, Finished):
            finals.append(event)
            done.set()

    t = builtin_transport(clock_at_s=clock_at_s)
    t.start(sink)
    try:
        t.call(CallRequest("i1", "clock", arguments, "s1", "kitchen", time.time() + 60, 1))
        assert done.wait(WAIT_S)
    finally:
        t.stop(timeout_s=WAIT_S)
    (final,) = finals
    return final


def run(arguments: dict[str, Any], **kw: Any) -> ToolResult:
    """The handler alone, with a fixed time."""
    capability = clock_capability(now_s=lambda: NOON_ISH, **kw)
    request = CallRequest("i1", "clock", arguments, "s1", "kitchen", NOON_ISH + 60, 1)
    result = capability.handler(Context(request, arguments, threading.Event(), lambda p, m: None))
    assert isinstance(result, ToolResult)
    return result


def test_the_contract() -> None:
    assert [c.contract for c in BUILTINS] == [CLOCK, CALCULATOR, TIMER]
    assert CLOCK.idempotent and CLOCK.deliver == "when_idle" and CLOCK.evidence == "none"
    assert (CLOCK.freshness_s, CLOCK.timeout_s) == (60.0, 2.0)
    assert CLOCK.output_schema is not None
    assert Contract.from_tool(CLOCK.to_tool()) == CLOCK
    assert builtin_transport().contracts() == (CLOCK, CALCULATOR, TIMER)


def test_a_worker_serving_the_timer_gets_a_thread_per_timer() -> None:
    assert worker_concurrency(BUILTINS) == 4 + MAX_TIMERS
    assert worker_concurrency(BUILTINS[:2]) == 4


@needs_tz
def test_a_fixed_zone() -> None:
    result = run({"timezone": "Asia/Tokyo"})
    assert result.structured == {
        "iso": "2026-11-30T22:05:09+09:00",
        "date": "2026-11-30",
        "time": "22:05",
        "weekday": "Monday",
        "timezone": "Asia/Tokyo",
    }
    assert result.text() == "It is 22:05 on Monday, 30 November 2026 (Asia/Tokyo)."


@needs_tz
def test_through_the_transport() -> None:
    final = call_clock({"timezone": "Asia/Tokyo"})
    assert final.status == "completed"  # the output matched the output schema
    assert final.result.structured is not None
    now = datetime.fromisoformat(final.result.structured["iso"])
    assert now.utcoffset() == timedelta(hours=9)
    assert abs(now.timestamp() - time.time()) < 60


def test_offline_runs_stop_the_clock() -> None:
    """``venus demo`` and ``venus eval delegation`` read the clock at one instant, in UTC
    when no zone is asked, whenever and wherever they run (evaluation/delegation_env.py)."""
    from venus.evaluation.delegation_env import BENCH_CLOCK_S

    final = call_clock({}, clock_at_s=BENCH_CLOCK_S)
    assert final.status == "completed" and final.result.structured is not None
    assert final.result.structured["iso"] == "2026-01-05T09:30:00+00:00"
    assert final.result.text() == "It is 09:30 on Monday, 5 January 2026 (UTC)."
    assert call_clock({}, clock_at_s=NOON_ISH).result.text().startswith("It is 13:05 on Monday")
    live = call_clock({}).result.structured
    assert live is not None
    assert abs(datetime.fromisoformat(live["iso"]).timestamp() - time.time()) < 60


def test_utc_needs_no_time_zone_database() -> None:
    assert run({"timezone": "UTC"}).text() == "It is 13:05 on Monday, 30 November 2026 (UTC)."


def test_an_unknown_zone_fails_cleanly() -> None:
    result = run({"timezone": "Mars/Olympus_Mons"})
    assert result.is_error and result.error is not None
    assert result.error.code == "invalid_arguments" and not result.retryable
    assert "unknown time zone 'Mars/Olympus_Mons'" in result.error.message
    final = call_clock({"timezone": "../../etc/passwd"})
    assert final.status == "failed" and final.result.error is not None
    assert final.result.error.code == "invalid_arguments"


@pytest.mark.parametrize(
    ("arguments", "expected"), [({"timezone": 5}, "$.timezone"), ({"tz": "UTC"}, "'tz'")]
)
def test_arguments_outside_the_schema(arguments: dict[str, Any], expected: str) -> None:
    final = call_clock(arguments)
    assert final.status == "failed" and final.result.error is not None
    assert final.result.error.code == "invalid_arguments"
    assert expected in final.result.error.message


@needs_tz
def test_the_default_is_the_local_zone() -> None:
    result = run({}, local=lambda: local_zone({"TZ": ":Asia/Tokyo"}))
    assert result.structured is not None and result.structured["timezone"] == "Asia/Tokyo"
    assert result.structured["time"] == "22:05"


def test_an_unknown_local_zone_falls_back_to_utc_and_says_why(tmp_path: Path) -> None:
    result = run({}, local=lambda: local_zone({"TZ": "Nowhere/Zone"}))
    assert result.text() == (
        "It is 13:05 on Monday, 30 November 2026 "
        "(UTC; TZ='Nowhere/Zone' is not a time zone this machine knows)."
    )
    zone, name, note = local_zone({}, tmp_path / "localtime")
    assert (zone, name) == (timezone.utc, "UTC") and "no " in note


@needs_tz
def test_the_local_zone_from_etc_localtime(tmp_path: Path) -> None:
    paris = Path("/usr/share/zoneinfo/Europe/Paris")
    if not paris.exists():
        pytest.skip("no system time zone database")
    link = tmp_path / "localtime"
    link.symlink_to(paris)
    zone, name, note = local_zone({}, link)
    assert (name, note) == ("Europe/Paris", "")
    assert datetime.fromtimestamp(NOON_ISH, zone).strftime("%H:%M") == "14:05"
    copy = tmp_path / "copied"
    copy.write_bytes(paris.read_bytes())  # a copy, not a link: the zone, without its name
    zone, name, note = local_zone({}, copy)
    assert (name, note) == ("local", "")
    assert datetime.fromtimestamp(NOON_ISH, zone).strftime("%H:%M") == "14:05"
