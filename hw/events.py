"""Device events: facts in past tense, small frozen dataclasses with units in their names.

Devices report through an ``EventSink`` passed in by their owner (the daemon's loop or a
test). These are control events: the loop must see them even while it drops stream data
(``priority`` is part of the type, pipecat-style).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

DeviceKind = Literal["microphone", "speaker", "camera"]


@dataclass(frozen=True)
class DeviceLost:
    """A device stopped delivering; the loop keeps running (silence in, no frames)."""

    priority: ClassVar[str] = "control"
    device: DeviceKind
    name: str  # the device or source as configured
    reason: str
    at_s: float  # time.monotonic()


@dataclass(frozen=True)
class DeviceRestored:
    """A lost device works again after a reopen."""

    priority: ClassVar[str] = "control"
    device: DeviceKind
    name: str
    down_s: float  # how long it was gone
    at_s: float


@dataclass(frozen=True)
class Overrun:
    """Audio was lost because the consumer did not keep up (or the device overflowed)."""

    priority: ClassVar[str] = "control"
    device: DeviceKind
    lost_samples: int
    total: int  # overruns counted since the device opened
    at_s: float


@dataclass(frozen=True)
class Underflow:
    """The output device ran dry: the audio callback came too late to fill a buffer, a
    gap was heard, and what plays after it is late against the speaker's clock."""

    priority: ClassVar[str] = "control"
    device: DeviceKind
    count: int  # underflows since the last report
    total: int  # underflows counted since the speaker was made
    at_s: float


HwEvent = DeviceLost | DeviceRestored | Overrun | Underflow
EventSink = Callable[[HwEvent], None]


def ignore_events(_event: HwEvent) -> None:
    """An ``EventSink`` for callers that do not care (tests of one device, tools)."""
