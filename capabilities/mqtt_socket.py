"""What every MQTT client venus opens shares: the broker URL it is given, one socket
option, and a way to stop its network thread (``stop_loop``).

``broker_address`` reads ``mqtt://``, ``mqtts://`` (TLS), ``ws://`` or ``wss://``
``HOST[:PORT]`` (the schemes a caller accepts), with the default port of its scheme.

Nagle's algorithm holds back a small TCP segment while an earlier one is not yet
acknowledged, and the peer delays its acknowledgement (about 40 ms on Linux), so a call
and its reply, a few hundred bytes each, wait twice per broker hop. ``no_delay`` sets
``TCP_NODELAY`` on each socket the client opens, as MQTT libraries for interactive use
do; the broker needs the same (mosquitto: ``set_tcp_nodelay true``). Measured with
``venus bench harness --broker``: docs/benchmarks.md.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Collection
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt

from venus.errors import CapabilityError

log = logging.getLogger(__name__)

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883, "ws": 80, "wss": 443}


class BrokerAddress(NamedTuple):
    host: str
    port: int
    scheme: str  # mqtts and wss are TLS; ws and wss are websockets


def broker_address(url: str, schemes: Collection[str] = tuple(DEFAULT_PORTS)) -> BrokerAddress:
    """``url`` as host, port and scheme; CapabilityError naming the URL otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise CapabilityError(f"broker URL {url!r}: {e}") from e
    if parts.scheme not in schemes or parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        forms = " or ".join(f"{s}://HOST[:PORT]" for s in schemes)
        raise CapabilityError(f"{url!r} is not a broker URL; use {forms}")
    return BrokerAddress(parts.hostname, port or DEFAULT_PORTS[parts.scheme], parts.scheme)


def no_delay(client: mqtt.Client) -> None:
    """Set ``TCP_NODELAY`` on every socket ``client`` opens (plain, TLS or websocket)."""

    def opened(_client: mqtt.Client, _userdata: Any, sock: Any) -> None:
        raw = getattr(sock, "_socket", sock)  # paho's websocket wrapper holds the socket
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError) as e:  # not a TCP socket (a test double, a pipe)
            log.debug("TCP_NODELAY not set: %s", e)

    client.on_socket_open = opened


def stop_loop(client: mqtt.Client) -> None:
    """``client.loop_stop()`` without paho's race (eclipse-paho/paho.mqtt.python#872, open
    in 2.2): after ``disconnect()`` the network thread ends by itself and clears its handle,
    and when that falls between ``loop_stop``'s check of the handle and its ``join`` the call
    raises AttributeError. The thread has then finished, which is what the caller waited for.
    """
    try:
        client.loop_stop()
    except AttributeError:
        log.debug("the MQTT network thread had ended by itself")
