"""The harness's transport to capability workers over an MQTT broker (docs/protocol.md).

``MqttTransport`` is the daemon's side of the protocol, on paho-mqtt 2 (callback API v2,
MQTT 5, QoS 1 everywhere). Its client id is the daemon's node id; its last will is
``offline``, retained, on its own ``status`` topic, and it publishes ``online`` there on
every (re)connect.

- **Discovery**: the retained ``+/status`` and ``+/capabilities`` of every node. One
  ``_Worker`` per node keeps its online state and contracts (a malformed capabilities
  message is logged and ignored). ``contracts()`` is the union over online workers, the
  first worker seen winning on a name.
- **Calls**: routed to an online worker offering the capability, the one with the fewest
  calls in flight; published on ``<daemon>/call/<capability>`` with the MQTT 5
  properties. No such worker, or no broker connection: ``Finished`` failed
  ``no_provider`` (retryable), emitted from a short-lived thread, never inline.
- **Replies** on ``<worker>/reply/<daemon>`` are accepted only from the worker the item
  went to, for an item outstanding, valid against the schemas and (a completed one) the
  contract's ``outputSchema``; a completed result outside that schema becomes failed
  ``invalid_output``. Anything else is dropped, logged and counted in ``stats``. After
  the final result the item is forgotten, so a duplicate final is dropped.
- **Worker loss**: a worker whose status turns ``offline`` (its last will) or whose
  retained status is cleared leaves ``contracts()`` and its calls in flight come back as
  one ``ProviderLost``; the harness retries or fails them.
- **Cancel** publishes a cancel; the call still ends with the worker's ``Finished`` or, if
  the worker is lost first, with ``ProviderLost``.

**Threads.** paho's network thread runs the callbacks; they only parse, update state
under ``_lock`` and call ``on_event``, which the harness requires to return at once (it
only enqueues), so calling it from the network thread blocks nothing. Events are emitted
after ``_lock`` is released, so ``on_event`` may call back into the transport.

**Broker restarts and reconnects.** paho reconnects with exponential backoff
(``reconnect_min_s`` .. ``reconnect_max_s``); on each connect the transport re-subscribes
and republishes ``online``. While disconnected, ``call`` answers failed ``no_provider``
(retryable: the harness retries idempotent capabilities). Calls in flight are kept across
a reconnect. The session is persistent (clean start off, session expiry
``SESSION_EXPIRY_S``): across a network blip, or a restart of a broker that persists
sessions (mosquitto ``persistence true``), QoS-1 replies queued for the daemon while it
was away are delivered after it reconnects. A broker restarted without persistence forgets
the session: replies a worker publishes before the daemon has re-subscribed are lost, and
the harness's per-call timeout ends those calls. After a reconnect without a session,
every worker counts as offline until its retained status arrives again (without a
``ProviderLost``: a worker that vanished during the outage is also left to the timeout).
``stop`` publishes ``offline`` and disconnects with session expiry 0; calls still in
flight then get no more events (the journal re-dispatches or fails them at the next start).

**Sharing the connection.** The broker allows one connection per client id, so what else
the daemon publishes (its ``health`` and ``events``, Home Assistant discovery) goes
through this transport: ``publish``, ``subscribe`` (a handler per topic filter outside
the protocol's own, re-subscribed on every connect) and ``on_connect`` callbacks. Those
run on paho's network thread and must not block.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from jsonschema import validators  # type: ignore[import-untyped]
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from venus.capabilities import protocol as p
from venus.capabilities.contract import Contract
from venus.capabilities.credentials import read_credentials
from venus.capabilities.mqtt_socket import broker_address, no_delay, stop_loop
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import (
    CallRequest,
    EventSink,
    Finished,
    ProviderLost,
    TransportEvent,
)
from venus.errors import CapabilityError

log = logging.getLogger(__name__)

QOS = 1  # every publish and subscription
SESSION_EXPIRY_S = 300  # the broker keeps our session (and QoS-1 replies) this long while away
STOP_PUBLISH_TIMEOUT_S = 2.0  # wait for the retained "offline" to leave at stop


@dataclass
class _Worker:
    node: str
    online: bool = False
    contracts: tuple[Contract, ...] = ()
    in_flight: set[str] = field(default_factory=set)  # item ids dispatched to it


@dataclass
class _Call:
    request: CallRequest
    worker: str  # the node it was dispatched to; only its replies count
    contract: Contract


@dataclass
class MqttStats:
    calls: int = 0  # published
    no_provider: int = 0  # answered at once: no online worker, or no broker
    accepted: int = 0  # replies accepted
    dropped: int = 0  # replies dropped: wrong worker, unknown item, malformed, duplicate
    invalid_output: int = 0  # completed results outside the contract's outputSchema
    lost: int = 0  # workers lost with calls in flight
    connects: int = 0


class MqttTransport:
    name = "mqtt"

    def __init__(
        self,
        node_id: str,
        broker_url: str,
        *,
        credentials: Path | None = None,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        keepalive_s: int = 30,
        reconnect_min_s: int = 1,
        reconnect_max_s: int = 30,
    ) -> None:
        """``credentials``: a file holding ``username:password``."""
        self.node = node_id
        self._status_topic = p.status_topic(node_id)  # checks the node id
        url = broker_address(broker_url)
        self._host, self._port = url.host, url.port
        self._keepalive_s = keepalive_s
        self.stats = MqttStats()
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._calls: dict[str, _Call] = {}  # outstanding, by item id
        self._on_event: EventSink | None = None
        self._connected = False
        self._handlers: dict[str, Callable[[str, bytes], None]] = {}  # filter -> handler
        self._connect_hooks: list[Callable[[], None]] = []
        self._client = client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=node_id,
            protocol=MQTTProtocolVersion.MQTTv5,
            transport="websockets" if url.scheme in ("ws", "wss") else "tcp",
        )
        if url.scheme in ("mqtts", "wss") or tls_ca is not None or tls_cert is not None:
            client.tls_set(
                ca_certs=str(tls_ca) if tls_ca else None,
                certfile=str(tls_cert) if tls_cert else None,
                keyfile=str(tls_key) if tls_key else None,
            )
        if credentials is not None:
            user, password = read_credentials(credentials)
            client.username_pw_set(user, password)
        client.will_set(self._status_topic, p.OFFLINE.to_json(), qos=QOS, retain=True)
        client.reconnect_delay_set(reconnect_min_s, reconnect_max_s)
        no_delay(client)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message

    # --- life ----------------------------------------------------------------------------
    def start(self, on_event: EventSink) -> None:
        """Connect in the background (returns at once; calls fail no_provider until then)."""
        with self._lock:
            if self._on_event is not None:
                raise CapabilityError("the MQTT transport is already started")
            self._on_event = on_event
        props = _properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = SESSION_EXPIRY_S
        self._client.connect_async(
            self._host, self._port, self._keepalive_s, clean_start=False, properties=props
        )
        self._client.loop_start()

    def stop(self) -> None:
        """Publish ``offline`` (retained), end the session, disconnect."""
        with self._lock:
            if self._on_event is None:
                return
            self._on_event = None
            connected, self._connected = self._connected, False
        if connected:
            info = self._client.publish(self._status_topic, p.OFFLINE.to_json(), QOS, retain=True)
            try:
                info.wait_for_publish(STOP_PUBLISH_TIMEOUT_S)
            except (RuntimeError, ValueError) as e:  # the connection dropped meanwhile
                log.warning("could not publish offline at stop: %s", e)
        props = _properties(PacketTypes.DISCONNECT)
        props.SessionExpiryInterval = 0
        self._client.disconnect(properties=props)
        stop_loop(self._client)

    @property
    def connected(self) -> bool:
        with self._lock:
            return self._connected

    # --- sharing the connection ----------------------------------------------------------
    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> bool:
        """Queue a QoS-1 publish; False (nothing sent) while disconnected."""
        if not self.connected:
            return False
        return bool(self._client.publish(topic, payload, QOS, retain=retain).rc == 0)

    def publish_health(self, fields: Mapping[str, Any]) -> bool:
        """The retained ``health`` snapshot of this node (``at`` is added)."""
        message = p.HealthMessage({"at": round(time.time(), 3), **fields})
        return self.publish(p.health_topic(self.node), message.to_json(), retain=True)

    def publish_event(self, fields: Mapping[str, Any]) -> bool:
        """One lifecycle event on this node's ``events`` topic, for observers."""
        return self.publish(p.events_topic(self.node), p.event_payload(fields))

    def subscribe(self, topic_filter: str, handler: Callable[[str, bytes], None]) -> None:
        """Route messages on ``topic_filter`` to ``handler(topic, payload)`` (paho's thread:
        no blocking), subscribed now if connected and again on every connect."""
        with self._lock:
            self._handlers[topic_filter] = handler
            connected = self._connected
        if connected:
            self._client.subscribe(topic_filter, options=SubscribeOptions(qos=QOS))

    def on_connect(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` after every (re)connect (paho's thread: no blocking)."""
        with self._lock:
            self._connect_hooks.append(hook)
            connected = self._connected
        if connected:
            hook()

    # --- the registry --------------------------------------------------------------------
    def contracts(self) -> Sequence[Contract]:
        with self._lock:
            return tuple(self._offered().values())

    def _offered(self) -> dict[str, Contract]:
        """Name -> contract over online workers, the first worker winning (lock held)."""
        out: dict[str, Contract] = {}
        for w in self._workers.values():
            if w.online:
                for c in w.contracts:
                    out.setdefault(c.name, c)
        return out

    # --- calls ---------------------------------------------------------------------------
    def call(self, request: CallRequest) -> None:
        """Dispatch to an online worker; returns at once, the answer comes as events."""
        with self._lock:
            if self._on_event is None:
                raise CapabilityError("MqttTransport.call before start(); start it first")
            worker = self._choose(request.capability) if self._connected else None
            if worker is not None:
                old = self._calls.pop(request.item_id, None)
                if old is not None:  # a re-dispatch of an item still outstanding
                    log.info(
                        "item %s dispatched again; its earlier call is dropped", old.request.item_id
                    )
                    self._workers[old.worker].in_flight.discard(request.item_id)
                contract = next(c for c in worker.contracts if c.name == request.capability)
                self._calls[request.item_id] = _Call(request, worker.node, contract)
                worker.in_flight.add(request.item_id)
            connected = self._connected
        if worker is None:
            why = "online worker offers it" if connected else "connection to the MQTT broker"
            self._refuse(request, f"no {why} (capability {request.capability!r})")
            return
        try:
            message = p.fit_evidence(
                p.CallMessage.from_request(request, p.reply_topic(worker.node, self.node))
            )
        except p.ProtocolError as e:
            self._forget(request.item_id)
            result = ToolResult.failed("invalid_arguments", f"the call cannot be sent: {e}")
            self._emit_later(Finished(request.item_id, "failed", result))
            return
        props = _properties(PacketTypes.PUBLISH)
        for key, value in p.call_properties(message).items():
            setattr(props, key, value)
        topic = p.call_topic(self.node, request.capability)
        self._client.publish(topic, message.to_json(), QOS, properties=props)
        self.stats.calls += 1
        log.debug("item %s: %s -> %s", request.item_id, request.capability, worker.node)

    def cancel(self, item_id: str, reason: str) -> None:
        """Publish a cancel; the call still ends with one ``Finished`` (or ``ProviderLost``)."""
        with self._lock:
            outstanding = item_id in self._calls
        if not outstanding:
            log.debug("cancel for item %s, not outstanding: ignored", item_id)
            return
        payload = p.CancelMessage(item_id, reason).to_json()
        self._client.publish(p.cancel_topic(self.node), payload, QOS)

    def _choose(self, capability: str) -> _Worker | None:
        """The online worker offering ``capability`` with the fewest calls in flight."""
        offering = [
            w
            for w in self._workers.values()
            if w.online and any(c.name == capability for c in w.contracts)
        ]
        return min(offering, key=lambda w: len(w.in_flight), default=None)

    def _refuse(self, request: CallRequest, message: str) -> None:
        self.stats.no_provider += 1
        result = ToolResult.failed("no_provider", message, retryable=True)
        self._emit_later(Finished(request.item_id, "failed", result))

    def _forget(self, item_id: str) -> _Call | None:
        with self._lock:
            call = self._calls.pop(item_id, None)
            if call is not None and call.worker in self._workers:
                self._workers[call.worker].in_flight.discard(item_id)
            return call

    # --- paho callbacks (network thread: no blocking) ------------------------------------
    def _on_connect(
        self, client: mqtt.Client, _userdata: Any, flags: Any, reason: Any, _props: Any
    ) -> None:
        if reason.is_failure:
            log.warning("the MQTT broker %s:%s refused us: %s", self._host, self._port, reason)
            return
        with self._lock:
            self._connected = True
            self.stats.connects += 1
            if not flags.session_present:  # a new session: retained statuses come again
                for w in self._workers.values():
                    w.online = False
        log.info("connected to the MQTT broker %s:%s as %s", self._host, self._port, self.node)
        client.publish(self._status_topic, p.ONLINE.to_json(), QOS, retain=True)
        with self._lock:
            extra, hooks = list(self._handlers), list(self._connect_hooks)
        client.subscribe(
            [
                (p.topic_filter("status"), SubscribeOptions(qos=QOS)),
                (p.topic_filter("capabilities"), SubscribeOptions(qos=QOS)),
                (p.topic_filter("reply", self.node), SubscribeOptions(qos=QOS)),
                *((f, SubscribeOptions(qos=QOS)) for f in extra),
            ]
        )
        for hook in hooks:
            try:
                hook()
            except Exception:  # a broken hook must not end paho's network thread
                log.exception("an on_connect hook failed")

    def _on_disconnect(
        self, _client: mqtt.Client, _userdata: Any, _flags: Any, reason: Any, _props: Any
    ) -> None:
        with self._lock:
            was, self._connected = self._connected, False
        if was:
            log.warning("lost the MQTT broker (%s); reconnecting", reason)

    def _on_message(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            handler = next(
                (h for f, h in self._handlers.items() if mqtt.topic_matches_sub(f, msg.topic)),
                None,
            )
        if handler is not None:
            try:
                handler(msg.topic, bytes(msg.payload))
            except Exception:  # a broken handler must not end paho's network thread
                log.exception("the handler of %s failed", msg.topic)
            return
        try:
            topic = p.parse_topic(msg.topic)
        except p.ProtocolError as e:
            log.warning("dropped a message: %s", e)
            return
        if topic.node == self.node:
            return  # our own status
        payload = bytes(msg.payload)
        if topic.kind == "status":
            self._on_status(topic.node, msg.topic, payload)
        elif topic.kind == "capabilities":
            self._on_capabilities(topic.node, msg.topic, payload)
        elif topic.kind == "reply":
            self._on_reply(topic.node, msg.topic, payload)

    # --- what arrives --------------------------------------------------------------------
    def _on_status(self, node: str, topic: str, payload: bytes) -> None:
        online = payload == b"online"
        if payload and not online:
            try:
                p.StatusMessage.parse(payload, source=topic)
            except p.ProtocolError as e:
                log.warning("ignored a status: %s", e)
                return
        with self._lock:
            w = self._workers.setdefault(node, _Worker(node))
            was, w.online = w.online, online
            lost = () if online else tuple(sorted(w.in_flight))
            for item_id in lost:
                del self._calls[item_id]
            w.in_flight.difference_update(lost)
        if was != online:
            log.info("worker %s is %s", node, "online" if online else "offline")
        if lost:
            self.stats.lost += 1
            why = "went offline" if payload else "cleared its status"
            self._emit(ProviderLost(lost, f"worker {node} {why} with the call in flight"))

    def _on_capabilities(self, node: str, topic: str, payload: bytes) -> None:
        if not payload:
            contracts: tuple[Contract, ...] = ()
        else:
            try:
                contracts = p.CapabilitiesMessage.parse(payload, source=topic).capabilities
            except p.ProtocolError as e:
                log.warning("ignored the capabilities of %s: %s", node, e)
                return
        with self._lock:
            self._workers.setdefault(node, _Worker(node)).contracts = contracts
        log.info("worker %s offers %s", node, ", ".join(c.name for c in contracts) or "nothing")

    def _on_reply(self, node: str, topic: str, payload: bytes) -> None:
        try:
            reply = p.parse_message(topic, payload)
        except p.ProtocolError as e:
            self._drop(f"malformed: {e}")
            return
        assert isinstance(reply, p.ReplyMessage)  # the topic is a reply topic
        with self._lock:
            call = self._calls.get(reply.item_id)
            if call is not None and call.worker == node and reply.event == "result":
                self._calls.pop(reply.item_id)
                self._workers[node].in_flight.discard(reply.item_id)
        if call is None or call.worker != node:
            to = "no outstanding item" if call is None else f"an item sent to {call.worker}"
            self._drop(f"{topic}: {reply.event} for {reply.item_id}, {to}")
            return
        self.stats.accepted += 1
        event = reply.to_event()
        if isinstance(event, Finished) and event.status == "completed":
            event = self._check_output(call.contract, event)
        self._emit(event)

    def _check_output(self, contract: Contract, event: Finished) -> Finished:
        schema = contract.output_schema
        if schema is None:
            return event
        structured = event.result.structured
        errors = [] if structured is None else list(_validator(schema).iter_errors(structured))
        if structured is not None and not errors:
            return event
        self.stats.invalid_output += 1
        what = "no structured content" if structured is None else errors[0].message
        message = f"{contract.name} answered outside its outputSchema: {what}"
        log.warning("item %s: %s", event.item_id, message)
        return Finished(event.item_id, "failed", ToolResult.failed("invalid_output", message))

    def _drop(self, why: str) -> None:
        self.stats.dropped += 1
        log.warning("dropped a reply: %s", why)

    # --- events --------------------------------------------------------------------------
    def _emit(self, event: TransportEvent) -> None:
        sink = self._on_event
        if sink is None:
            return
        try:
            sink(event)
        except Exception:  # a broken sink must not end paho's network thread
            log.exception("on_event raised on %s", event)

    def _emit_later(self, event: TransportEvent) -> None:
        """Emit from a short-lived thread: ``call`` never answers inline."""
        threading.Thread(target=self._emit, args=(event,), name="venus-mqtt-answer").start()


def _properties(packet_type: int) -> Properties:
    return Properties(packet_type)  # type: ignore[no-untyped-call]  # paho's __init__


def _validator(schema: Any) -> Any:
    return validators.validator_for(schema)(schema)
