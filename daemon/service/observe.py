"""Metrics and health for a run of the daemon: what ``venus run`` (live or offline)
attaches, in one place.

``observe`` makes the ``Metrics``, follows the harness's journal and MQTT transport when
there is one, and serves ``/metrics`` and ``/healthz`` on ``[service] metrics_address``
(a port that cannot be bound is logged and the run goes on without them). The caller
feeds chunk records (``metrics.on_record``) and device events; ``parts`` stops it all,
before the harness it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

from venus.capabilities.mqtt_transport import MqttTransport
from venus.daemon.config.schema import VenusConfig
from venus.daemon.harness.service import Harness
from venus.daemon.service.health import STALL_AFTER_S, Health, serve_metrics
from venus.daemon.service.metrics import Metrics

STALL_CHUNKS = 10  # /healthz says "stuck" after this many chunk periods without one


def observe(
    cfg: VenusConfig,
    harness: Harness | None,
    parts: ExitStack,
    *,
    chunk_s: float,
    stalled_s: Callable[[], float] | None = None,
) -> Metrics:
    metrics = Metrics()
    if harness is not None:
        metrics.attach_journal(harness.core.journal)
        parts.callback(metrics.detach_journal)
        mqtt = next((t for t in harness.core.transports if isinstance(t, MqttTransport)), None)
        if mqtt is not None:
            metrics.watch_mqtt(mqtt)
    health = Health(metrics, stalled_s, stall_after_s=max(STALL_AFTER_S, STALL_CHUNKS * chunk_s))
    server = serve_metrics(cfg.service.metrics_address, metrics, health)
    if server is not None:
        parts.callback(server.stop)
    return metrics
