"""Audio backends behind one small protocol, device listing and device lookup.

Backends: PortAudio through sounddevice (``backend_sounddevice``, the default) or pyaudio
(``backend_pyaudio``, an optional extra, untested). Each is one object per process.

PortAudio scans its devices once, when it is initialised. A device that appears later,
such as a restarted PulseAudio or a replugged USB microphone, is found only after a
re-initialisation (``rescan``), and that ends every stream open in the process. So a
rescan happens only when an open failed, only if nobody rescanned since the caller last
looked (a microphone and a speaker that lose their devices together rescan once between
them), and, while other streams are live, at most every ``RESCAN_WITH_LIVE_STREAMS_S``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from venus.errors import DeviceError

log = logging.getLogger(__name__)

BackendName = Literal["sounddevice", "pyaudio"]
Direction = Literal["input", "output"]
Block = npt.NDArray[np.float32]  # frames x channels
InputCallback = Callable[[Block, float, bool], None]
"""Called per captured block: (block, capture_delay_s: how long ago its first frame was
captured, overflowed). Runs on the audio thread: copy, never block."""
OutputCallback = Callable[[Block, float, bool], None]
"""Called per block to play: (block to fill in place, play_delay_s: how long until its first
frame is heard, underflowed). Runs on the audio thread: never block."""

RESCAN_WITH_LIVE_STREAMS_S = 30.0  # a rescan ends other devices' streams: at most this often
_MAX_PLAUSIBLE_DELAY_S = 2.0  # PortAudio reports 0 (or garbage) when it has no timing info


@dataclass(frozen=True)
class AudioDevice:
    """One device as the backend lists it (for ``venus doctor`` and error messages)."""

    index: int
    name: str
    max_input_channels: int
    max_output_channels: int
    default_rate_hz: float
    default_input: bool
    default_output: bool

    def describe(self) -> str:
        flags = "".join(
            [" [default in]" * self.default_input, " [default out]" * self.default_output]
        )
        return (
            f"{self.index}: {self.name!r} ({self.max_input_channels} in, "
            f"{self.max_output_channels} out, {self.default_rate_hz:.0f} Hz){flags}"
        )


class StreamHandle(Protocol):
    """An open stream; every method is safe after the device or PortAudio went away."""

    @property
    def latency_s(self) -> float: ...

    def start(self) -> None:
        """Start the callbacks; ``DeviceError`` (and the stream closed) if that fails."""

    def alive(self) -> bool:
        """False once the stream ended, failed, or PortAudio was re-initialised."""

    def close(self) -> None:
        """Stop and release the stream; idempotent."""


class AudioBackend(Protocol):
    name: str

    def list_devices(self) -> list[AudioDevice]: ...

    def generation(self) -> int:
        """How many times the device list was rescanned."""

    def rescan(self, seen_generation: int, *, force: bool = False) -> None:
        """Re-initialise (fresh device list) unless someone did since ``seen_generation``;
        unless ``force``, also not if other streams are live and the last rescan is recent."""

    def open_input(
        self, device: int, rate_hz: int, channels: int, block_frames: int, callback: InputCallback
    ) -> StreamHandle: ...

    def open_output(
        self,
        device: int,
        rate_hz: int,
        channels: int,
        block_frames: int,
        latency_s: float,
        callback: OutputCallback,
    ) -> StreamHandle: ...


@functools.cache
def get_backend(name: BackendName) -> AudioBackend:
    """The backend called ``name`` (one per process, like PortAudio's state).

    ``DeviceError`` with the install command if pyaudio is asked for and missing.
    """
    if name == "sounddevice":
        from venus.hw.backend_sounddevice import SoundDeviceBackend

        return SoundDeviceBackend()
    from venus.hw.backend_pyaudio import PyAudioBackend  # optional, untested: see there

    return PyAudioBackend()


def list_devices(backend: BackendName = "sounddevice") -> list[AudioDevice]:
    """Every device the backend sees now (the list PortAudio scanned when it started)."""
    return get_backend(backend).list_devices()


def rescan_devices(backend: BackendName = "sounddevice") -> None:
    """Re-initialise PortAudio now so it sees the current devices (tests, ``venus doctor``).

    Ends every stream open in the process: call it before opening devices, not during.
    """
    found = get_backend(backend)
    found.rescan(found.generation(), force=True)


def find_device(backend: AudioBackend, spec: str | int, direction: Direction) -> AudioDevice:
    """The device ``spec`` names: "default", an index (int or digits) or a name substring.

    Name matching is case-insensitive and prefers an exact name; ``DeviceError`` lists the
    devices that can do ``direction`` when nothing matches.
    """
    devices = backend.list_devices()
    usable = [d for d in devices if _channels(d, direction) > 0]
    text = str(spec).strip()
    if text.lower() == "default":
        found = [
            d for d in usable if (d.default_input if direction == "input" else d.default_output)
        ]
    elif text.isdigit():
        found = [d for d in usable if d.index == int(text)]
    else:
        found = [d for d in usable if d.name.lower() == text.lower()]
        found = found or [d for d in usable if text.lower() in d.name.lower()]
    if found:
        if len(found) > 1:
            log.debug(
                "%s device %r matches %d devices; using %s",
                direction,
                text,
                len(found),
                found[0].name,
            )
        return found[0]
    listing = "; ".join(d.describe() for d in usable) or "none"
    raise DeviceError(
        f"no {direction} device matches {text!r} ({backend.name}); available {direction} "
        f"devices: {listing}. Set the device to 'default', an index or a name substring "
        "from this list (`venus doctor` shows it too)."
    )


def _channels(device: AudioDevice, direction: Direction) -> int:
    return device.max_input_channels if direction == "input" else device.max_output_channels


def plausible_delay(delay_s: float, fallback_s: float) -> float:
    """``delay_s`` if PortAudio's timing info looks real, else the stream's latency."""
    return delay_s if 0.0 < delay_s < _MAX_PLAUSIBLE_DELAY_S else fallback_s
