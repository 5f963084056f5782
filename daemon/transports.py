"""The daemon's capabilities: the built-ins in this process, with ``mqtt_device`` and
``reason`` when ``[capabilities]`` sets them up, then the workers over MQTT.

A built-in that cannot be set up (an unreadable devices or key file, a bad endpoint) is
left out with an ERROR naming the key and what to fix: the assistant keeps running with
the others. ``mqtt_device`` has its own MQTT connection (client id ``<node_id>-devices``),
started and stopped with the in-process transport; the broker being down never delays
the daemon's start (calls fail ``device_unavailable`` until it answers).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from venus.capabilities.builtin import BUILTINS, OTHER_CALLS
from venus.capabilities.builtin.timer import MAX_TIMERS
from venus.capabilities.inprocess import Capability, InProcessTransport
from venus.capabilities.transport import EventSink, Transport
from venus.daemon.config.schema import VenusConfig
from venus.errors import CapabilityError

if TYPE_CHECKING:
    from venus.capabilities.builtin.mqtt_device import DeviceBridge

log = logging.getLogger(__name__)


class BuiltinTransport(InProcessTransport):
    """The built-ins, and the device bridge's connection started and stopped with them.
    ``reconfigure`` swaps the configured ones (SIGHUP)."""

    def __init__(self, extra: Sequence[Capability], bridge: DeviceBridge | None) -> None:
        super().__init__([*BUILTINS, *extra], max_workers=OTHER_CALLS + MAX_TIMERS)
        self.bridge = bridge
        self._configured = [c.contract.name for c in extra]

    def reconfigure(self, extra: Sequence[Capability], bridge: DeviceBridge | None) -> None:
        """Offer ``extra`` instead of the configured built-ins offered so far, and use
        ``bridge``; calls in flight finish on the old ones (a device call may then fail
        ``device_unavailable`` as its connection closes)."""
        for name in self._configured:
            self.remove(name)
        for capability in extra:
            self.add(capability)
        self._configured = [c.contract.name for c in extra]
        old, self.bridge = self.bridge, bridge
        if bridge is not None:
            bridge.start(timeout_s=0.0)
        if old is not None:
            old.stop()
        log.info("capabilities: %s", ", ".join(c.name for c in self.contracts()))

    def start(self, on_event: EventSink) -> None:
        if self.bridge is not None:
            self.bridge.start(timeout_s=0.0)  # connects in the background
        super().start(on_event)

    def stop(self, timeout_s: float = 5.0) -> None:
        super().stop(timeout_s)
        if self.bridge is not None:
            self.bridge.stop()


def configured_builtins(cfg: VenusConfig) -> tuple[list[Capability], DeviceBridge | None]:
    """``reason`` and ``mqtt_device`` as ``[capabilities]`` sets them up (each left out,
    with an ERROR, when it cannot be)."""
    c = cfg.capabilities
    extra: list[Capability] = []
    bridge = None
    if c.reason_url:
        from venus.capabilities.builtin.reason import reason_capability

        try:
            extra.append(
                reason_capability(
                    c.reason_url,
                    model=c.reason_model,
                    key_file=c.reason_key_file,
                    timeout_s=c.reason_timeout_s,
                )
            )
        except CapabilityError as e:
            log.error("capability reason off: %s (capabilities.reason_*)", e)
    if c.devices_file is not None:
        bridge = _device_bridge(cfg, c.devices_file)
        if bridge is not None:
            extra.append(bridge.capability)
    return extra, bridge


def _device_bridge(cfg: VenusConfig, devices_file: Path) -> DeviceBridge | None:
    from venus.capabilities.builtin.devices import load_devices
    from venus.capabilities.builtin.mqtt_device import DeviceBridge
    from venus.capabilities.credentials import read_credentials

    c, h = cfg.capabilities, cfg.harness
    if not h.broker_url:
        log.error("capability mqtt_device off: capabilities.devices_file needs harness.broker_url")
        return None
    try:
        devices = load_devices(devices_file)
        credentials = None
        if c.devices_credentials_file is not None:
            credentials = read_credentials(c.devices_credentials_file)
        elif h.credentials_file is not None:
            log.warning(
                "mqtt_device connects without credentials: set "
                "capabilities.devices_credentials_file for a broker that asks for them"
            )
        return DeviceBridge(
            devices,
            h.broker_url,
            client_id=f"{h.node_id}-devices",
            credentials=credentials,
            tls_ca=h.tls_ca,
            tls_cert=h.tls_cert,
            tls_key=h.tls_key,
            keepalive_s=h.keepalive_s,
        )
    except CapabilityError as e:
        log.error("capability mqtt_device off: %s (capabilities.devices_file)", e)
        return None


def harness_transports(cfg: VenusConfig) -> list[Transport]:
    """The built-ins in this process first, then capability workers over MQTT when
    ``[harness] broker_url`` is set. An unreachable broker is retried in the background:
    until it answers, only the built-ins are offered."""
    from venus.capabilities.mqtt_transport import MqttTransport

    h = cfg.harness
    transports: list[Transport] = [BuiltinTransport(*configured_builtins(cfg))]
    if h.broker_url:
        transports.append(
            MqttTransport(
                h.node_id,
                h.broker_url,
                credentials=h.credentials_file,
                tls_ca=h.tls_ca,
                tls_cert=h.tls_cert,
                tls_key=h.tls_key,
                keepalive_s=h.keepalive_s,
            )
        )
    return transports
