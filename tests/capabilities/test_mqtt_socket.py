"""stop_loop: paho's loop_stop race (eclipse-paho/paho.mqtt.python#872), made to happen."""

from __future__ import annotations

import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.services import Broker

from venus.capabilities.mqtt_socket import stop_loop

WAIT_S = 10.0


def connected_client(broker: Broker) -> mqtt.Client:
    up = threading.Event()
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="race", protocol=mqtt.MQTTv5)
    c.on_connect = lambda *_: up.set()
    c.connect(broker.host, broker.port)
    c.loop_start()
    assert up.wait(WAIT_S), broker.log()
    return c


def lose_the_race(monkeypatch: pytest.MonkeyPatch, client: mqtt.Client) -> None:
    """Make the network thread end, and clear its handle, between loop_stop's check of the
    handle and its join. loop_stop itself tells the thread to end before it joins; after a
    disconnect() the thread ends by itself, which on a loaded machine lands there by chance.
    """
    assert client._thread is not None  # the handle the race is about
    real = threading.current_thread
    me = real()

    def late(*args: Any) -> threading.Thread:
        if real() is me:  # loop_stop's check; the thread and join() call it too
            deadline = time.monotonic() + WAIT_S
            while client._thread is not None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert client._thread is None, "the network thread did not end"
        return real(*args)

    monkeypatch.setattr(mqtt.threading, "current_thread", late)


def test_loop_stop_alone_loses_the_race(mosquitto: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    client = connected_client(mosquitto)
    lose_the_race(monkeypatch, client)
    with pytest.raises(AttributeError):  # if paho fixes this, stop_loop's workaround can go
        client.loop_stop()


def test_stop_loop_survives_the_race(mosquitto: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    client = connected_client(mosquitto)
    lose_the_race(monkeypatch, client)
    stop_loop(client)
    assert client._thread is None


def test_stop_loop_stops_a_running_thread(mosquitto: Broker) -> None:
    client = connected_client(mosquitto)
    thread = client._thread
    assert thread is not None and thread.is_alive()
    stop_loop(client)  # no disconnect: loop_stop's own path, the thread joined
    assert not thread.is_alive()
    client.disconnect()
