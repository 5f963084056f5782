"""The parts of the live daemon that take configuration changes without a restart.

Each returns a ``reload.Reloadable``; ``venus run`` registers them once the frontend
runs. They run on the reload thread, so what the chunk loop reads is handed to the
loop's own thread (``FrontendLoop.call_soon``) and swapped at a chunk boundary.
"""

from __future__ import annotations

import dataclasses
import logging

from venus.daemon.broadcast import Broadcast
from venus.daemon.config.schema import CapabilitiesConfig, VenusConfig
from venus.daemon.frontend.session import Frontend, make_samplers
from venus.daemon.frontend.step import Samplers
from venus.daemon.harness.service import Harness
from venus.daemon.service.reload import LOGGING_KEYS, SAMPLING_KEYS, Reloadable
from venus.daemon.service.watchdog import ProgressWatchdog
from venus.daemon.transports import BuiltinTransport, configured_builtins
from venus.errors import ConfigError
from venus.logs import setup_logging

log = logging.getLogger(__name__)


def logging_part(command_line_level: str | None) -> Reloadable:
    """``[logging]``; a ``--log-level`` given on the command line still wins."""

    def apply(cfg: VenusConfig) -> None:
        if command_line_level:
            log.info(
                "reload: --log-level %s (command line) wins over logging.level", command_line_level
            )
        setup_logging(command_line_level or cfg.logging.level, cfg.logging.format)

    return Reloadable("logging", LOGGING_KEYS, apply)


def sampling_part(frontend: Frontend) -> Reloadable:
    """``listen_bias``, temperature, top_p and seed: new samplers from the next chunk."""

    def apply(cfg: VenusConfig) -> None:
        samplers = make_samplers(cfg, frontend.engines)

        def swap(new: Samplers = samplers) -> None:
            frontend.step.samplers = new
            log.debug("samplers swapped at a chunk boundary")

        frontend.loop.call_soon(swap)

    return Reloadable("sampling", SAMPLING_KEYS, apply)


def homeassistant_part(broadcast: Broadcast | None) -> Reloadable:
    """``homeassistant.name``: the device's discovery config is published again."""

    def apply(cfg: VenusConfig) -> None:
        link = broadcast.link if broadcast is not None else None
        if link is None:
            return  # no broker or Home Assistant off: nothing shows the name
        link.name = cfg.homeassistant.name
        link.announce()

    return Reloadable("homeassistant", frozenset({"homeassistant.name"}), apply)


def capabilities_part(harness: Harness | None) -> Reloadable:
    """``[capabilities]``: ``reason`` and ``mqtt_device`` set up again from the new
    values and swapped into the built-ins' transport (calls in flight finish first)."""
    keys = frozenset(f"capabilities.{f.name}" for f in dataclasses.fields(CapabilitiesConfig))

    def apply(cfg: VenusConfig) -> None:
        transports = harness.core.transports if harness is not None else ()
        builtins = next((t for t in transports if isinstance(t, BuiltinTransport)), None)
        if builtins is None:
            raise ConfigError("no built-in capabilities are running (the harness is off)")
        builtins.reconfigure(*configured_builtins(cfg))

    return Reloadable("capabilities", keys, apply)


def watchdog_part(watchdog: ProgressWatchdog) -> Reloadable:
    def apply(cfg: VenusConfig) -> None:
        watchdog.set_enabled(cfg.service.watchdog)

    return Reloadable("watchdog", frozenset({"service.watchdog"}), apply)
