"""``venus doctor``'s broker check: a TCP connect, then an MQTT 5 CONNECT and its CONNACK.

Connects as ``<node_id>-doctor``, never as the daemon's own client id, which would make
the broker disconnect a running daemon.
"""

from __future__ import annotations

import socket
import threading
from typing import Any
from urllib.parse import urlsplit

from venus.capabilities.mqtt_socket import DEFAULT_PORTS
from venus.daemon.config.schema import HarnessConfig
from venus.daemon.doctor_checks import Check


def check_broker(harness: HarnessConfig, timeout_s: float = 3.0) -> Check:
    """TCP connect to ``harness.broker_url``, then an MQTT 5 CONNECT and its CONNACK."""
    url = harness.broker_url
    if not url:
        return Check(
            "broker",
            "skipped",
            'no broker configured (harness.broker_url = ""): built-in capabilities only',
        )
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or DEFAULT_PORTS[parts.scheme]
    details: dict[str, Any] = {"url": url, "host": host, "port": port}
    fix = (
        "start the broker (`systemctl status mosquitto`) or correct harness.broker_url; "
        '"" runs built-in capabilities only'
    )
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e)).lower()
        return Check("broker", "fail", f"{url}: cannot connect ({reason})", details, fix=fix)
    try:
        reason_code = _mqtt_connect(harness, host, port, parts.scheme, parts.path, timeout_s)
    except (OSError, ValueError) as e:
        return Check(
            "broker",
            "fail",
            f"{url}: TCP works, MQTT connect failed: {e}",
            details,
            fix="check the scheme (mqtts:// needs TLS), harness.tls_* and harness.credentials_file",
        )
    if reason_code is None:
        return Check(
            "broker",
            "fail",
            f"{url}: TCP works but no MQTT answer in {timeout_s:g} s",
            details,
            fix="is this port an MQTT listener? check harness.broker_url",
        )
    details["connack"] = reason_code
    if reason_code != "Success":
        return Check(
            "broker",
            "fail",
            f"{url}: the broker refused the connection ({reason_code})",
            details,
            fix="check harness.credentials_file and the broker's ACL",
        )
    return Check("broker", "ok", f"{url}: reachable, MQTT 5 CONNECT accepted", details)


def _mqtt_connect(
    harness: HarnessConfig, host: str, port: int, scheme: str, path: str, timeout_s: float
) -> str | None:
    """The CONNACK reason ("Success", "Not authorized", ...), None if none came in time."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

    websockets = scheme in ("ws", "wss")
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        # Not the daemon's own id: a second client with it would disconnect the daemon.
        client_id=f"{harness.node_id}-doctor",
        protocol=MQTTProtocolVersion.MQTTv5,
        transport="websockets" if websockets else "tcp",
        reconnect_on_failure=False,
    )
    client.connect_timeout = timeout_s
    if websockets:
        client.ws_set_options(path=path or "/mqtt")
    if scheme in ("mqtts", "wss"):
        client.tls_set(
            ca_certs=str(harness.tls_ca) if harness.tls_ca else None,
            certfile=str(harness.tls_cert) if harness.tls_cert else None,
            keyfile=str(harness.tls_key) if harness.tls_key else None,
        )
    if harness.credentials_file is not None:
        user, _, password = harness.credentials_file.read_text().strip().partition(":")
        client.username_pw_set(user, password or None)
    answered = threading.Event()
    result: list[str] = []

    def on_connect(_c: Any, _u: Any, _f: Any, reason_code: Any, _p: Any) -> None:
        result.append(str(reason_code))
        answered.set()

    def on_disconnect(_c: Any, _u: Any, _f: Any, reason_code: Any, _p: Any) -> None:
        if not result:
            result.append(f"disconnected: {reason_code}")
        answered.set()

    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    try:
        client.connect(host, port, keepalive=harness.keepalive_s)
        client.loop_start()
        # Read before finally: our own disconnect() below calls on_disconnect.
        return result[0] if answered.wait(timeout_s) else None
    finally:
        client.disconnect()
        client.loop_stop()
