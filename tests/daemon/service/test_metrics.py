"""Metrics fed as the daemon feeds them, read back from the real text exposition."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.frontend import chunk_record as record
from support.services import Broker, wait_until

from venus.capabilities.mqtt_transport import MqttStats, MqttTransport
from venus.capabilities.result import ToolResult
from venus.daemon.harness.item import WorkItem, new_item_id
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.states import State
from venus.daemon.service.metrics import DEVICE_STATES, MQTT_COUNTERS, Metrics
from venus.hw.events import DeviceLost, DeviceRestored, Overrun, Underflow

WAIT_S = 10.0  # every wait has a timeout; a pass never comes near it
REPO = Path(__file__).resolve().parents[3]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: Metrics) -> Samples:
    """Every sample of the exposition, by (name, labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(metrics.text().decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(version="1.2.3")


def test_stage_histograms_fill_with_known_latencies(metrics: Metrics) -> None:
    s = scrape(metrics)
    assert value(s, "venus_chunk_stage_seconds_count", stage="mel") == 0  # there from the start
    metrics.on_record(record(latency_ms={"mel": 3.0, "prefill": 40.0, "total": 150.0}))
    metrics.on_record(record(latency_ms={"mel": 1.5, "prefill": 400.0, "total": 1200.0}))
    s = scrape(metrics)
    bucket = "venus_chunk_stage_seconds_bucket"
    assert value(s, bucket, stage="mel", le="0.001") == 0
    assert value(s, bucket, stage="mel", le="0.002") == 1
    assert value(s, bucket, stage="mel", le="0.005") == 2
    assert value(s, "venus_chunk_stage_seconds_sum", stage="mel") == pytest.approx(0.0045)
    assert value(s, "venus_chunk_stage_seconds_count", stage="prefill") == 2
    assert value(s, bucket, stage="prefill", le="0.05") == 1
    assert value(s, bucket, stage="prefill", le="0.5") == 2
    assert value(s, "venus_chunk_stage_seconds_count", stage="token2wave") == 0  # did not run
    assert value(s, "venus_chunk_seconds_bucket", le="0.2") == 1
    assert value(s, "venus_chunk_seconds_bucket", le="1.0") == 1
    assert value(s, "venus_chunk_seconds_bucket", le="1.5") == 2
    assert value(s, "venus_chunk_seconds_bucket", le="+Inf") == 2
    assert value(s, "venus_chunk_seconds_sum") == pytest.approx(1.35)
    assert value(s, "venus_chunks_total") == 2
    assert metrics.chunks == 2
    assert value(s, "venus_last_chunk_timestamp_seconds") == pytest.approx(time.time(), abs=60)


def test_decisions_misses_degradations_tokens_and_cuts_count(metrics: Metrics) -> None:
    metrics.on_record(record(decision="speak", speech_tokens=25, text_tokens=4))
    metrics.on_record(
        record(
            decision="speak",
            speech_tokens=12,
            deadline_missed=True,
            degraded=("vision_skipped", "speech_shortened"),
            context_tokens=900,
            evicted_tokens=100,
        )
    )
    metrics.on_record(
        record(decision="turn_eos", reply_id=3, reply_ended=True, playback_stopped=True)
    )
    metrics.on_record(record(deadline_missed=True, degraded=("vision_skipped",)))
    s = scrape(metrics)
    assert value(s, "venus_chunk_decisions_total", decision="listen") == 1
    assert value(s, "venus_chunk_decisions_total", decision="speak") == 2
    assert value(s, "venus_chunk_decisions_total", decision="turn_eos") == 1
    assert value(s, "venus_chunk_deadline_misses_total") == 2
    assert value(s, "venus_chunks_degraded_total", degradation="vision_skipped") == 2
    assert value(s, "venus_chunks_degraded_total", degradation="speech_shortened") == 1
    assert value(s, "venus_speech_tokens_total") == 37
    assert value(s, "venus_text_tokens_total") == 4
    assert value(s, "venus_context_evicted_tokens_total") == 100
    assert value(s, "venus_context_tokens") == 10  # the last record's
    assert value(s, "venus_playback_cuts_total") == 1


def make_item() -> WorkItem:
    now = time.time()
    return WorkItem(
        id=new_item_id(), session_id="s1", site_id="kitchen", capability="weather",
        version="1.0", arguments={"city": "Oslo"}, attempt=0, deadline_s=now + 300,
        state=State.QUEUED, created_at=now, updated_at=now,
    )  # fmt: skip


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.open(tmp_path / "journal.sqlite3") as j:
        yield j


def test_work_items_follow_a_real_journal(metrics: Metrics, journal: Journal) -> None:
    earlier = make_item()
    journal.add(earlier)  # before the metrics attach: counted from the journal
    metrics.attach_journal(journal)
    s = scrape(metrics)
    assert value(s, "venus_work_items", state="queued") == 1
    assert value(s, "venus_work_items", state="delivered") == 0
    assert value(s, "venus_work_item_transitions_total", to="queued") == 0

    item = make_item()
    journal.add(item)
    journal.move(item.id, State.RUNNING, "dispatched")
    s = scrape(metrics)
    assert value(s, "venus_work_items", state="queued") == 1
    assert value(s, "venus_work_items", state="running") == 1
    assert value(s, "venus_work_item_transitions_total", to="queued") == 1
    assert value(s, "venus_work_item_transitions_total", to="running") == 1

    journal.move(item.id, State.COMPLETED, "done", result=ToolResult.ok("sunny"))
    journal.move(earlier.id, State.CANCELLED, "revoked")
    s = scrape(metrics)
    assert value(s, "venus_work_items", state="queued") == 0
    assert value(s, "venus_work_items", state="running") == 0
    assert value(s, "venus_work_items", state="completed") == 1
    assert value(s, "venus_work_items", state="cancelled") == 1
    assert value(s, "venus_work_item_transitions_total", to="completed") == 1
    assert metrics.work_items() == {**{st.value: 0 for st in State}, "completed": 1, "cancelled": 1}

    metrics.detach_journal()
    assert metrics.on_transition not in journal.watchers
    assert not any(name == "venus_work_items" for name, _ in scrape(metrics))


def test_a_closed_journal_leaves_the_scrape_working(metrics: Metrics, tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "closing.sqlite3")
    metrics.attach_journal(journal)
    journal.close()  # the harness stopped before the last scrape
    assert metrics.work_items() is None
    assert value(scrape(metrics), "venus_chunks_total") == 0


def test_mqtt_connection_follows_the_broker(metrics: Metrics, mosquitto: Broker) -> None:
    transport = MqttTransport("metrics1", mosquitto.url, keepalive_s=5)
    metrics.watch_mqtt(transport)
    s = scrape(metrics)
    assert value(s, "venus_mqtt_connected") == 0
    transport.start(lambda _event: None)
    try:
        wait_until(lambda: transport.connected, "the transport's connection", WAIT_S)
        s = scrape(metrics)
        assert value(s, "venus_mqtt_connected") == 1
        assert value(s, "venus_mqtt_connects_total") == 1
        assert value(s, "venus_mqtt_calls_total") == 0
        mosquitto.process.kill()  # a crash: the broker is gone
        mosquitto.process.wait(timeout=WAIT_S)
        wait_until(lambda: not transport.connected, "the transport noticing", WAIT_S)
        assert value(scrape(metrics), "venus_mqtt_connected") == 0
        assert metrics.mqtt() == {"connected": False, **dataclasses.asdict(transport.stats)}
    finally:
        transport.stop()


def test_every_mqtt_counter_is_exported() -> None:
    assert set(MQTT_COUNTERS) == {f.name for f in dataclasses.fields(MqttStats)}


def test_device_states_from_providers_events_and_setters(metrics: Metrics) -> None:
    assert not any(name == "venus_device_state" for name, _ in scrape(metrics))  # none given
    camera_state = "running"
    metrics.watch_device("camera", lambda: camera_state)
    metrics.set_device("speaker", "running")
    metrics.on_device_event(DeviceLost("microphone", "default", "stream stalled", 1.0))
    s = scrape(metrics)
    assert value(s, "venus_device_state", device="microphone", state="lost") == 1
    assert value(s, "venus_device_state", device="microphone", state="running") == 0
    assert value(s, "venus_device_state", device="speaker", state="running") == 1
    assert value(s, "venus_device_state", device="camera", state="running") == 1
    assert value(s, "venus_device_losses_total", device="microphone") == 1
    assert {state for (name, labels) in s if name == "venus_device_state"
            for key, state in labels if key == "state"} == set(DEVICE_STATES)  # fmt: skip

    camera_state = "ended"
    metrics.on_device_event(DeviceRestored("microphone", "default", 2.0, 3.0))
    metrics.on_device_event(Overrun("microphone", 8000, 1, 3.5))
    metrics.on_device_event(Underflow("speaker", 3, 3, 3.6))
    metrics.on_device_event(Underflow("speaker", 2, 5, 4.1))
    s = scrape(metrics)
    assert value(s, "venus_device_state", device="camera", state="ended") == 1
    assert value(s, "venus_device_state", device="camera", state="running") == 0
    assert value(s, "venus_device_state", device="microphone", state="running") == 1
    assert value(s, "venus_audio_overrun_seconds_total", device="microphone") == 0.5
    assert value(s, "venus_audio_underflows_total", device="speaker") == 5
    assert metrics.devices() == {"microphone": "running", "speaker": "running", "camera": "ended"}


def test_a_failing_device_provider_reads_unknown(metrics: Metrics) -> None:
    def broken() -> str:
        raise RuntimeError("torn down")

    metrics.watch_device("camera", broken)
    s = scrape(metrics)
    assert value(s, "venus_device_state", device="camera", state="unknown") == 1


def test_build_info_and_process_metrics(metrics: Metrics) -> None:
    s = scrape(metrics)
    assert value(s, "venus_build_info", version="1.2.3") == 1
    assert any(name.startswith("process_") for name, _ in s)  # Linux: /proc is there
    bare = scrape(Metrics(process_metrics=False))
    assert not any(name.startswith("process_") for name, _ in bare)


def test_two_instances_do_not_clash() -> None:
    one, two = Metrics(), Metrics()  # a shared registry would refuse the second
    one.on_record(record(decision="speak"))
    assert value(scrape(one), "venus_chunks_total") == 1
    assert value(scrape(two), "venus_chunks_total") == 0


def test_docs_list_every_metric(metrics: Metrics, journal: Journal) -> None:
    """docs/metrics.md names every family a fully attached Metrics exports."""
    metrics.attach_journal(journal)
    metrics.watch_mqtt(MqttTransport("docs1", "mqtt://127.0.0.1:1"))  # never started
    metrics.set_device("camera", "running")
    metrics.on_device_event(DeviceLost("microphone", "default", "gone", 1.0))
    metrics.on_device_event(Overrun("microphone", 16, 1, 1.0))
    docs = (REPO / "docs" / "metrics.md").read_text()
    missing = []
    for f in text_string_to_metric_families(metrics.text().decode()):
        name = f.name + ("_total" if f.type == "counter" else "")
        if name.startswith(("process_", "python_")) or name.endswith("_created"):
            continue  # prometheus-client's own, described in general
        if f"`{name}" not in docs:
            missing.append(name)
    assert not missing, f"docs/metrics.md does not list {missing}"
