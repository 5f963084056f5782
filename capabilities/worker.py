"""The worker SDK: capabilities offered on an MQTT broker (``docs/protocol.md``).

::

    from venus.capabilities.worker import Context, Worker, capability

    @capability(description="The weather forecast for a city.", timeout_s=10)
    def weather(ctx: Context, city: str, days: int = 1) -> dict[str, Any]: ...

    worker = Worker("weather-1", [weather], "mqtt://127.0.0.1:1883")
    worker.start()
    ...
    worker.stop()

``capability`` is in ``decorator.py``. Inside a ``Worker``: paho's network thread only
queues what arrives; one dispatcher thread parses each message and routes it; the calls
run in an ``InProcessTransport`` (argument checks, the concurrency limit, cancellation,
exactly one ``Finished``) whose events become replies on the call's ``reply_to``. Calls
are keyed by ``(daemon, item_id)`` (item ids are unique per daemon only) and renamed to
a local id for the transport. A duplicate of a call in flight is ignored; one already
answered gets the same final reply again (the last ``FINISHED_KEPT`` are kept). A cancel
for an unknown call is remembered (``CANCELS_KEPT``, for ``CANCEL_MEMORY_S``) so that its
call, if it comes later, is answered ``cancelled`` without running. On every (re)connect
the worker publishes ``online`` and its capabilities again and re-subscribes.

For observers it keeps a retained ``health`` snapshot (calls in flight, answered,
dropped by reason) and publishes an ``events`` line when a call is accepted and when
it ends.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import logging
import queue
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from venus.capabilities import protocol
from venus.capabilities.decorator import capability, schema_for
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.capabilities.mqtt_socket import broker_address, no_delay, stop_loop
from venus.capabilities.protocol import CallMessage, CancelMessage, ProtocolError, ReplyMessage
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Accepted, Finished, Progress, TransportEvent
from venus.errors import CapabilityError

__all__ = ["Capability", "Context", "Worker", "capability", "schema_for"]

log = logging.getLogger(__name__)

FINISHED_KEPT = 1024  # final replies kept to re-answer duplicate calls
CANCELS_KEPT = 1024  # cancels for calls not seen yet
CANCEL_MEMORY_S = 600.0  # protocol: remember an early cancel at least 10 minutes
RECONNECT_MIN_S, RECONNECT_MAX_S = 1, 30  # paho's backoff doubles from min to max


# --- the worker --------------------------------------------------------------------------
@dataclass
class _Call:
    """One call this worker answers, from its arrival to its final reply."""

    daemon: str
    item_id: str  # the daemon's id for it
    local_id: str  # the transport's id for it
    reply_to: str
    final: ReplyMessage | None = None


@dataclass(frozen=True)
class _Connected:
    """Queued by paho's on_connect: (re)announce and subscribe, off paho's thread."""


class Worker:
    """Offers ``capabilities`` on the broker at ``broker_url`` as node ``node_id``.

    ``broker_url``: ``mqtt://host[:port]`` or ``mqtts://host[:port]`` (TLS; also used when
    any ``tls_*`` path is given). ``credentials``: ``(username, password)``.
    ``concurrency``: calls run at once. ``dropped`` counts messages dropped, by reason.
    """

    def __init__(
        self,
        node_id: str,
        capabilities: Sequence[Capability],
        broker_url: str,
        *,
        credentials: tuple[str, str] | None = None,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        concurrency: int = 4,
        keepalive_s: int = 30,
    ) -> None:
        protocol.status_topic(node_id)  # checks the id
        self.node_id = node_id
        self._transport = InProcessTransport(capabilities, max_workers=concurrency)
        contracts = tuple(c.contract for c in capabilities)
        tools = json.dumps([c.to_tool() for c in contracts], sort_keys=True)
        self._announce = protocol.CapabilitiesMessage(zlib.crc32(tools.encode()), contracts)
        self._announce.to_json()  # checked now, not at connect
        self._host, self._port, scheme = broker_address(broker_url, ("mqtt", "mqtts"))
        tls = scheme == "mqtts"
        self._keepalive_s = keepalive_s
        self._client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=node_id,
            protocol=MQTTProtocolVersion.MQTTv5,
        )
        if tls or tls_ca or tls_cert or tls_key:
            self._client.tls_set(
                ca_certs=str(tls_ca) if tls_ca else None,
                certfile=str(tls_cert) if tls_cert else None,
                keyfile=str(tls_key) if tls_key else None,
            )
        if credentials is not None:
            self._client.username_pw_set(*credentials)
        self._client.will_set(
            protocol.status_topic(node_id), protocol.OFFLINE.to_json(), qos=1, retain=True
        )
        self._client.reconnect_delay_set(RECONNECT_MIN_S, RECONNECT_MAX_S)
        no_delay(self._client)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_message = self._on_message
        self._client.on_subscribe = self._on_subscribe
        self._inbox: queue.Queue[mqtt.MQTTMessage | _Connected | None] = queue.Queue()
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], _Call] = {}  # in flight, by (daemon, item id)
        self._by_local: dict[str, _Call] = {}
        self._finished: collections.OrderedDict[tuple[str, str], _Call] = collections.OrderedDict()
        self._cancels: collections.OrderedDict[tuple[str, str], tuple[str, float]] = (
            collections.OrderedDict()
        )
        self._local_ids = itertools.count(1)
        self._ready = threading.Event()  # subscribed after the latest connect
        self._taking = False
        self._dispatcher: threading.Thread | None = None
        self.dropped: collections.Counter[str] = collections.Counter()
        self._answered = 0  # final replies sent

    # --- life ----------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> None:
        """Connect, announce and subscribe; CapabilityError if not ready in ``timeout_s``."""
        self._transport.start(self._on_event)
        self._taking = True
        self._dispatcher = threading.Thread(
            target=self._dispatch, name=f"venus-worker-{self.node_id}", daemon=True
        )
        self._dispatcher.start()
        self._client.connect_async(
            self._host, self._port, keepalive=self._keepalive_s, clean_start=True
        )
        self._client.loop_start()
        if not self._ready.wait(timeout_s):
            self.stop(1.0)
            raise CapabilityError(
                f"worker {self.node_id}: not connected to mqtt broker {self._host}:{self._port} "
                f"within {timeout_s:g} s; check --broker, the credentials and the broker's log"
            )
        names = ", ".join(c.name for c in self._announce.capabilities)
        log.info("worker %s offers %s on %s:%d", self.node_id, names, self._host, self._port)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop taking calls, cancel the ones in flight (each gets its final reply),
        publish ``offline`` and disconnect."""
        if not self._taking:
            return
        self._taking = False
        self._transport.stop(timeout_s)
        # A call the dispatcher was handing to the transport as it stopped (accepted, not
        # yet queued) is answered cancelled on the dispatcher's thread: let that reply go
        # out before the client disconnects.
        self._inbox.put(None)
        if self._dispatcher is not None and self._dispatcher is not threading.current_thread():
            self._dispatcher.join(timeout_s)
        info = self._client.publish(
            protocol.status_topic(self.node_id), protocol.OFFLINE.to_json(), qos=1, retain=True
        )
        if self._client.is_connected():
            try:
                info.wait_for_publish(timeout_s)
            except (RuntimeError, ValueError) as e:  # not queued: the connection went
                log.warning("worker %s: could not publish offline: %s", self.node_id, e)
        self._client.disconnect()
        stop_loop(self._client)
        log.info("worker %s stopped", self.node_id)

    # --- paho's callbacks: no blocking work here -----------------------------------------
    def _on_connect(self, _c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            log.error("worker %s: the broker refused the connection: %s", self.node_id, reason)
            return
        self._inbox.put(_Connected())

    def _on_disconnect(self, _c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self._ready.clear()
        if self._taking:
            log.warning("worker %s: disconnected (%s); reconnecting", self.node_id, reason)

    def _on_message(self, _c: Any, _u: Any, message: mqtt.MQTTMessage) -> None:
        self._inbox.put(message)

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, codes: Any, _p: Any) -> None:
        refused = [str(c) for c in codes if c.is_failure]
        if refused:
            log.error("worker %s: subscriptions refused: %s", self.node_id, ", ".join(refused))
        self._ready.set()  # only _announce_self subscribes

    # --- the dispatcher thread -----------------------------------------------------------
    def _dispatch(self) -> None:
        while (item := self._inbox.get()) is not None:
            try:
                if isinstance(item, _Connected):
                    self._announce_self()
                else:
                    self._handle(item.topic, bytes(item.payload))
            except Exception:  # one bad message must not end the worker
                log.exception("worker %s: failed to handle a message", self.node_id)

    def _announce_self(self) -> None:
        node = self.node_id
        publish = self._client.publish
        publish(protocol.status_topic(node), protocol.ONLINE.to_json(), qos=1, retain=True)
        publish(protocol.capabilities_topic(node), self._announce.to_json(), qos=1, retain=True)
        self._health()
        filters = [(protocol.topic_filter("cancel"), 1)]
        filters += [(protocol.topic_filter("call", c.name), 1) for c in self._announce.capabilities]
        self._client.subscribe(filters)

    def _handle(self, topic: str, payload: bytes) -> None:
        try:
            message = protocol.parse_message(topic, payload)
        except ProtocolError as e:
            self.dropped["malformed"] += 1
            log.warning("worker %s: dropped a message: %s", self.node_id, e)
            return
        if isinstance(message, CancelMessage):
            self._cancel(protocol.parse_topic(topic).node, message)
        elif not isinstance(message, CallMessage):
            self.dropped["unexpected"] += 1
            log.warning("worker %s: dropped a message on %s: not a call", self.node_id, topic)
        elif message.worker_node != self.node_id:
            self.dropped["other_worker"] += 1
            log.debug("call %s is for %s, not for me", message.item_id, message.worker_node)
        elif not self._taking:
            self.dropped["stopping"] += 1
            log.info("worker %s: stopping; dropped call %s", self.node_id, message.item_id)
        else:
            self._call(message)

    def _call(self, message: CallMessage) -> None:
        key = (message.daemon_node, message.item_id)
        with self._lock:
            if key in self._calls:
                self.dropped["duplicate"] += 1
                log.info("call %s from %s is running; ignored a duplicate", *key[::-1])
                return
            done = self._finished.get(key)
            early = self._cancels.pop(key, None)
            if early is not None and early[1] < time.monotonic():
                early = None  # remembered long enough; the call runs
            call = _Call(message.daemon_node, message.item_id, "", message.reply_to)
            if done is None and early is None:
                call.local_id = f"w{next(self._local_ids)}"
                self._calls[key] = call
                self._by_local[call.local_id] = call
        if done is not None and done.final is not None:
            self.dropped["duplicate"] += 1
            log.info("call %s from %s was answered; sent its result again", *key[::-1])
            self._publish(done, done.final)
        elif early is not None:
            final = ReplyMessage(
                message.item_id,
                "result",
                "cancelled",
                result=ToolResult.failed("cancelled", early[0]),
            )
            self._finish(call, final)
        else:
            request = dataclasses.replace(message.to_request(), item_id=call.local_id)
            self._transport.call(request)

    def _cancel(self, daemon: str, message: CancelMessage) -> None:
        key = (daemon, message.item_id)
        with self._lock:
            call = self._calls.get(key)
            if call is None and key not in self._finished:
                self._cancels[key] = (message.reason, time.monotonic() + CANCEL_MEMORY_S)
                self._cancels.move_to_end(key)
                now = time.monotonic()
                while self._cancels and (
                    len(self._cancels) > CANCELS_KEPT or next(iter(self._cancels.values()))[1] < now
                ):
                    self._cancels.popitem(last=False)
        if call is not None:
            self._transport.cancel(call.local_id, message.reason)

    # --- replies (from the transport's threads and the dispatcher) -----------------------
    def _on_event(self, event: TransportEvent) -> None:
        if not isinstance(event, Accepted | Progress | Finished):
            return  # ProviderLost: an in-process transport has no providers to lose
        with self._lock:
            call = self._by_local.get(event.item_id)
        if call is None:
            log.warning("worker %s: an event for no call: %s", self.node_id, event)
            return
        reply = dataclasses.replace(ReplyMessage.from_event(event), item_id=call.item_id)
        if isinstance(event, Accepted):
            self._event("accepted", call, reply)
        if isinstance(event, Finished):
            self._finish(call, reply)
        else:
            self._publish(call, reply)

    def _finish(self, call: _Call, final: ReplyMessage) -> None:
        key = (call.daemon, call.item_id)
        with self._lock:
            call.final = final
            self._calls.pop(key, None)
            self._by_local.pop(call.local_id, None)
            self._finished[key] = call
            while len(self._finished) > FINISHED_KEPT:
                self._finished.popitem(last=False)
            self._answered += 1
        self._publish(call, final)
        self._event("finished", call, final)
        self._health()

    # --- for observers -------------------------------------------------------------------
    def _health(self) -> None:
        with self._lock:
            fields = {
                "state": "serving" if self._taking else "stopping",
                "in_flight": len(self._calls),
                "answered": self._answered,
                "dropped": dict(self.dropped),
            }
        payload = protocol.HealthMessage(fields | {"at": round(time.time(), 3)}).to_json()
        self._client.publish(protocol.health_topic(self.node_id), payload, qos=1, retain=True)

    def _event(self, kind: str, call: _Call, reply: ReplyMessage) -> None:
        fields = {"event": kind, "item_id": call.item_id, "daemon": call.daemon}
        if reply.event == "result":
            fields["status"] = reply.status
        payload = protocol.event_payload(fields)
        self._client.publish(protocol.events_topic(self.node_id), payload, qos=1)

    def _publish(self, call: _Call, reply: ReplyMessage) -> None:
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        for name, value in protocol.reply_properties(reply).items():
            setattr(properties, name, value)
        info = self._client.publish(call.reply_to, reply.to_json(), qos=1, properties=properties)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            log.warning(
                "worker %s: reply %s for %s not sent now (%s)",
                self.node_id,
                reply.event,
                call.item_id,
                mqtt.error_string(info.rc),
            )
