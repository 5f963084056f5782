"""sd_notify(3) without a dependency: the daemon's state to systemd over ``$NOTIFY_SOCKET``.

The protocol is one datagram of ``KEY=VALUE`` lines sent to an AF_UNIX SOCK_DGRAM socket
(in the abstract namespace when the address starts with ``@``). That is a socket and
forty lines, so venus speaks it itself instead of depending on ``sdnotify`` (untyped,
unmaintained) or ``systemd-python`` (a C extension built against libsystemd's headers,
which Jetson images and wheels often lack). Outside systemd (``$NOTIFY_SOCKET`` unset)
every call is a no-op.

What venus sends (``systemd/venus.service`` is ``Type=notify``, ``WatchdogSec=30s``):

- ``STATUS=...`` as the state changes: loading engines, warming up, listening, a lost
  device, stalled, reloading, stopping (``systemctl status`` shows the latest);
- ``EXTEND_TIMEOUT_USEC=`` every ``EXTEND_EVERY_S`` while starting (``extending_timeout``),
  so a slow first load does not hit ``TimeoutStartSec`` (for ``EXTEND_MAX_S`` at most);
- ``READY=1`` once the engines are loaded and warmed up and the devices are open;
- ``WATCHDOG=1`` while the chunk loop makes progress (``watchdog.ProgressWatchdog``);
- ``RELOADING=1`` (with ``MONOTONIC_USEC``, systemd >= 253) then ``READY=1`` around a
  SIGHUP reload; ``STOPPING=1`` on SIGTERM / SIGINT.

Sending never raises into the daemon: a failure is logged once at WARNING (then at
DEBUG) and the message is dropped. The socket is made once and ``sendto`` sends a whole
datagram atomically, so any thread (a signal handler too) may call any method.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 1.0  # a full receive queue in systemd must not hold the daemon longer
EXTEND_BY_S = 30.0  # each EXTEND_TIMEOUT_USEC asks for this much more time to start
EXTEND_EVERY_S = 10.0  # and is sent this often, well inside it
EXTEND_MAX_S = 1800.0  # then no more: a start that hangs must still time out


class Notifier:
    """Speaks sd_notify to ``address`` (``$NOTIFY_SOCKET``); a no-op without one."""

    def __init__(self, address: str | None) -> None:
        self.address = address or None
        self._target = ""
        self._sock: socket.socket | None = None
        self._warn_once = threading.Lock()  # taken by the first failure, never released
        if self.address is None:
            return
        if self.address.startswith("@"):
            self._target = "\0" + self.address[1:]  # the abstract namespace
        elif self.address.startswith("/"):
            self._target = self.address
        else:  # vsock:CID:PORT (systemd >= 254 in VMs) is not for a daemon on a device
            log.warning(
                "NOTIFY_SOCKET=%r is not a unix socket path; not notifying systemd", address
            )
            return
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # not inherited (PEP 446)
        self._sock.settimeout(SEND_TIMEOUT_S)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        return cls(environ.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *fields: str) -> bool:
        """One datagram of ``KEY=VALUE`` fields. -> whether it was sent."""
        if self._sock is None:
            return False
        try:
            self._sock.sendto("\n".join(fields).encode(), self._target)
        except OSError as e:
            if self._warn_once.acquire(blocking=False):
                log.warning(
                    "sd_notify to %s failed: %s; systemd may miss state changes", self.address, e
                )
            else:
                log.debug("sd_notify %s failed: %s", fields, e)
            return False
        log.debug("sd_notify: %s", " ".join(fields))
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: str = "stopping") -> bool:
        return self.send("STOPPING=1", f"STATUS={status}")

    def reloading(self, status: str = "reloading the configuration") -> bool:
        # MONOTONIC_USEC: CLOCK_MONOTONIC, which time.monotonic_ns reads on Linux.
        usec = time.monotonic_ns() // 1000
        return self.send("RELOADING=1", f"STATUS={status}", f"MONOTONIC_USEC={usec}")

    def extend_timeout(self, seconds: float) -> bool:
        return self.send(f"EXTEND_TIMEOUT_USEC={round(seconds * 1e6)}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


@contextmanager
def extending_timeout(
    notifier: Notifier,
    by_s: float = EXTEND_BY_S,
    every_s: float = EXTEND_EVERY_S,
    max_s: float = EXTEND_MAX_S,
) -> Iterator[None]:
    """While the block runs, ask systemd every ``every_s`` for ``by_s`` more to start,
    for at most ``max_s`` (an engine load that hangs must not extend it for ever)."""
    if not notifier.enabled:
        yield
        return
    done = threading.Event()

    def keep_asking() -> None:
        end = time.monotonic() + max_s
        while time.monotonic() < end:
            notifier.extend_timeout(by_s)
            if done.wait(every_s):
                return
        log.warning(
            "still starting after %.0f s: no more EXTEND_TIMEOUT_USEC; systemd's "
            "TimeoutStartSec applies from now",
            max_s,
        )

    thread = threading.Thread(target=keep_asking, name="venus-extend-timeout", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2.0)


def watchdog_interval_s(
    environ: Mapping[str, str] = os.environ, pid: int | None = None
) -> float | None:
    """sd_watchdog_enabled(3): the interval within which systemd wants ``WATCHDOG=1``, or
    None. ``$WATCHDOG_USEC`` is a positive integer; ``$WATCHDOG_PID``, when set, must be
    this process (else the watchdog is another's: the shell that started us, say). Unset
    ``$WATCHDOG_PID`` means this process, as in libsystemd."""
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner:
        if not owner.isdigit():
            log.warning("WATCHDOG_PID=%r is not a process id; no watchdog", owner)
            return None
        if int(owner) != (os.getpid() if pid is None else pid):
            return None
    if not usec.isdigit() or int(usec) == 0:
        log.warning("WATCHDOG_USEC=%r is not a positive integer; no watchdog", usec)
        return None
    return int(usec) / 1e6
