"""One socket option for every MQTT client venus opens.

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
from typing import Any

import paho.mqtt.client as mqtt

log = logging.getLogger(__name__)


def no_delay(client: mqtt.Client) -> None:
    """Set ``TCP_NODELAY`` on every socket ``client`` opens (plain, TLS or websocket)."""

    def opened(_client: mqtt.Client, _userdata: Any, sock: Any) -> None:
        raw = getattr(sock, "_socket", sock)  # paho's websocket wrapper holds the socket
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError) as e:  # not a TCP socket (a test double, a pipe)
            log.debug("TCP_NODELAY not set: %s", e)

    client.on_socket_open = opened
