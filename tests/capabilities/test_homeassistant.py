"""Home Assistant discovery against a real mosquitto with the shipped config and ACL.

Home Assistant is played by a raw MQTT client logged in as ``homeassistant``, the user
the ACL gives its rights to; the daemon is an ``MqttTransport`` logged in as itself.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.secure_broker import WAIT_S, Client, Site, site
from support.services import wait_until

from venus.capabilities.homeassistant import HomeAssistantLink, discovery_topic
from venus.capabilities.mqtt_transport import MqttTransport

QUIET_S = 0.5  # how long "never arrives" is watched, after a later message did arrive
DAEMON = "daemon1"
BASE = f"venus/v1/nodes/{DAEMON}/ha"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Site]:
    with site(tmp_path) as s:
        yield s


class Daemon:
    """The daemon's transport with the link; mute commands land in ``mutes``."""

    def __init__(self, s: Site, on_mute: Callable[[bool], None] | None = None) -> None:
        self.mutes: queue.Queue[bool] = queue.Queue()
        self.transport = MqttTransport(DAEMON, s.url, credentials=s.creds[DAEMON])
        self.link = HomeAssistantLink(
            self.transport, name="Kitchen Venus", version="9.9", on_mute=on_mute or self.mutes.put
        )
        self.link.start()
        self.transport.start(lambda _event: None)
        wait_until(lambda: self.transport.connected, "the daemon's connection")


@pytest.fixture
def daemon(broker: Site) -> Iterator[Daemon]:
    d = Daemon(broker)
    yield d
    d.transport.stop()


@pytest.fixture
def ha(broker: Site) -> Iterator[Client]:
    c = Client(broker, "homeassistant")
    assert not c.reason.is_failure, broker.log()
    yield c
    c.close()


def until(client: Client, topic: str) -> bytes:
    """The next payload on ``topic``, skipping others.

    A daemon's ``connected`` comes before its SUBSCRIBE reaches the broker; its retained
    values follow that SUBSCRIBE on the same connection, so once Home Assistant has read
    one, a press of the switch cannot be lost. Tests that press it wait for one first.
    """
    while True:
        got, payload = client.next()
        if got == topic:
            return payload


def test_the_device_appears_with_its_entities(daemon: Daemon, ha: Client) -> None:
    ha.subscribe("homeassistant/device/+/config")
    config = json.loads(until(ha, discovery_topic(DAEMON)))  # retained: it came at connect
    assert config["dev"]["name"] == "Kitchen Venus" and config["dev"]["sw"] == "9.9"
    assert config["avty_t"] == f"venus/v1/nodes/{DAEMON}/status"
    parts = config["cmps"]
    assert {k: v["p"] for k, v in parts.items()} == {
        "state": "sensor",
        "pending": "sensor",
        "mute": "switch",
        "finished": "event",
    }
    assert parts["state"]["ops"] == ["listening", "speaking", "thinking"]
    assert parts["mute"]["cmd_t"] == f"{BASE}/mute/set"
    assert len({v["uniq_id"] for v in parts.values()}) == 4
    # Home Assistant restarts: its birth message brings the config again.
    ha.publish("homeassistant/status", b"online")
    assert json.loads(until(ha, discovery_topic(DAEMON))) == config


def test_values_and_the_availability_follow_the_daemon(
    broker: Site, daemon: Daemon, ha: Client
) -> None:
    ha.subscribe(f"{BASE}/#")
    ha.subscribe(f"venus/v1/nodes/{DAEMON}/status")
    seen: dict[str, bytes] = {}
    while len(seen) < 4:  # the retained values and status, in any order
        topic, payload = ha.next()
        seen[topic] = payload
    assert seen == {
        f"{BASE}/state": b"listening",
        f"{BASE}/pending": b"0",
        f"{BASE}/mute": b"OFF",
        f"venus/v1/nodes/{DAEMON}/status": b"online",
    }
    daemon.link.set_state("speaking")
    assert until(ha, f"{BASE}/state") == b"speaking"
    daemon.link.set_pending(2)
    assert until(ha, f"{BASE}/pending") == b"2"
    daemon.link.item_finished("a1b2", "timer", "completed", "Your timer is done.")
    event = json.loads(until(ha, f"{BASE}/finished"))
    assert event == {
        "event_type": "completed",
        "item_id": "a1b2",
        "capability": "timer",
        "text": "Your timer is done.",
    }
    with pytest.raises(ValueError, match="not one of"):
        daemon.link.set_state("dreaming")  # type: ignore[arg-type]  # the check under test
    daemon.transport.stop()
    assert until(ha, f"venus/v1/nodes/{DAEMON}/status") == b"offline"


