"""The MQTT transport against a real mosquitto and a minimal worker written from
docs/protocol.md with raw paho (not the worker SDK)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.services import Broker, require_binary, wait_until

from venus.capabilities.mqtt_socket import stop_loop
from venus.capabilities.mqtt_transport import MqttTransport
from venus.capabilities.transport import (
    Accepted,
    CallRequest,
    Finished,
    Progress,
    ProviderLost,
    TransportEvent,
)

WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it
ROOT = "venus/v1/nodes"
DAEMON = "daemon1"
ECHO_TOOL = {
    "name": "echo",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "_meta": {"venus/idempotent": True},
}


class Worker:
    """A worker as docs/protocol.md describes it: will, online, capabilities, subscriptions.
    The test answers its calls by hand."""

    def __init__(self, broker: Broker, node: str, tools: list[dict[str, Any]]) -> None:
        self.node, self.tools = node, tools
        self.calls: queue.Queue[dict[str, Any]] = queue.Queue()
        self.cancels: queue.Queue[dict[str, Any]] = queue.Queue()
        self.ready = threading.Event()  # subscribed (set again on every reconnect)
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=node, protocol=mqtt.MQTTv5)
        c.will_set(f"{ROOT}/{node}/status", b"offline", qos=1, retain=True)
        c.reconnect_delay_set(1, 1)
        c.on_connect = self._on_connect
        c.on_subscribe = lambda *_: self.ready.set()
        c.on_message = self._on_message
        self.client = c
        c.connect(broker.host, broker.port, keepalive=5)
        c.loop_start()
        assert self.ready.wait(WAIT_S), broker.log()

    def _on_connect(self, c: mqtt.Client, *_: Any) -> None:
        c.publish(f"{ROOT}/{self.node}/status", b"online", qos=1, retain=True)
        doc = {"v": 1, "rev": 1, "capabilities": self.tools}
        c.publish(f"{ROOT}/{self.node}/capabilities", json.dumps(doc), qos=1, retain=True)
        subs = [(f"{ROOT}/+/call/{t['name']}", 1) for t in self.tools]
        c.subscribe([*subs, (f"{ROOT}/+/cancel", 1)])

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        doc = json.loads(msg.payload)
        if msg.topic.endswith("/cancel"):
            self.cancels.put(doc)
        elif doc["reply_to"].startswith(f"{ROOT}/{self.node}/reply/"):
            self.calls.put(doc)

    def reply(self, call: dict[str, Any], event: str, status: str = "working", **kw: Any) -> None:
        doc = {"v": 1, "item_id": call["item_id"], "event": event, "status": status, **kw}
        self.publish_raw(call["reply_to"], json.dumps(doc).encode())

    def result(self, call: dict[str, Any], status: str, text: str) -> None:
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
        if status == "completed":
            result.update(structuredContent={"text": text}, isError=False)
        else:
            result.update(isError=True, error={"code": status, "message": text, "retryable": False})
        self.reply(call, "result", status, result=result)

    def publish_raw(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(WAIT_S)

    def kill(self) -> None:
        """Close the socket without DISCONNECT, as a crash does: the broker sends the will."""
        stop_loop(self.client)
        sock = self.client.socket()
        assert sock is not None
        sock.close()

    def stop(self) -> None:
        self.client.disconnect()
        stop_loop(self.client)


class Events:
    def __init__(self) -> None:
        self.q: queue.Queue[TransportEvent] = queue.Queue()

    def __call__(self, event: TransportEvent) -> None:
        self.q.put(event)

    def next(self) -> TransportEvent:
        return self.q.get(timeout=WAIT_S)

    def none_within(self, seconds: float) -> None:
        with pytest.raises(queue.Empty):
            self.q.get(timeout=seconds)


@pytest.fixture
def daemon(mosquitto: Broker) -> Iterator[tuple[MqttTransport, Events]]:
    transport = MqttTransport(DAEMON, mosquitto.url, keepalive_s=5)
    events = Events()
    transport.start(events)
    wait_until(lambda: transport.connected, "the transport's connection", WAIT_S)
    yield transport, events
    transport.stop()


@pytest.fixture
def worker(mosquitto: Broker) -> Iterator[Worker]:
    w = Worker(mosquitto, "w1", [ECHO_TOOL])
    yield w
    w.stop()


def request(item_id: str = "item-1", capability: str = "echo") -> CallRequest:
    import time

    return CallRequest(item_id, capability, {"text": "hi"}, "s1", "kitchen", time.time() + 60, 1)


def names(transport: MqttTransport) -> set[str]:
    return {c.name for c in transport.contracts()}


def routed(transport: MqttTransport, worker: Worker) -> dict[str, Any]:
    wait_until(lambda: "echo" in names(transport), "discovery of echo", WAIT_S)
    transport.call(request())
    return worker.calls.get(timeout=WAIT_S)


def test_a_call_answered_reaches_on_event_in_order(daemon: Any, worker: Worker) -> None:
    transport, events = daemon
    call = routed(transport, worker)
    assert call["reply_to"] == f"{ROOT}/w1/reply/{DAEMON}"
    assert call["capability"] == "echo" and call["arguments"] == {"text": "hi"}
    worker.reply(call, "accepted")
    worker.reply(call, "progress", progress=0.5, message="halfway")
    worker.result(call, "completed", "hi")
    assert events.next() == Accepted("item-1")
    assert events.next() == Progress("item-1", 0.5, "halfway")
    done = events.next()
    assert isinstance(done, Finished) and done.status == "completed"
    assert done.result.structured == {"text": "hi"}
    worker.result(call, "completed", "again")  # a duplicate final
    events.none_within(0.5)
    assert transport.stats.dropped == 1 and transport.stats.accepted == 3


def test_replies_from_another_node_or_malformed_are_dropped(
    daemon: Any, worker: Worker, mosquitto: Broker
) -> None:
    transport, events = daemon
    call = routed(transport, worker)
    rogue = Worker(mosquitto, "rogue", [])
    try:
        doc = {"v": 1, "item_id": "item-1", "event": "result", "status": "completed",
               "result": {"content": [], "isError": False}}  # fmt: skip
        rogue.publish_raw(f"{ROOT}/rogue/reply/{DAEMON}", json.dumps(doc).encode())
    finally:
        rogue.stop()
    worker.publish_raw(call["reply_to"], b"{not json")
    worker.publish_raw(call["reply_to"], json.dumps({"v": 1, "item_id": "item-1"}).encode())
    wait_until(lambda: transport.stats.dropped == 3, "three drops", WAIT_S)
    events.none_within(0.2)
    worker.result(call, "completed", "hi")  # the real answer still counts
    done = events.next()
    assert isinstance(done, Finished) and done.status == "completed"


def test_completed_result_outside_the_output_schema_fails(daemon: Any, worker: Worker) -> None:
    transport, events = daemon
    call = routed(transport, worker)
    result = {"content": [], "structuredContent": {"text": 3}, "isError": False}
    worker.reply(call, "result", "completed", result=result)
    done = events.next()
    assert isinstance(done, Finished) and done.status == "failed"
    assert done.result.error is not None and done.result.error.code == "invalid_output"


def test_no_worker_fails_no_provider_retryable(daemon: Any) -> None:
    transport, events = daemon
    transport.call(request(capability="nothing"))
    done = events.next()
    assert isinstance(done, Finished) and done.status == "failed"
    assert done.result.error is not None and done.result.error.code == "no_provider"
    assert done.result.retryable


def test_cancel_is_published_and_the_cancelled_result_arrives(daemon: Any, worker: Worker) -> None:
    transport, events = daemon
    call = routed(transport, worker)
    worker.reply(call, "accepted")
    assert events.next() == Accepted("item-1")
    transport.cancel("item-1", "never mind")
    cancel = worker.cancels.get(timeout=WAIT_S)
    assert cancel == {"v": 1, "item_id": "item-1", "reason": "never mind"}
    worker.result(call, "cancelled", "never mind")
    done = events.next()
    assert isinstance(done, Finished) and done.status == "cancelled"


def test_discovery_and_worker_loss(daemon: Any, mosquitto: Broker) -> None:
    transport, events = daemon
    w2 = Worker(mosquitto, "w2", [ECHO_TOOL, {**ECHO_TOOL, "name": "clock"}])
    wait_until(lambda: names(transport) == {"echo", "clock"}, "discovery", WAIT_S)
    transport.call(request("a"))
    transport.call(request("b"))
    assert {w2.calls.get(timeout=WAIT_S)["item_id"] for _ in range(2)} == {"a", "b"}
    w2.kill()
    lost = events.next()
    assert isinstance(lost, ProviderLost) and set(lost.item_ids) == {"a", "b"}
    assert "w2" in lost.reason
    assert names(transport) == set()
    transport.call(request("c"))  # nobody left
    done = events.next()
    assert isinstance(done, Finished) and done.result.error is not None
    assert done.result.error.code == "no_provider"


def test_least_loaded_worker_is_chosen(daemon: Any, worker: Worker, mosquitto: Broker) -> None:
    transport, _ = daemon
    routed(transport, worker)  # item-1 on w1
    w2 = Worker(mosquitto, "w2", [ECHO_TOOL])
    try:
        wait_until(lambda: _online(transport) == 2, "w2", WAIT_S)
        transport.call(request("item-2"))
        assert w2.calls.get(timeout=WAIT_S)["item_id"] == "item-2"
    finally:
        w2.stop()


def _online(transport: MqttTransport) -> int:
    return sum(w.online and bool(w.contracts) for w in transport._workers.values())


def test_broker_restart_mid_call(
    daemon: Any, worker: Worker, mosquitto: Broker, tmp_path: Path
) -> None:
    transport, events = daemon
    call = routed(transport, worker)
    worker.reply(call, "accepted")
    assert events.next() == Accepted("item-1")
    worker.ready.clear()
    # A crash: SIGTERM would make mosquitto publish the workers' wills as it shuts down,
    # and the call would come back as ProviderLost (see test_broker_shutdown_fires_wills).
    mosquitto.process.kill()
    mosquitto.process.wait(timeout=WAIT_S)
    wait_until(lambda: not transport.connected, "the transport noticing", WAIT_S)
    transport.call(request("item-2"))  # while disconnected
    refused = events.next()
    assert isinstance(refused, Finished) and refused.item_id == "item-2"
    assert refused.result.error is not None and refused.result.error.code == "no_provider"
    log = (tmp_path / "restart.log").open("wb")
    binary = require_binary("mosquitto", "mosquitto")
    conf = mosquitto.log_path.with_name("mosquitto.conf")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=log)
    try:
        wait_until(lambda: transport.connected, "the transport reconnecting", 3 * WAIT_S)
        assert worker.ready.wait(3 * WAIT_S)
        wait_until(lambda: "echo" in names(transport), "rediscovery", WAIT_S)
        worker.result(call, "completed", "hi")
        done = events.next()
        assert isinstance(done, Finished) and done.item_id == "item-1"
        assert done.status == "completed"
        assert transport.stats.connects == 2
    finally:
        worker.stop()
        transport.stop()
        proc.terminate()
        proc.wait(timeout=WAIT_S)
        log.close()


def test_broker_shutdown_fires_wills(daemon: Any, worker: Worker, mosquitto: Broker) -> None:
    """mosquitto sends the wills of its clients when it shuts down: the calls in flight
    are reported lost (the harness retries the idempotent ones) unless the daemon's own
    connection closed first, in which case they wait for the worker's reply."""
    transport, events = daemon
    routed(transport, worker)
    mosquitto.process.terminate()
    mosquitto.process.wait(timeout=WAIT_S)
    wait_until(lambda: not transport.connected, "the transport noticing", WAIT_S)
    try:
        lost = events.q.get(timeout=0.5)
    except queue.Empty:
        return  # our connection closed before the will reached us
    assert lost == ProviderLost(("item-1",), "worker w1 went offline with the call in flight")
    assert transport.contracts() == ()


def test_cleared_status_is_a_loss_and_bad_capabilities_are_ignored(
    daemon: Any, worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    transport, events = daemon
    routed(transport, worker)
    bad = f"{ROOT}/w1/capabilities"
    worker.client.publish(bad, b'{"v": 1, "rev": 2}', qos=1, retain=True).wait_for_publish(WAIT_S)
    worker.client.publish(bad, b"\xff", qos=1).wait_for_publish(WAIT_S)
    ignored = "ignored the capabilities of w1"
    wait_until(lambda: caplog.text.count(ignored) == 2, "two bad lists logged", WAIT_S)
    assert names(transport) == {"echo"}  # the last good list stays
    status = f"{ROOT}/w1/status"
    worker.client.publish(status, b"", qos=1, retain=True).wait_for_publish(WAIT_S)
    lost = events.next()
    assert lost == ProviderLost(("item-1",), "worker w1 cleared its status with the call in flight")
    assert names(transport) == set()
