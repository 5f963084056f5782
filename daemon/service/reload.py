"""SIGHUP: read the configuration file again and apply what can change while running.

The new file is validated whole first; an invalid one is refused with every problem
logged and the running configuration kept (the daemon never dies of a SIGHUP). Then the
changes are compared key by key with the running configuration: a key some part of the
daemon can take live (a ``Reloadable``) is applied and logged with its old and new
value; any other changed key is logged as needing a restart, and keeps being reported at
each SIGHUP until then. systemd hears ``RELOADING=1`` before and ``READY=1`` after.

What reloads live (the parts ``venus run`` registers): ``logging.level`` and
``logging.format``; the sampling keys ``model.listen_bias``, ``model.temperature``,
``model.top_p`` and ``model.seed`` (new samplers, swapped in by the loop's own thread at
the next chunk boundary); ``homeassistant.name`` (discovery announced again);
``service.watchdog``; ``capabilities.*`` (``reason`` and ``mqtt_device`` set up again).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from venus.daemon.config.schema import VenusConfig
from venus.daemon.service.notify import Notifier
from venus.errors import ConfigError

log = logging.getLogger(__name__)

SAMPLING_KEYS = frozenset({"model.listen_bias", "model.temperature", "model.top_p", "model.seed"})
LOGGING_KEYS = frozenset({"logging.level", "logging.format"})


@dataclass(frozen=True)
class Reloadable:
    """Keys one part of the running daemon takes without a restart, and how: ``apply``
    gets the whole new configuration (on the reload thread) when any of them changed."""

    name: str
    keys: frozenset[str]
    apply: Callable[[VenusConfig], None]


@dataclass(frozen=True)
class ReloadReport:
    applied: tuple[str, ...] = ()  # "model.listen_bias: 0.0 -> 2.0"
    needs_restart: tuple[str, ...] = ()  # keys that changed and wait for a restart
    failed: tuple[str, ...] = ()  # keys whose part failed to take them (still the old)
    refused: str | None = None  # why the new file was refused, if it was


def flatten(cfg: VenusConfig) -> dict[str, Any]:
    """``{"section.key": value}`` for every key of the configuration."""
    out: dict[str, Any] = {}
    for section in dataclasses.fields(cfg):
        values = getattr(cfg, section.name)
        for key in dataclasses.fields(values):
            out[f"{section.name}.{key.name}"] = getattr(values, key.name)
    return out


def with_keys(cfg: VenusConfig, new: VenusConfig, keys: Sequence[str]) -> VenusConfig:
    """``cfg`` with the values of ``keys`` taken from ``new``."""
    sections: dict[str, dict[str, Any]] = {}
    for dotted in keys:
        section, key = dotted.split(".", 1)
        sections.setdefault(section, {})[key] = getattr(getattr(new, section), key)
    changes = {s: dataclasses.replace(getattr(cfg, s), **kv) for s, kv in sections.items()}
    return dataclasses.replace(cfg, **changes)


class Reloader:
    """Owns the running configuration; ``request`` (the SIGHUP handler) wakes its thread.

    ``load`` reads and validates the file, with the command line's overrides applied
    (``ConfigError`` if it cannot); ``status`` is the STATUS= text to go back to."""

    def __init__(
        self,
        load: Callable[[], VenusConfig],
        running: VenusConfig,
        notifier: Notifier,
        status: Callable[[], str] = lambda: "listening",
    ) -> None:
        self.load, self.running, self.notifier, self.status = load, running, notifier, status
        self.parts: list[Reloadable] = []
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """Reload soon (safe in a signal handler: only sets an event)."""
        self._wanted.set()

    def start(self, parts: Sequence[Reloadable]) -> None:
        """Reload on request from now on; a request made earlier is served at once."""
        self.parts = list(parts)
        self._thread = threading.Thread(target=self._run, name="venus-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stop.is_set():
                return
            self._wanted.clear()
            try:
                self.reload()
            except Exception:  # this thread's supervisor: the next SIGHUP is served too
                log.exception("reload failed; the running configuration is kept")

    def reload(self) -> ReloadReport:
        self.notifier.reloading()
        try:
            return self._reload()
        finally:
            self.notifier.ready(self.status())

    def _reload(self) -> ReloadReport:
        try:
            new = self.load()
        except ConfigError as e:
            log.error("reload refused, the running configuration is kept: %s", e)
            return ReloadReport(refused=str(e))
        old, fresh = flatten(self.running), flatten(new)
        changed = [k for k in fresh if fresh[k] != old[k]]
        if not changed:
            log.info("reload: the configuration is unchanged")
            return ReloadReport()
        applied: list[str] = []
        failed: list[str] = []
        for part in self.parts:
            keys = [k for k in changed if k in part.keys]
            if not keys:
                continue
            try:
                part.apply(new)
            except Exception:  # the reload's supervisor: a part that fails keeps its old
                log.exception("reload: %s failed; %s keep their old values", part.name, keys)
                failed += keys
                continue
            for k in keys:
                log.info("reload: %s: %r -> %r", k, old[k], fresh[k])
                applied.append(k)
        self.running = with_keys(self.running, new, applied)
        taken = {k for part in self.parts for k in part.keys}
        restart = [k for k in changed if k not in taken]
        for k in restart:
            log.warning("reload: %s changed (%r -> %r): needs a restart", k, old[k], fresh[k])
        return ReloadReport(
            applied=tuple(f"{k}: {old[k]!r} -> {fresh[k]!r}" for k in applied),
            needs_restart=tuple(restart),
            failed=tuple(failed),
        )