def test_the_mute_switch(daemon: Daemon, ha: Client) -> None:
    ha.subscribe(f"{BASE}/mute")
    assert until(ha, f"{BASE}/mute") == b"OFF"
    ha.publish(f"{BASE}/mute/set", b"maybe")  # ignored, logged
    ha.publish(f"{BASE}/mute/set", b"ON")
    assert daemon.mutes.get(timeout=WAIT_S) is True
    with pytest.raises(queue.Empty):
        daemon.mutes.get(timeout=QUIET_S)  # "maybe" did not count
    daemon.link.set_muted(True)
    assert until(ha, f"{BASE}/mute") == b"ON"
    ha.publish(f"{BASE}/mute/set", b"off")
    assert daemon.mutes.get(timeout=WAIT_S) is False


def test_the_acl_keeps_home_assistant_and_workers_in_their_place(
    broker: Site, daemon: Daemon, ha: Client
) -> None:
    watcher = Client(broker, "observer")
    watcher.subscribe("venus/v1/#")
    watcher.subscribe("homeassistant/#")
    rogue = Client(broker, "w1")
    try:
        ha.subscribe(f"{BASE}/mute")
        assert until(ha, f"{BASE}/mute") == b"OFF"  # retained: the switch is live
        # Home Assistant may press the switch, never speak for the daemon.
        ha.publish(f"venus/v1/nodes/{DAEMON}/status", b"offline")
        ha.publish(f"venus/v1/nodes/{DAEMON}/reply/{DAEMON}", b"{}")
        # A worker may not pose as the daemon's device, nor press its switch.
        rogue.publish(discovery_topic(DAEMON), b"{}")
        rogue.publish(f"{BASE}/mute/set", b"ON")
        ha.publish(f"{BASE}/mute/set", b"ON")  # allowed: the control
        seen = []
        while (got := watcher.next())[0] != f"{BASE}/mute/set":
            seen.append(got)
        assert got == (f"{BASE}/mute/set", b"ON")
        assert (f"venus/v1/nodes/{DAEMON}/status", b"offline") not in seen
        assert (discovery_topic(DAEMON), b"{}") not in seen
        with pytest.raises(queue.Empty):
            watcher.got.get(timeout=QUIET_S)
        assert daemon.mutes.get(timeout=WAIT_S) is True
        with pytest.raises(queue.Empty):
            daemon.mutes.get(timeout=QUIET_S)  # the worker's ON never reached it
    finally:
        rogue.close()
        watcher.close()
    assert "Denied PUBLISH from homeassistant" in broker.log()
    assert "Denied PUBLISH from w1" in broker.log()


def test_a_handler_that_raises_keeps_the_connection(broker: Site, ha: Client) -> None:
    calls = threading.Event()

    def broken(_muted: bool) -> None:
        calls.set()
        raise RuntimeError("broken")

    daemon = Daemon(broker, on_mute=broken)
    try:
        ha.subscribe(f"{BASE}/state")
        assert until(ha, f"{BASE}/state") == b"listening"  # retained: the switch is live
        ha.publish(f"{BASE}/mute/set", b"ON")
        assert calls.wait(WAIT_S)
        daemon.link.set_state("thinking")
        assert until(ha, f"{BASE}/state") == b"thinking"
    finally:
        daemon.transport.stop()
