"""The shipped broker config and ACL (systemd/mosquitto/) against a real mosquitto.

Each test starts mosquitto with ``venus.conf`` (paths and port substituted), the shipped
``acl`` and a password file made with ``mosquitto_passwd``; every node logs in as itself.
"""

from __future__ import annotations

import json
import os
import pwd
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.services import free_port, require_binary, wait_until

from venus.capabilities.mqtt_transport import MqttTransport
from venus.capabilities.transport import Accepted, CallRequest, Finished, TransportEvent
from venus.capabilities.worker import Context, Worker, capability
from venus.capabilities.worker_cli import read_credentials
from venus.errors import CapabilityError

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "systemd" / "mosquitto" / "venus.conf"
ACL = REPO / "systemd" / "mosquitto" / "acl"
WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it
QUIET_S = 0.5  # how long "never arrives" is watched, after a later message did arrive
ROOT = "venus/v1/nodes"
DAEMON = "daemon1"
USERS = ("daemon1", "w1", "w2", "rogue", "observer")
TLS_BLOCK = "#listener 8883\n"  # venus.conf's commented TLS listener starts here


@dataclass(frozen=True)
class Site:
    """A running mosquitto configured from venus.conf, and its users' credentials files."""

    port: int
    tls_port: int | None
    tls_ca: Path | None
    creds: dict[str, Path]
    log_path: Path

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def password(self, user: str) -> str:
        return read_credentials(self.creds[user])[1]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _config(tmp: Path, port: int, tls: tuple[int, Path] | None) -> str:
    """venus.conf with this test's port and files; the TLS block uncommented if asked."""
    plain, _, tls_block = CONF.read_text().partition(TLS_BLOCK)
    text = plain.replace("listener 1883 127.0.0.1", f"listener {port} 127.0.0.1")
    if tls is not None:
        tls_port, certs = tls
        lines = (TLS_BLOCK + tls_block).splitlines()
        text += "\n".join(line.removeprefix("#") for line in lines) + "\n"
        text = text.replace("listener 8883", f"listener {tls_port} 127.0.0.1")
        text = text.replace("/etc/mosquitto/certs", str(certs))
    text = text.replace("/etc/mosquitto/passwd", str(tmp / "passwd"))
    text = text.replace("/etc/mosquitto/acl", str(ACL))
    # A test broker: no persistence, everything logged (denied publishes are DEBUG), and
    # run as us (as root, mosquitto would switch to its own user and not read tmp_path).
    user = pwd.getpwuid(os.getuid()).pw_name
    return text + f"persistence false\nlog_dest stderr\nlog_type all\nuser {user}\n"


@contextmanager
def site(tmp: Path, tls: bool = False) -> Iterator[Site]:
    binary = require_binary("mosquitto", "mosquitto")
    passwd = require_binary("mosquitto_passwd", "mosquitto")
    creds: dict[str, Path] = {}
    for i, user in enumerate(USERS):
        password = f"{user}-secret-{i}"
        flags = ["-b", "-c"] if i == 0 else ["-b"]
        made = [passwd, *flags, str(tmp / "passwd"), user, password]
        subprocess.run(made, check=True, timeout=30)
        creds[user] = tmp / f"{user}.credentials"
        creds[user].write_text(f"{user}:{password}\n")
        creds[user].chmod(0o600)
    port, tls_port = free_port(), free_port() if tls else None
    certs = _make_certs(tmp / "certs") if tls else None
    tls_arg = (tls_port, certs) if tls_port is not None and certs is not None else None
    (tmp / "mosquitto.conf").write_text(_config(tmp, port, tls_arg))
    log_path = tmp / "mosquitto.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [binary, "-c", str(tmp / "mosquitto.conf")], stdout=log_file, stderr=log_file
        )
    try:
        ports = [p for p in (port, tls_port) if p is not None]

        def up() -> bool:
            return proc.poll() is not None or all(_port_open(p) for p in ports)

        wait_until(up, "mosquitto", WAIT_S)
        assert proc.poll() is None, f"mosquitto exited:\n{log_path.read_text()}"
        ca = certs / "ca.crt" if certs is not None else None
        yield Site(port, tls_port, ca, creds, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=WAIT_S)


def _make_certs(d: Path) -> Path:
    """A throwaway CA and a server certificate for 127.0.0.1, made with openssl."""
    openssl = require_binary("openssl", "openssl")
    d.mkdir()

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True, timeout=60)

    key = ["-newkey", "rsa:2048", "-nodes"]
    ca_ext = ["-addext", "basicConstraints=critical,CA:TRUE"]
    ca_ext += ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    run("req", "-x509", *key, "-days", "2", "-keyout", "ca.key", "-out", "ca.crt", *ca_ext,
        "-subj", "/CN=venus test CA")  # fmt: skip
    server = ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]
    run("req", "-new", *key, *server)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    ca = ["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"]
    run("x509", "-req", "-in", "server.csr", *ca, "-days", "2", "-extfile", "server.ext",
        "-out", "server.crt")  # fmt: skip
    return d


class Client:
    """A raw paho MQTT 5 client; what it receives goes to ``got`` as (topic, payload)."""

    def __init__(
        self, s: Site, user: str | None, password: str | None = None, client_id: str = ""
    ) -> None:
        self.got: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.connack: queue.Queue[Any] = queue.Queue()
        subscribed = threading.Event()
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        if user is not None:
            c.username_pw_set(user, s.password(user) if password is None else password)
        c.on_connect = lambda _c, _u, _f, reason, _p: self.connack.put(reason)
        c.on_message = lambda _c, _u, m: self.got.put((m.topic, bytes(m.payload)))
        c.on_subscribe = lambda *_: subscribed.set()
        self.subscribed, self.client = subscribed, c
        c.connect("127.0.0.1", s.port, keepalive=10)
        c.loop_start()
        self.reason = self.connack.get(timeout=WAIT_S)

    def subscribe(self, topic: str) -> None:
        self.client.subscribe(topic, qos=1)
        assert self.subscribed.wait(WAIT_S)

    def publish(self, topic: str, payload: bytes) -> None:
        """QoS 1, waits for the broker's PUBACK (sent for a denied publish too)."""
        self.client.publish(topic, payload, qos=1).wait_for_publish(WAIT_S)

    def next(self) -> tuple[str, bytes]:
        return self.got.get(timeout=WAIT_S)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


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
