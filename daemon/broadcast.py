"""What the live daemon tells the broker about itself, beside the calls.

- ``health`` (retained, every ``HEALTH_EVERY_S`` and on each connect): the assistant's
  state, the microphone mute, work items by state, chunks run, the MQTT counters.
- ``events``: one line per work-item transition (id, capability, from, to, reason), for
  observers; no user text.
- Home Assistant (``[homeassistant]``): the state (listening / speaking / thinking),
  pending items, the mute switch and an event per finished item
  (``venus.capabilities.homeassistant``).

It all goes through the harness's ``MqttTransport`` (one connection per node id).
State comes from the frontend's chunk records (``on_record``, the loop's thread) and
the journal's transitions (the harness thread); both only update fields and queue
publishes, so neither thread waits on the network.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from venus import __version__
from venus.capabilities.homeassistant import HomeAssistantLink, Presence
from venus.capabilities.mqtt_transport import MqttTransport
from venus.daemon.config.schema import HomeAssistantConfig
from venus.daemon.frontend.timeline import ChunkRecord
from venus.daemon.harness.item import WorkItem
from venus.daemon.harness.journal import Journal
from venus.daemon.harness.service import Harness
from venus.daemon.harness.states import UNFINISHED, State

log = logging.getLogger(__name__)

HEALTH_EVERY_S = 30.0
FINAL = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED, State.EXPIRED})


class Broadcast:
    def __init__(
        self,
        transport: MqttTransport,
        journal: Journal,
        muted: threading.Event,
        homeassistant: HomeAssistantConfig,
    ) -> None:
        self.transport, self.journal, self.muted = transport, journal, muted
        self._lock = threading.Lock()
        self._presence: Presence = "listening"
        self._speaking = False
        self._pending = sum(n for s, n in journal.counts().items() if s in UNFINISHED)
        self._chunks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.link: HomeAssistantLink | None = None
        if homeassistant.enabled:
            self.link = HomeAssistantLink(
                transport,
                name=homeassistant.name,
                version=__version__,
                on_mute=self._on_mute,
                prefix=homeassistant.discovery_prefix,
            )

    def start(self) -> None:
        """Before the transport starts, so the first connect announces everything."""
        if self.link is not None:
            self.link.set_muted(self.muted.is_set())
            self.link.set_pending(self._pending)
            self.link.start()
        self.transport.on_connect(self.publish_health)
        self.journal.watchers.append(self._on_transition)
        self._thread = threading.Thread(target=self._beat, name="venus-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._on_transition in self.journal.watchers:
            self.journal.watchers.remove(self._on_transition)
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    # --- inputs --------------------------------------------------------------------------
    def on_record(self, record: ChunkRecord) -> None:
        """A chunk ran (the loop's thread): speaking while a reply's speech plays."""
        with self._lock:
            self._chunks += 1
            self._speaking = record.reply_id is not None and not record.reply_ended
        self._update_presence()

    def _on_transition(self, item: WorkItem, old: State | None, reason: str) -> None:
        fields: dict[str, Any] = {
            "event": "item",
            "item_id": item.id,
            "capability": item.capability,
            "from": None if old is None else old.value,
            "to": item.state.value,
            "reason": reason,
        }
        self.transport.publish_event(fields)
        with self._lock:
            self._pending += (item.state in UNFINISHED) - (old in UNFINISHED)
            pending = self._pending
        if self.link is not None:
            self.link.set_pending(pending)
            first_final = item.state in FINAL and (old is None or old in UNFINISHED)
            if first_final:
                found = self.journal.result(item.id)
                text = found[1].text() if found is not None else reason
                self.link.item_finished(item.id, item.capability, item.state.value, text)
        self._update_presence()

    def _on_mute(self, muted: bool) -> None:
        """Home Assistant's switch (paho's thread)."""
        if muted:
            self.muted.set()
        else:
            self.muted.clear()
        log.info("microphone %s from Home Assistant", "muted" if muted else "unmuted")
        if self.link is not None:
            self.link.set_muted(muted)
        self.publish_health()

    # --- outputs -------------------------------------------------------------------------
    def _update_presence(self) -> None:
        with self._lock:
            presence: Presence = (
                "speaking" if self._speaking else "thinking" if self._pending else "listening"
            )
            changed, self._presence = presence != self._presence, presence
        if changed and self.link is not None:
            self.link.set_state(presence)

    def health(self) -> dict[str, Any]:
        with self._lock:
            fields: dict[str, Any] = {
                "state": self._presence,
                "muted": self.muted.is_set(),
                "pending": self._pending,
                "chunks": self._chunks,
            }
        fields["mqtt"] = dataclasses.asdict(self.transport.stats)
        return fields

    def publish_health(self) -> None:
        self.transport.publish_health(self.health())

    def _beat(self) -> None:
        while not self._stop.wait(HEALTH_EVERY_S):
            self.publish_health()


def open_broadcast(
    harness: Harness, muted: threading.Event, homeassistant: HomeAssistantConfig
) -> Broadcast | None:
    """A started ``Broadcast`` on the harness's MQTT transport; None without a broker."""
    mqtt = next((t for t in harness.core.transports if isinstance(t, MqttTransport)), None)
    if mqtt is None:
        return None
    broadcast = Broadcast(mqtt, harness.core.journal, muted, homeassistant)
    broadcast.start()
    return broadcast
