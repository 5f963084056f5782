"""/metrics and /healthz over real HTTP on loopback."""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from support.frontend import chunk_record as record
from support.services import Broker, wait_until

from venus.capabilities.mqtt_transport import MqttTransport
from venus.daemon.service.health import Health, MetricsServer, serve_metrics
from venus.daemon.service.metrics import Metrics
from venus.errors import ServiceError

WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it


def get(port: int, path: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=WAIT_S) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers["Content-Type"], e.read()


def healthz(port: int) -> tuple[int, dict[str, Any]]:
    code, kind, body = get(port, "/healthz")
    assert kind == "application/json"
    return code, json.loads(body)


class Stall:
    """A settable ``stalled_s`` provider, as the watchdog supplies."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


@pytest.fixture
def stall() -> Stall:
    return Stall()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(version="1.2.3")


@pytest.fixture
def server(metrics: Metrics, stall: Stall) -> Iterator[MetricsServer]:
    with MetricsServer("127.0.0.1:0", metrics, Health(metrics, stall, 10.0)) as s:
        yield s


def test_metrics_are_scraped_over_http(server: MetricsServer, metrics: Metrics) -> None:
    metrics.on_record(record(latency_ms={"mel": 3.0, "total": 150.0}))
    code, kind, body = get(server.port, "/metrics")
    assert code == 200 and kind == CONTENT_TYPE_LATEST
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    mel = [
        s
        for s in families["venus_chunk_stage_seconds"].samples
        if s.labels.get("stage") == "mel" and s.name.endswith("_count")
    ]
    assert [s.value for s in mel] == [1]
    metrics.on_record(record(latency_ms={"mel": 3.0, "total": 150.0}))
    body = get(server.port, "/metrics?name[]=ignored")[2]  # a query string is fine
    assert b'venus_chunk_stage_seconds_count{stage="mel"} 2.0' in body


def test_healthz_ok_without_devices_or_broker(server: MetricsServer, metrics: Metrics) -> None:
    """An offline run: nothing but the loop to judge."""
    metrics.on_record(record())
    code, report = healthz(server.port)
    assert code == 200
    assert report == {
        "status": "ok",
        "problems": [],
        "loop": {"stalled_s": 0.0, "stall_after_s": 10.0, "chunks": 1},
        "devices": {},
        "mqtt": None,
        "work_items": None,
    }


def test_healthz_is_503_when_the_loop_is_stuck(server: MetricsServer, stall: Stall) -> None:
    stall.seconds = 10.0  # at the limit: still fine
    assert healthz(server.port)[0] == 200
    stall.seconds = 10.5
    code, report = healthz(server.port)
    assert code == 503 and report["status"] == "stuck"
    assert report["loop"]["stalled_s"] == 10.5
    assert "no chunk for 10.5 s" in report["problems"][0]


def test_healthz_is_503_when_the_microphone_is_lost(
    server: MetricsServer, metrics: Metrics
) -> None:
    for device in ("microphone", "speaker", "camera"):
        metrics.set_device(device, "running")
    assert healthz(server.port)[1]["status"] == "ok"
    metrics.set_device("microphone", "lost")
    code, report = healthz(server.port)
    assert code == 503 and report["status"] == "down"
    assert report["devices"] == {"microphone": "lost", "speaker": "running", "camera": "running"}
    assert report["problems"] == ["the microphone is lost"]


def test_healthz_is_degraded_200_when_only_the_camera_is_lost(
    server: MetricsServer, metrics: Metrics
) -> None:
    metrics.set_device("microphone", "running")
    metrics.set_device("speaker", "running")
    metrics.set_device("camera", "lost")
    code, report = healthz(server.port)
    assert code == 200 and report["status"] == "degraded"
    assert report["problems"] == ["the camera is lost"]
    metrics.set_device("camera", "disabled")  # off by configuration: nothing wrong
    assert healthz(server.port)[1]["status"] == "ok"


def test_stuck_wins_over_a_lost_device(
    server: MetricsServer, metrics: Metrics, stall: Stall
) -> None:
    metrics.set_device("speaker", "lost")
    metrics.set_device("camera", "lost")
    stall.seconds = 60.0
    code, report = healthz(server.port)
    assert code == 503 and report["status"] == "stuck"
    assert len(report["problems"]) == 3


def test_healthz_reports_the_broker(
    server: MetricsServer, metrics: Metrics, mosquitto: Broker
) -> None:
    transport = MqttTransport("health1", mosquitto.url, keepalive_s=5)
    metrics.watch_mqtt(transport)
    code, report = healthz(server.port)
    assert code == 200 and report["status"] == "degraded"  # not connected yet
    assert report["mqtt"]["connected"] is False
    transport.start(lambda _event: None)
    try:
        wait_until(lambda: transport.connected, "the transport's connection", WAIT_S)
        code, report = healthz(server.port)
        assert code == 200 and report["status"] == "ok"
        assert report["mqtt"]["connected"] is True and report["mqtt"]["connects"] == 1
    finally:
        transport.stop()


def test_without_a_stall_provider_the_last_chunk_counts(metrics: Metrics) -> None:
    health = Health(metrics, stall_after_s=0.5)
    metrics.on_record(record())
    assert health.check().status == "ok"
    wait_until(lambda: health.check().status == "stuck", "a stall", WAIT_S)
    metrics.on_record(record())
    verdict = health.check()
    assert verdict.status == "ok" and verdict.report["loop"]["chunks"] == 2


def test_other_paths_are_404(server: MetricsServer) -> None:
    code, _kind, body = get(server.port, "/")
    assert code == 404 and b"/metrics" in body
    assert get(server.port, "/metricsx")[0] == 404


def test_a_taken_port_is_a_clear_error(metrics: Metrics, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        health = Health(metrics)
        with pytest.raises(ServiceError) as e:
            MetricsServer(address, metrics, health).start()
        assert address in str(e.value) and "service.metrics_address" in str(e.value)
        with caplog.at_level(logging.ERROR):
            assert serve_metrics(address, metrics, health) is None  # the daemon runs on
        assert any(r.levelno == logging.ERROR and address in r.getMessage() for r in caplog.records)


def test_an_empty_address_serves_nothing(metrics: Metrics) -> None:
    assert serve_metrics("", metrics, Health(metrics)) is None


def test_serve_metrics_starts_and_stop_frees_the_port(metrics: Metrics) -> None:
    server = serve_metrics("127.0.0.1:0", metrics, Health(metrics))
    assert server is not None
    port = server.port
    assert get(port, "/healthz")[0] == 200
    server.stop()
    server.stop()  # twice is harmless
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=WAIT_S).close()
    again = serve_metrics(f"127.0.0.1:{port}", metrics, Health(metrics))  # a restart
    assert again is not None
    try:
        assert get(port, "/healthz")[0] == 200
    finally:
        again.stop()


def test_two_servers_in_one_process(metrics: Metrics) -> None:
    other = Metrics()
    other.on_record(record())
    one = MetricsServer("127.0.0.1:0", metrics, Health(metrics))
    two = MetricsServer("127.0.0.1:0", other, Health(other))
    with one, two:
        assert b"venus_chunks_total 0.0" in get(one.port, "/metrics")[2]
        assert b"venus_chunks_total 1.0" in get(two.port, "/metrics")[2]
