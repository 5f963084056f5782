"""The delegation benchmark's world (``evaluation/delegation_env``): the real harness and
journal with the built-ins, the clock stopped and the timers on the sample clock, so that
a run repeats whenever and however fast it runs."""

from __future__ import annotations

import time
from pathlib import Path

from support.frontend import chunk_record

from venus.daemon.harness.core import Capture
from venus.daemon.harness.states import State
from venus.evaluation.delegation_env import bench_harness


def test_the_bench_harness_reads_a_stopped_clock(tmp_path: Path) -> None:
    """`venus demo` and `venus eval delegation` run the real harness and journal; its
    built-in clock reads BENCH_CLOCK_S, so a result the model reads repeats in every run."""
    for run in ("a", "b"):
        with bench_harness(tmp_path / f"{run}.sqlite3", []) as (harness, _):
            item_id = harness.submit(Capture("clock", {"timezone": "UTC"}, "s1"))
            item = harness.wait(item_id, 10)
            assert item is not None and item.state is State.COMPLETED, item
            result = harness.core.journal.result(item_id)
            assert result is not None
            assert result[1].text() == "It is 09:30 on Monday, 5 January 2026 (UTC)."


def test_a_timer_runs_out_on_the_sample_clock(tmp_path: Path) -> None:
    """A 30 s timer set in chunk 2 (0.5 s chunks) answers at the end of chunk 61 (sample
    time 31 s), a moment of wall time into the run: not before, and then at once,
    recorded before the next chunk asks for results (on the wall clock it would still
    be pending). Its id and due time repeat."""
    texts = []
    for run in ("a", "b"):
        with bench_harness(tmp_path / f"{run}.sqlite3", [], chunk_s=0.5) as (harness, advance):
            args = {"action": "set", "seconds": 30, "label": "eggs"}
            item_id = harness.submit(Capture("timer", args, "s1", chunk_index=2))
            for index in range(61):  # to the end of chunk 60: sample time 30.5 s
                advance(chunk_record(index=index, start_s=index * 0.5))
            item = harness.core.journal.find(item_id)
            assert item is not None and item.state is State.RUNNING, item
            advance(chunk_record(index=61, start_s=30.5))  # 31 s: 2 * 0.5 + 30
            item = harness.core.journal.find(item_id)
            assert item is not None and item.state is State.COMPLETED, item
            result = harness.core.journal.result(item_id)
            assert result is not None
            texts.append((result[1].text(), result[1].structured))
    assert texts[0][0] == "Your 30 second timer for eggs is done."
    assert texts[0][1] == {
        "timer": "t1", "label": "eggs", "seconds": 30.0, "due": "2026-01-05T09:30:30+00:00",
    }  # fmt: skip
    assert texts[0] == texts[1]


def test_a_long_timer_stays_pending_through_a_fast_run(tmp_path: Path) -> None:
    """An hour's timer stays pending through chunks run in a moment, and is cancelled
    when the sample ends (the harness stops): nothing outlives the run."""
    with bench_harness(tmp_path / "j.sqlite3", []) as (harness, advance):
        args = {"action": "set", "seconds": 3600}
        long = harness.submit(Capture("timer", args, "s1", chunk_index=0))
        for index in range(60):
            advance(chunk_record(index=index, start_s=float(index)))
        pending = harness.core.journal.find(long)
        assert pending is not None and pending.state is State.RUNNING, pending
        start = time.monotonic()
    assert time.monotonic() - start < 5.0  # stopping woke the timer's thread
