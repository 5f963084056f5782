"""The shipped broker config and ACL (systemd/mosquitto/) against a real mosquitto.

Each test starts mosquitto with ``venus.conf`` (paths and port substituted), the shipped
``acl`` and a password file made with ``mosquitto_passwd``; every node logs in as itself.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.secure_broker import WAIT_S, Client, Site, site
from support.services import wait_until

from venus.capabilities.mqtt_transport import MqttTransport
from venus.capabilities.transport import Accepted, CallRequest, Finished, TransportEvent
from venus.capabilities.worker import Context, Worker, capability
from venus.capabilities.worker_cli import read_credentials
from venus.errors import CapabilityError

QUIET_S = 0.5  # how long "never arrives" is watched, after a later message did arrive
ROOT = "venus/v1/nodes"
DAEMON = "daemon1"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Site]:
    with site(tmp_path) as s:
        yield s


@pytest.fixture
def observer(broker: Site) -> Iterator[Client]:
    """The read-only ``observer`` user, subscribed to the whole venus tree."""
    c = Client(broker, "observer")
    assert not c.reason.is_failure, broker.log()
    c.subscribe("venus/v1/#")
    yield c
    c.close()


class Events:
    def __init__(self) -> None:
        self.q: queue.Queue[TransportEvent] = queue.Queue()

    def __call__(self, event: TransportEvent) -> None:
        self.q.put(event)

    def finished(self) -> Finished:
        """The next Finished, skipping Accepted / Progress."""
        while not isinstance(event := self.q.get(timeout=WAIT_S), Finished):
            assert isinstance(event, Accepted)
        return event


GATE = threading.Event()


@capability(description="Answers once the test opens the gate.")
def gated(ctx: Context, text: str) -> dict[str, Any]:
    GATE.wait(WAIT_S)
    return {"answer": text.upper()}


@contextmanager
def nodes(s: Site, url: str | None = None) -> Iterator[tuple[MqttTransport, Events, Worker]]:
    """Worker ``w1`` offering ``gated`` and the daemon's transport, each as its own user."""
    url = url or s.url
    tls = {"tls_ca": s.tls_ca} if s.tls_ca is not None else {}
    worker = Worker("w1", [gated], url, credentials=read_credentials(s.creds["w1"]), **tls)
    worker.start(WAIT_S)
    transport = MqttTransport(DAEMON, url, credentials=s.creds[DAEMON], **tls)
    events = Events()
    transport.start(events)
    try:
        wait_until(lambda: any(c.name == "gated" for c in transport.contracts()), "discovery")
        yield transport, events, worker
    finally:
        GATE.set()
        transport.stop()
        worker.stop(WAIT_S)


def call(transport: MqttTransport, item_id: str = "item-1") -> None:
    GATE.clear()
    transport.call(CallRequest(item_id, "gated", {"text": "hi"}, "s1", "kitchen",
                               time.time() + 60, 1))  # fmt: skip


def test_worker_serves_the_daemon_each_as_its_own_user(broker: Site) -> None:
    with nodes(broker) as (transport, events, _):
        call(transport)
        GATE.set()
        done = events.finished()
    assert done.status == "completed" and done.result.structured == {"answer": "HI"}
    assert transport.stats.dropped == 0


def test_a_node_writes_only_its_own_subtree(broker: Site, observer: Client) -> None:
    w1 = Client(broker, "w1", client_id="w2")  # asks for another node's client id
    try:
        for node in ("w2", DAEMON, "observer"):
            w1.publish(f"{ROOT}/{node}/status", b"online")
            w1.publish(f"{ROOT}/{node}/reply/{DAEMON}", b"{}")
        w1.publish(f"{ROOT}/w1/status", b"online")  # its own subtree: the control
        assert observer.next() == (f"{ROOT}/w1/status", b"online")
        with pytest.raises(queue.Empty):
            observer.got.get(timeout=QUIET_S)
    finally:
        w1.close()
    # The broker took the username as the client id: w1, not the w2 it asked for.
    assert "as w1 (p5" in broker.log() and " as w2 (" not in broker.log()
    assert "Denied PUBLISH from w1" in broker.log()


def test_the_observer_is_read_only(broker: Site, observer: Client) -> None:
    observer.publish(f"{ROOT}/observer/status", b"online")
    w1 = Client(broker, "w1")
    try:
        w1.publish(f"{ROOT}/w1/status", b"online")
        assert observer.next() == (f"{ROOT}/w1/status", b"online")
        with pytest.raises(queue.Empty):
            observer.got.get(timeout=QUIET_S)
    finally:
        w1.close()


def test_a_rogue_client_cannot_make_the_daemon_accept_a_result(
    broker: Site, observer: Client
) -> None:
    forged = {"v": 1, "item_id": "item-1", "event": "result", "status": "completed",
              "result": {"content": [{"type": "text", "text": "forged"}],
                         "structuredContent": {"answer": "FORGED"}, "isError": False}}  # fmt: skip
    payload = json.dumps(forged).encode()
    with nodes(broker) as (transport, events, _):
        call(transport)
        rogue = Client(broker, "rogue")
        try:
            rogue.publish(f"{ROOT}/rogue/reply/{DAEMON}", payload)  # allowed by the ACL
            rogue.publish(f"{ROOT}/w1/reply/{DAEMON}", payload)  # refused by the ACL
        finally:
            rogue.close()
        wait_until(lambda: transport.stats.dropped == 1, "the forged reply dropped", WAIT_S)
        GATE.set()  # the real answer
        done = events.finished()
        assert done.status == "completed" and done.result.structured == {"answer": "HI"}
        assert transport.stats.dropped == 1  # the one on w1's topic never reached it
    assert "Denied PUBLISH from rogue" in broker.log()
    seen = []
    while not observer.got.empty():
        seen.append(observer.got.get_nowait())
    assert (f"{ROOT}/rogue/reply/{DAEMON}", payload) in seen
    assert (f"{ROOT}/w1/reply/{DAEMON}", payload) not in seen


def test_wrong_password_and_anonymous_are_refused(
    broker: Site, caplog: pytest.LogCaptureFixture
) -> None:
    for user, password in (("w1", "not-the-password"), ("nobody", "x"), (None, None)):
        c = Client(broker, user, password)
        try:
            assert c.reason.is_failure, (user, c.reason)
        finally:
            c.close()
    bad = broker.creds["w1"].with_name("bad.credentials")
    bad.write_text("w1:wrong\n")
    bad.chmod(0o600)
    worker = Worker("w1", [gated], broker.url, credentials=read_credentials(bad))
    with pytest.raises(CapabilityError, match="not connected"):
        worker.start(2.0)
    transport = MqttTransport(DAEMON, broker.url, credentials=bad)
    transport.start(Events())
    try:
        wait_until(lambda: "refused us" in caplog.text, "the daemon's refusal", WAIT_S)
        assert not transport.connected and "Not authorized" in caplog.text
    finally:
        transport.stop()


def test_tls_listener_with_a_private_ca(tmp_path: Path) -> None:
    with site(tmp_path, tls=True) as s:
        url = f"mqtts://127.0.0.1:{s.tls_port}"
        with nodes(s, url) as (transport, events, _):
            call(transport)
            GATE.set()
            done = events.finished()
        assert done.status == "completed" and done.result.structured == {"answer": "HI"}
