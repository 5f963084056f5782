"""The frontend's ``{"retry": ID}``: the same call again, as a new item superseding the
failed one, and never a loop: a retried item is not retried twice, and the same call is
made at most ``max_attempts`` times in a row (a small model retries whatever fails; on
a call that cannot succeed it went on for ten retries in one conversation).

Real parts: the harness service and its thread, the SQLite journal, the in-process
transport with a capability that always fails and one that always answers.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.daemon.frontend.channel import Delegation
from venus.daemon.harness.core import SHORT_ID, Capture, HarnessSettings
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import State

SESSION = "s"
DOWN = Contract(name="down", idempotent=False, input_schema={"type": "object"})


def fail(ctx: Context) -> str:
    raise RuntimeError("the service is down")


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    numbers = itertools.count(1)
    made = Harness.open(
        tmp_path / "journal.sqlite3",
        [InProcessTransport([Capability(DOWN, fail)])],
        HarnessSettings(max_attempts=3),
        ids=lambda: f"{next(numbers):08x}" + "0" * 24,
    )
    made.start()
    yield made
    made.stop()


def decide(harness: Harness, action: str, target: str, **call: object) -> None:
    """What the frontend hands the harness for a span, and the harness done with it."""
    harness.delegate(
        Delegation(
            SESSION,
            0,
            str(call.get("name", action)),
            dict(call.get("arguments", {})),
            raw="",
            action=action,
            target=target,
        )
    )
    handled = threading.Event()
    harness.post(lambda core: handled.set())  # after the decision, on the harness thread
    assert handled.wait(10)


def items(harness: Harness) -> list[tuple[str, str | None, State]]:
    """(id, supersedes, state) of the session's items, oldest first."""
    found = harness.core.journal.items(session_id=SESSION)
    return [(i.id[:SHORT_ID], i.supersedes and i.supersedes[:SHORT_ID], i.state) for i in found][
        ::-1
    ]


def failed(harness: Harness, item_id: str) -> str:
    done = harness.wait(item_id, 10)
    assert done is not None and done.state is State.FAILED, done
    return item_id[:SHORT_ID]


def test_a_retry_makes_the_same_call_again_superseding_the_failed_item(
    harness: Harness,
) -> None:
    first = failed(harness, harness.submit(Capture("down", {"x": 1}, SESSION, item_id="f" * 32)))
    decide(harness, "retry", first)
    (_, old_link, _), (new, link, _) = items(harness)
    assert old_link is None and link == first
    again = harness.core.journal.find(new + "0" * 24)
    assert again is not None and (again.capability, dict(again.arguments)) == ("down", {"x": 1})
    failed(harness, again.id)


def test_an_item_is_retried_once_and_a_call_made_at_most_max_attempts_times_in_a_row(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    first = failed(harness, harness.submit(Capture("down", {"x": 1}, SESSION, item_id="f" * 32)))
    with caplog.at_level(logging.WARNING):
        decide(harness, "retry", first)
        decide(harness, "retry", first)  # the same failure again: superseded already
        assert "refused: 00000001" in caplog.text and "superseded it already" in caplog.text
        assert len(items(harness)) == 2
        second = failed(harness, "00000001" + "0" * 24)
        decide(harness, "retry", second)  # the third time the call is made
        third = failed(harness, "00000003" + "0" * 24)
        decide(harness, "retry", third)  # a fourth: refused
        assert "the same down call was made 3 times in a row" in caplog.text
    assert [link for _, link, _ in items(harness)] == [None, first, second]
    # another call in between starts the count again: a revision, then its retries
    decide(harness, "call", third, name="down", arguments={"x": 2})
    revised = failed(harness, "00000005" + "0" * 24)
    decide(harness, "retry", revised)
    assert items(harness)[-1][1] == revised
    # made, not refused; and waited for, so no call is still running at teardown
    failed(harness, "00000006" + "0" * 24)


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_the_daemons_harness_takes_max_attempts_from_its_config(
    tmp_path: Path, max_attempts: int
) -> None:
    from venus.daemon.config import parse_config
    from venus.daemon.run_cli import _open_harness

    cfg = parse_config({"harness": {"broker_url": "", "max_attempts": max_attempts}})
    made = _open_harness(cfg, tmp_path / "journal.sqlite3")  # what `venus run` starts
    assert made is not None
    try:
        bad = {"expression": "2 +"}  # the built-in calculator fails on it, every time
        last = failed(made, made.submit(Capture("calculator", bad, SESSION, item_id="a" * 32)))
        for _ in range(max_attempts - 1):
            decide(made, "retry", last)
            newest = made.core.journal.items(session_id=SESSION)[0]
            last = failed(made, newest.id)
        decide(made, "retry", last)  # one making too many: refused
        assert len(items(made)) == max_attempts
    finally:
        made.stop()
