"""``/metrics`` and ``/healthz`` over HTTP, on ``service.metrics_address``.

One ``ThreadingHTTPServer`` on a daemon thread serves both paths: ``/metrics`` is the
Prometheus text exposition of a ``Metrics``; ``/healthz`` is a small JSON verdict:

- ``stuck`` (503): no chunk for longer than ``stall_after_s``;
- ``down`` (503): a required device (microphone, speaker) is lost or ended;
- ``degraded`` (200): the camera is gone, or the MQTT broker is not connected;
- ``ok`` (200) otherwise.

The daemon runs without the endpoint when its port is taken: ``serve_metrics`` logs an
ERROR naming the address and the config key, and returns None.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from venus.daemon.service.metrics import Metrics
from venus.errors import ServiceError

__all__ = ["REQUIRED_DEVICES", "Health", "MetricsServer", "serve_metrics"]

log = logging.getLogger(__name__)

STALL_AFTER_S = 10.0  # no chunk for this long: stuck (about 10 chunk periods)
REQUIRED_DEVICES = frozenset({"microphone", "speaker"})  # without these the loop is useless
GONE = frozenset({"lost", "ended"})
CONFIG_KEY = "service.metrics_address"
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Verdict:
    status: str  # ok | degraded | stuck | down
    http: HTTPStatus
    report: dict[str, Any]  # the /healthz body


class Health:
    """Judges the daemon from ``metrics`` and a stall measure.

    ``stalled_s``: seconds since the loop last made progress (the watchdog's); defaults
    to the time since the last chunk ``metrics`` recorded.
    """

    def __init__(
        self,
        metrics: Metrics,
        stalled_s: Callable[[], float] | None = None,
        stall_after_s: float = STALL_AFTER_S,
    ) -> None:
        if stall_after_s <= 0:
            raise ValueError(f"stall_after_s={stall_after_s} must be positive")
        self.metrics = metrics
        self.stalled_s = stalled_s or metrics.seconds_since_chunk
        self.stall_after_s = stall_after_s

    def check(self) -> Verdict:
        stalled = self.stalled_s()
        devices = self.metrics.devices()
        mqtt = self.metrics.mqtt()
        problems: list[str] = []
        status = "ok"
        if mqtt is not None and not mqtt["connected"]:
            status = "degraded"
            problems.append("the MQTT broker is not connected: delegation is off")
        for name, state in sorted(devices.items()):
            if state in GONE and name not in REQUIRED_DEVICES:
                status = "degraded"
                problems.append(f"the {name} is {state}")
        for name, state in sorted(devices.items()):
            if state in GONE and name in REQUIRED_DEVICES:
                status = "down"
                problems.append(f"the {name} is {state}")
        if stalled > self.stall_after_s:
            status = "stuck"
            problems.append(f"no chunk for {stalled:.1f} s (limit {self.stall_after_s:g} s)")
        report = {
            "status": status,
            "problems": problems,
            "loop": {
                "stalled_s": round(stalled, 3),
                "stall_after_s": self.stall_after_s,
                "chunks": self.metrics.chunks,
            },
            "devices": devices,
            "mqtt": mqtt,
            "work_items": self.metrics.work_items(),
        }
        code = HTTPStatus.SERVICE_UNAVAILABLE if status in ("stuck", "down") else HTTPStatus.OK
        return Verdict(status, code, report)


class MetricsServer:
    """Serves ``/metrics`` and ``/healthz`` on ``address`` (``HOST:PORT``; port 0 picks
    a free one, see ``port``) from ``start()`` to ``stop()``."""

    def __init__(self, address: str, metrics: Metrics, health: Health) -> None:
        self.address = address
        self.host, self.requested_port = _split(address)
        self.metrics, self.health = metrics, health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on (the chosen one when asked for 0)."""
        if self._server is None:
            raise ServiceError(f"the metrics server on {self.address} is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Listen and serve on a daemon thread.

        Raises:
            ServiceError: the address cannot be listened on (port taken, no such host).
        """
        server_class = _Server6 if ":" in self.host else _Server
        try:
            server = server_class((self.host, self.requested_port), _Handler)
        except OSError as e:
            raise ServiceError(
                f"cannot serve metrics on {self.address} ({CONFIG_KEY}): {e.strerror or e}. "
                f"Another process may hold the port: choose another {CONFIG_KEY}, or set "
                'it to "" to run without metrics'
            ) from e
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="venus-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics and /healthz", self.host, self.port)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()  # returns once serve_forever has stopped
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT_S)

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def serve_metrics(address: str, metrics: Metrics, health: Health) -> MetricsServer | None:
    """A started server, or None: for ``""`` (disabled), and, with an ERROR logged, when
    the address cannot be served (the daemon carries on without metrics)."""
    if not address:
        log.info("metrics disabled (%s is empty)", CONFIG_KEY)
        return None
    server = MetricsServer(address, metrics, health)
    try:
        server.start()
    except ServiceError as e:
        log.error("running without metrics: %s", e)
        return None
    return server


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a slow client never holds up the daemon's exit
    owner: MetricsServer


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        try:
            self._answer(self.path.split("?", 1)[0])
        except Exception:  # one bad scrape must not reach the daemon (nor print to stderr)
            log.exception("metrics: %s failed", self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "text/plain", b"internal error\n")

    def _answer(self, path: str) -> None:
        owner = self.server.owner
        if path == "/metrics":
            self._send(HTTPStatus.OK, CONTENT_TYPE_LATEST, owner.metrics.text())
        elif path == "/healthz":
            verdict = owner.health.check()
            body = json.dumps(verdict.report, indent=1).encode() + b"\n"
            self._send(verdict.http, "application/json", body)
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found: try /metrics or /healthz\n")

    def _send(self, code: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _split(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ServiceError(f"{CONFIG_KEY} {address!r} is not HOST:PORT (e.g. 127.0.0.1:9464)")
    return host.strip("[]"), int(port)
