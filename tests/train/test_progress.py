"""The progress line's pace: seconds a step over the recent steps, so a pause fades."""

from __future__ import annotations

import pytest

from venus.train.progress import Pace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_weighs_on_the_rate_only_while_it_is_in_the_window() -> None:
    clock = Clock()
    pace = Pace(500, window_s=60.0, clock=clock)  # resumed at step 500
    step = 500
    for _ in range(12):  # 5 s a step, shown every step
        clock.now += 5.0
        step += 1
        assert pace.rate(step) == pytest.approx(5.0)
    clock.now += 600.0  # stopped for ten minutes, then one more step
    step += 1
    assert pace.rate(step) > 50.0
    for _ in range(30):  # a minute and a half of steps at 3 s
        clock.now += 3.0
        step += 1
        rate = pace.rate(step)
    assert rate == pytest.approx(3.0)  # the pause has left the window
    assert len(pace.marks) <= 60.0 / 3.0 + 2


def test_the_first_line_counts_from_where_the_run_resumed() -> None:
    clock = Clock()
    pace = Pace(1750, clock=clock)
    clock.now += 8.0
    assert pace.rate(1752) == pytest.approx(4.0)
