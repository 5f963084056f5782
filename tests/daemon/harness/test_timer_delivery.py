"""A timer through the real harness with the built-ins: its item runs until the timer is
due, then its late result is offered to the frontend (even mid-reply); a cancel ends it
with nothing offered; ``venus call timer`` prints the result once the timer is done."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from venus.capabilities.builtin import builtin_transport
from venus.daemon.harness.core import Capture
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import State

SESSION = "kitchen"
WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it
VENUS = Path(sys.executable).with_name("venus")


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness.open(tmp_path / "journal.sqlite3", [builtin_transport()])
    h.start()
    try:
        yield h
    finally:
        h.stop()


def settled(harness: Harness) -> None:
    """Wait until the harness thread has run every command posted so far."""
    done = threading.Event()
    harness.post(lambda core: done.set())
    assert done.wait(WAIT_S), "the harness thread is stuck"


def state(harness: Harness, item_id: str) -> State:
    item = harness.core.journal.find(item_id)
    assert item is not None
    return item.state


def test_a_due_timer_is_offered_as_a_late_result(harness: Harness) -> None:
    began = time.monotonic()
    item_id = harness.submit(
        Capture("timer", {"action": "set", "seconds": 1, "label": "tea"}, SESSION)
    )
    settled(harness)
    assert state(harness, item_id) is State.RUNNING
    assert harness.results(SESSION, 0, idle=True) == []  # nothing to say yet
    item = harness.wait(item_id, WAIT_S)
    assert item is not None and item.state is State.COMPLETED
    assert time.monotonic() - began >= 1.0
    (offer,) = harness.results(SESSION, 1, idle=False)  # offered while the assistant speaks
    assert offer.item_id == item_id
    said = json.loads(offer.text)
    assert (said["capability"], said["status"]) == ("timer", "completed")
    assert said["result"] == "Your 1 second timer for tea is done."
    assert harness.results(SESSION, 2, idle=True) == []  # offered once


def test_a_cancelled_timer_is_never_offered(harness: Harness) -> None:
    item_id = harness.submit(Capture("timer", {"action": "set", "seconds": 30}, SESSION))
    settled(harness)
    assert state(harness, item_id) is State.RUNNING
    harness.cancel(item_id, "the user said never mind")
    item = harness.wait(item_id, WAIT_S)
    assert item is not None and item.state is State.CANCELLED
    # the timer is gone from the capability too, not just from the journal
    listed = harness.submit(Capture("timer", {"action": "list"}, SESSION))
    listing = harness.wait(listed, WAIT_S)
    assert listing is not None and listing.state is State.COMPLETED
    final = harness.core.journal.result(listed)
    assert final is not None and final[1].structured == {"timers": []}
    settled(harness)
    offers = harness.results(SESSION, 0, idle=True)
    assert [o.item_id for o in offers] == [listed]
    path = [t.new for t in harness.core.journal.transitions(item_id)]
    assert path == [State.QUEUED, State.RUNNING, State.CANCELLED]


def test_venus_call_prints_the_timer_once_it_is_done(tmp_path: Path) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [str(VENUS), "call", "timer", "--args", '{"action": "set", "seconds": 1}',
         "--journal", str(tmp_path / "j" / "journal.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert time.monotonic() - began >= 1.0
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed"
    assert out["result"]["content"] == [{"type": "text", "text": "Your 1 second timer is done."}]
    assert out["result"]["structuredContent"]["timer"] == "t1"


def test_the_model_cancels_pending_work_by_its_capabilitys_name(harness: Harness) -> None:
    """The model sees an item's id only in its result; pending work is named by what it
    does: ``{"cancel": "timer"}`` cancels the newest timer not yet said."""
    from venus.daemon.frontend.channel import Delegation

    older = harness.submit(Capture("timer", {"action": "set", "seconds": 30}, SESSION))
    newer = harness.submit(Capture("timer", {"action": "set", "seconds": 40}, SESSION))
    settled(harness)
    cancel = '{"cancel": "timer"}'
    harness.delegate(Delegation(SESSION, 3, "cancel", {}, cancel, action="cancel", target="timer"))
    item = harness.wait(newer, WAIT_S)
    assert item is not None and item.state is State.CANCELLED
    assert state(harness, older) is State.RUNNING  # only the newest
    other = Delegation("another", 3, "cancel", {}, cancel, action="cancel", target="timer")
    harness.delegate(other)  # another session's timers are out of reach
    settled(harness)
    assert state(harness, older) is State.RUNNING
    harness.cancel(older, "test over")
