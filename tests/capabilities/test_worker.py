"""The worker SDK against a real mosquitto, driven by a raw paho client.

``Daemon`` below is written from ``docs/protocol.md`` alone (hand-built JSON, no venus
code), as a third-party daemon would be.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.services import Broker

from venus.capabilities.builtin import BUILTINS
from venus.capabilities.mqtt_socket import stop_loop
from venus.capabilities.transport import Accepted
from venus.capabilities.worker import Context, Worker, capability, schema_for
from venus.capabilities.worker_cli import load_capabilities, read_credentials
from venus.errors import CapabilityError

WAIT_S = 10.0
ROOT = "venus/v1/nodes"


class Daemon:
    """A raw MQTT 5 client playing daemon ``d1``; every message it sees goes to a queue."""

    def __init__(self, broker: Broker, node: str = "d1") -> None:
        self.node = node
        self.got: queue.Queue[tuple[str, bytes, bool]] = queue.Queue()
        subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=node, protocol=mqtt.MQTTv5)
        self.client.on_message = lambda _c, _u, m: self.got.put((m.topic, m.payload, m.retain))
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        self.client.subscribe(
            [(f"{ROOT}/+/status", 1), (f"{ROOT}/+/capabilities", 1), (f"{ROOT}/+/reply/{node}", 1)]
        )
        assert subscribed.wait(WAIT_S), broker.log()

    def close(self) -> None:
        self.client.disconnect()
        stop_loop(self.client)

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(WAIT_S)

    def call(
        self,
        capability: str,
        arguments: dict[str, Any],
        item_id: str | None = None,
        worker: str = "w1",
    ) -> str:
        item_id = item_id or uuid.uuid4().hex
        doc = {
            "v": 1,
            "item_id": item_id,
            "capability": capability,
            "arguments": arguments,
            "session_id": "s-1",
            "site_id": "kitchen",
            "deadline": time.time() + 60,
            "attempt": 1,
            "evidence": {},
            "reply_to": f"{ROOT}/{worker}/reply/{self.node}",
        }
        self.publish(f"{ROOT}/{self.node}/call/{capability}", json.dumps(doc).encode())
        return item_id

    def cancel(self, item_id: str, reason: str = "never mind") -> None:
        doc = {"v": 1, "item_id": item_id, "reason": reason}
        self.publish(f"{ROOT}/{self.node}/cancel", json.dumps(doc).encode())

    def next(self, topic: str, timeout_s: float = WAIT_S) -> tuple[bytes, bool]:
        """The next payload (and retain flag) on ``topic``, skipping other topics."""
        end = time.monotonic() + timeout_s
        while (left := end - time.monotonic()) > 0:
            try:
                t, payload, retain = self.got.get(timeout=left)
            except queue.Empty:
                break
            if t == topic:
                return payload, retain
        raise AssertionError(f"nothing on {topic} within {timeout_s} s")

    def replies(self, item_id: str, worker: str = "w1") -> list[dict[str, Any]]:
        """The replies for ``item_id`` up to its final result."""
        out: list[dict[str, Any]] = []
        while not out or out[-1]["event"] != "result":
            doc = json.loads(self.next(f"{ROOT}/{worker}/reply/{self.node}")[0])
            if doc["item_id"] == item_id:
                out.append(doc)
        return out

    def quiet(self, topic: str, wait_s: float = 0.5) -> None:
        with pytest.raises(AssertionError, match="nothing on"):
            self.next(topic, wait_s)


@pytest.fixture
def daemon(mosquitto: Broker) -> Iterator[Daemon]:
    d = Daemon(mosquitto)
    yield d
    d.close()


# capabilities used below --------------------------------------------------------------
@capability(description="Counts to n, reporting progress.", idempotent=True)
def count(ctx: Context, n: int = 3) -> dict[str, Any]:
    for i in range(1, n + 1):
        ctx.progress(i / n, f"step {i}")
    return {"n": n}


@capability(description="Waits until cancelled (at most 10 s).")
def wait(ctx: Context) -> str:
    ctx.cancelled.wait(10)
    ctx.check_cancelled()
    return "not cancelled"


GATE = threading.Event()


@capability(description="Waits for the test's gate.")
def gated(ctx: Context) -> str:
    GATE.wait(10)
    return "through"


@capability(name="shout")
async def shout_async(text: str, times: int = 1) -> str:
    """Upper-cases text."""
    return " ".join([text.upper()] * times)


def start_worker(broker: Broker, *extra: Any, node: str = "w1") -> Worker:
    worker = Worker(node, [*BUILTINS, count, wait, gated, shout_async, *extra], broker.url)
    worker.start(WAIT_S)
    return worker


@pytest.fixture
def worker(mosquitto: Broker, daemon: Daemon) -> Iterator[Worker]:
    w = start_worker(mosquitto)
    yield w
    GATE.set()
    w.stop(WAIT_S)
    GATE.clear()


# the decorator ------------------------------------------------------------------------
def test_schema_from_annotations() -> None:
    def f(
        ctx: Context,
        city: str,
        days: int = 1,
        units: Literal["metric", "imperial"] = "metric",
        tags: list[str] | None = None,
        extra: dict[str, float] | None = None,
        precise: bool = False,
        scale: float = 1.0,
    ) -> str:
        return city

    schema, context = schema_for(f)
    assert context == ("ctx",)
    assert schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "default": 1},
            "units": {"enum": ["metric", "imperial"], "default": "metric"},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
            },
            "extra": {
                "anyOf": [
                    {"type": "object", "additionalProperties": {"type": "number"}},
                    {"type": "null"},
                ],
                "default": None,
            },
            "precise": {"type": "boolean", "default": False},
            "scale": {"type": "number", "default": 1.0},
        },
        "additionalProperties": False,
        "required": ["city"],
    }
    assert shout_async.contract.description == "Upper-cases text."
    assert count.contract.idempotent is True


def test_unsupported_annotations_are_refused() -> None:
    def f(when: bytes) -> str:
        return ""

    with pytest.raises(CapabilityError, match="pass input_schema="):
        capability()(f)

    def g(**kwargs: int) -> str:
        return ""

    with pytest.raises(CapabilityError, match="kwargs"):
        capability()(g)
    given = capability(input_schema={"type": "object"})(g)
    assert given.contract.input_schema == {"type": "object"}


# over the broker ----------------------------------------------------------------------
def test_announces_and_answers_the_calculator(
    mosquitto: Broker, worker: Worker, daemon: Daemon
) -> None:
    assert daemon.next(f"{ROOT}/w1/status") == (b"online", False)  # live, not yet retained
    tools = json.loads(daemon.next(f"{ROOT}/w1/capabilities")[0])
    assert tools["v"] == 1
    names = {t["name"] for t in tools["capabilities"]}
    assert {"clock", "calculator", "count", "wait", "shout"} <= names

    late = Daemon(mosquitto, node="d2")  # a daemon arriving later sees the retained ones
    try:
        assert late.next(f"{ROOT}/w1/status") == (b"online", True)
        assert late.next(f"{ROOT}/w1/capabilities")[1] is True
    finally:
        late.close()

    item = daemon.call("calculator", {"expression": "2*(3+4)"})
    accepted, result = daemon.replies(item)
    assert accepted == {"v": 1, "item_id": item, "event": "accepted", "status": "working"}
    assert result["status"] == "completed"
    assert result["result"]["structuredContent"]["value"] == 14
    assert result["result"]["isError"] is False


def test_progress_async_and_invalid_arguments(worker: Worker, daemon: Daemon) -> None:
    item = daemon.call("count", {"n": 2})
    events = daemon.replies(item)
    assert [(e["event"], e.get("progress")) for e in events] == [
        ("accepted", None),
        ("progress", 0.5),
        ("progress", 1.0),
        ("result", None),
    ]
    assert events[1]["message"] == "step 1"
    assert events[-1]["result"]["structuredContent"] == {"n": 2}

    item = daemon.call("shout", {"text": "hi", "times": 2})
    assert daemon.replies(item)[-1]["result"]["content"][0]["text"] == "HI HI"

    item = daemon.call("count", {"n": "three"})
    (failed,) = daemon.replies(item)  # no accepted: refused at once
    assert failed["status"] == "failed"
    assert failed["result"]["error"]["code"] == "invalid_arguments"


def test_cancel_during_and_before_a_call(worker: Worker, daemon: Daemon) -> None:
    item = daemon.call("wait", {})
    first = json.loads(daemon.next(f"{ROOT}/w1/reply/d1")[0])
    assert (first["item_id"], first["event"]) == (item, "accepted")
    daemon.cancel(item, "the user said never mind")
    (result,) = daemon.replies(item)
    assert result["status"] == "cancelled"
    assert result["result"]["error"]["message"] == "the user said never mind"

    early = uuid.uuid4().hex
    daemon.cancel(early, "overtaken")
    daemon.call("wait", {}, item_id=early)
    (result,) = daemon.replies(early)  # at once, without running it
    assert result["status"] == "cancelled"
    assert result["result"]["error"] == {
        "code": "cancelled",
        "message": "overtaken",
        "retryable": False,
    }


def test_bad_messages_are_dropped_and_serving_goes_on(worker: Worker, daemon: Daemon) -> None:
    topic = f"{ROOT}/d1/call/calculator"
    daemon.publish(topic, b"not json")
    daemon.publish(topic, b'{"v": 2}')
    daemon.publish(topic, json.dumps({"v": 1, "item_id": "x"}).encode())
    daemon.publish(f"{ROOT}/d1/cancel", b"\xff\xfe")
    other = daemon.call("calculator", {"expression": "1+1"}, worker="w2")  # not for w1
    wrong = {  # calculator's payload on the clock's topic
        "v": 1,
        "item_id": "wrong-topic",
        "capability": "calculator",
        "arguments": {"expression": "1"},
        "session_id": "s",
        "site_id": "k",
        "deadline": time.time() + 60,
        "attempt": 1,
        "evidence": {},
        "reply_to": f"{ROOT}/w1/reply/d1",
    }
    daemon.publish(f"{ROOT}/d1/call/clock", json.dumps(wrong).encode())
    item = daemon.call("calculator", {"expression": "6*7"})
    assert daemon.replies(item)[-1]["result"]["structuredContent"]["value"] == 42
    assert worker.dropped["malformed"] == 5
    assert worker.dropped["other_worker"] == 1
    daemon.quiet(f"{ROOT}/w2/reply/d1")
    assert other


def test_duplicate_calls_are_answered_once(worker: Worker, daemon: Daemon) -> None:
    item = daemon.call("gated", {})
    daemon.call("gated", {}, item_id=item)  # redelivered while running: ignored
    deadline = time.monotonic() + WAIT_S
    while worker.dropped["duplicate"] < 1:  # seen as a duplicate while the call still runs
        assert time.monotonic() < deadline, "the redelivery was never seen"
        time.sleep(0.01)
    GATE.set()
    events = daemon.replies(item)
    assert [e["event"] for e in events] == ["accepted", "result"]
    daemon.call("gated", {}, item_id=item)  # redelivered after: the same result again
    (again,) = daemon.replies(item)
    assert again == events[-1]
    daemon.quiet(f"{ROOT}/w1/reply/d1")
    assert worker.dropped["duplicate"] == 2


@pytest.mark.parametrize("held_s", [0.0, 0.5])
def test_stop_cancels_in_flight_and_publishes_offline(
    mosquitto: Broker, daemon: Daemon, monkeypatch: pytest.MonkeyPatch, held_s: float
) -> None:
    """With ``held_s``, the race a local run once lost (1 in 4 runs): the daemon hears
    "accepted" and the worker stops before its dispatcher has queued the call. The
    transport answers it cancelled on the dispatcher's thread; that reply must leave
    before the disconnect. The dispatcher is held there ``held_s`` after "accepted"."""
    worker = start_worker(mosquitto)
    emit = worker._transport._emit

    def held_after_accepted(event: Any) -> None:
        emit(event)
        if isinstance(event, Accepted):
            time.sleep(held_s)

    monkeypatch.setattr(worker._transport, "_emit", held_after_accepted)
    item = daemon.call("wait", {})
    assert json.loads(daemon.next(f"{ROOT}/w1/reply/d1")[0])["event"] == "accepted"
    worker.stop(WAIT_S)
    (result,) = daemon.replies(item)
    assert result["status"] == "cancelled"
    assert daemon.next(f"{ROOT}/w1/status")[0] == b"offline"


def test_lost_connection_fires_the_will_and_reconnects(mosquitto: Broker, daemon: Daemon) -> None:
    worker = start_worker(mosquitto)
    try:
        assert daemon.next(f"{ROOT}/w1/status")[0] == b"online"
        worker._client._sock.close()  # type: ignore[union-attr]  # gone without DISCONNECT
        assert daemon.next(f"{ROOT}/w1/status")[0] == b"offline"  # the broker's last will
        assert daemon.next(f"{ROOT}/w1/status")[0] == b"online"  # paho reconnected
        assert daemon.next(f"{ROOT}/w1/capabilities")[0]
        assert worker._ready.wait(WAIT_S)
        item = daemon.call("calculator", {"expression": "2+2"})
        assert daemon.replies(item)[-1]["result"]["structuredContent"]["value"] == 4
    finally:
        worker.stop(WAIT_S)


# the command --------------------------------------------------------------------------
def worker_process(broker: Broker, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "venus.capabilities.worker_cli"]
    return subprocess.Popen(
        [*command, "venus.capabilities.builtin", "--broker", broker.url, *args],
        stderr=subprocess.PIPE,
        text=True,
    )


def test_command_serves_builtins_and_stops_on_sigterm(mosquitto: Broker, daemon: Daemon) -> None:
    proc = worker_process(mosquitto, "--node-id", "w1")
    try:
        assert daemon.next(f"{ROOT}/w1/status", 30)[0] == b"online"
        tools = json.loads(daemon.next(f"{ROOT}/w1/capabilities")[0])
        assert {t["name"] for t in tools["capabilities"]} == {"clock", "calculator", "timer"}
        item = daemon.call("calculator", {"expression": "2*(3+4)"})
        assert daemon.replies(item)[-1]["result"]["structuredContent"]["value"] == 14
        proc.send_signal(signal.SIGTERM)
        assert daemon.next(f"{ROOT}/w1/status")[0] == b"offline"
        _, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
        assert "offers clock, calculator" in err
    finally:
        proc.kill()
        proc.wait(WAIT_S)


def test_killed_worker_process_fires_the_will(mosquitto: Broker, daemon: Daemon) -> None:
    proc = worker_process(mosquitto, "--node-id", "w7")
    try:
        assert daemon.next(f"{ROOT}/w7/status", 30)[0] == b"online"
        proc.kill()
        assert daemon.next(f"{ROOT}/w7/status")[0] == b"offline"
    finally:
        proc.kill()
        proc.wait(WAIT_S)


def test_loading_and_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert [c.contract.name for c in load_capabilities("venus.capabilities.builtin")] == [
        "clock",
        "calculator",
        "timer",
    ]
    (tmp_path / "my_tools.py").write_text(
        "from venus.capabilities.worker import capability\n"
        "@capability()\n"
        "def hello(name: str) -> str:\n"
        "    return 'hello ' + name\n"
        "@capability()\n"
        "def bye() -> str:\n"
        "    return 'bye'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert {c.contract.name for c in load_capabilities("my_tools")} == {"hello", "bye"}
    assert [c.contract.name for c in load_capabilities("my_tools:bye")] == ["bye"]
    with pytest.raises(CapabilityError, match="no attribute"):
        load_capabilities("my_tools:nope")
    with pytest.raises(CapabilityError, match="cannot import"):
        load_capabilities("no_such_module_here")

    secret = tmp_path / "creds"
    secret.write_text("w1:s3cret:x\n")
    secret.chmod(0o640)
    with pytest.raises(CapabilityError, match="chmod 600"):
        read_credentials(secret)
    secret.chmod(0o600)
    assert read_credentials(secret) == ("w1", "s3cret:x")
    secret.write_text("no colon\n")
    with pytest.raises(CapabilityError, match="username:password"):
        read_credentials(secret)
    assert os.stat(secret).st_mode & 0o077 == 0


def test_health_and_events_for_observers(worker: Worker, daemon: Daemon) -> None:
    daemon.client.subscribe([(f"{ROOT}/w1/health", 1), (f"{ROOT}/w1/events", 1)])
    health, retained = daemon.next(f"{ROOT}/w1/health")
    first = json.loads(health)
    assert retained and first["v"] == 1 and first["state"] == "serving"
    item_id = daemon.call("count", {"n": 2})  # its replies are skipped by next() below
    events = [json.loads(daemon.next(f"{ROOT}/w1/events")[0]) for _ in range(2)]
    assert [(e["event"], e["item_id"], e["daemon"]) for e in events] == [
        ("accepted", item_id, "d1"),
        ("finished", item_id, "d1"),
    ]
    assert events[1]["status"] == "completed" and events[1]["at"] >= first["at"]
    after = json.loads(daemon.next(f"{ROOT}/w1/health")[0])
    assert after["answered"] == first["answered"] + 1 and after["in_flight"] == 0
