"""A mosquitto started from the shipped ``systemd/mosquitto`` config and ACL, with a
password file made by ``mosquitto_passwd`` (every node logs in as itself), and a raw
paho client for the tests that play a user by hand."""

from __future__ import annotations

import os
import pwd
import queue
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from support.services import free_port, require_binary, wait_until
from venus.capabilities.credentials import read_credentials
from venus.capabilities.mqtt_socket import stop_loop

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "systemd" / "mosquitto" / "venus.conf"
ACL = REPO / "systemd" / "mosquitto" / "acl"
WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it
USERS = ("daemon1", "w1", "w2", "rogue", "observer", "homeassistant")
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
        stop_loop(self.client)
