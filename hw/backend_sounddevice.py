"""The sounddevice backend: PortAudio through sounddevice (the default).

PortAudio scans its devices once, when it is initialised; sounddevice does that on import,
which is why this module imports it only on first use. ``rescan`` re-initialises it under
one process-wide lock (see ``backends`` for when), and bumps a generation: a stream opened
before is dead, and its handle never touches PortAudio again (its memory is freed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from venus.errors import DeviceError
from venus.hw.backends import (
    RESCAN_WITH_LIVE_STREAMS_S,
    AudioDevice,
    Block,
    InputCallback,
    OutputCallback,
    StreamHandle,
    plausible_delay,
)

log = logging.getLogger(__name__)


class _PortAudio:
    """Process-wide PortAudio state (through sounddevice): lock, generation, live streams."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.generation = 0
        self.live = 0
        self.rescanned_at_s = -RESCAN_WITH_LIVE_STREAMS_S

    @staticmethod
    def module() -> ModuleType:
        import sounddevice  # initialises PortAudio (scans devices) on first import

        module: ModuleType = sounddevice
        return module


class SoundDeviceBackend:
    """PortAudio through sounddevice (the default backend)."""

    name = "sounddevice"

    def __init__(self) -> None:
        self._pa = _PortAudio()

    def generation(self) -> int:
        return self._pa.generation

    def list_devices(self) -> list[AudioDevice]:
        sd = self._pa.module()
        with self._pa.lock:
            infos: list[dict[str, Any]] = list(sd.query_devices())
            default_in, default_out = _defaults(sd)
        return [
            AudioDevice(
                index=int(info["index"]),
                name=str(info["name"]),
                max_input_channels=int(info["max_input_channels"]),
                max_output_channels=int(info["max_output_channels"]),
                default_rate_hz=float(info["default_samplerate"]),
                default_input=int(info["index"]) == default_in,
                default_output=int(info["index"]) == default_out,
            )
            for info in infos
        ]

    def rescan(self, seen_generation: int, *, force: bool = False) -> None:
        sd = self._pa.module()
        with self._pa.lock:
            now = time.monotonic()
            if self._pa.generation != seen_generation:
                return  # someone rescanned since the caller looked: use that list
            if (
                not force
                and self._pa.live
                and now - self._pa.rescanned_at_s < RESCAN_WITH_LIVE_STREAMS_S
            ):
                log.debug(
                    "not rescanning: %d stream(s) live, last rescan %.0f s ago",
                    self._pa.live,
                    now - self._pa.rescanned_at_s,
                )
                return
            count = max(1, sd._initialized)
            self._pa.generation += 1
            self._pa.live = 0
            self._pa.rescanned_at_s = now
            log.info("re-initialising PortAudio to rescan audio devices")
            try:
                while sd._initialized > 0:
                    sd._terminate()
                for _ in range(count):
                    sd._initialize()
            except sd.PortAudioError as e:
                raise DeviceError(f"PortAudio could not be re-initialised: {e}") from e

    def open_input(
        self, device: int, rate_hz: int, channels: int, block_frames: int, callback: InputCallback
    ) -> StreamHandle:
        sd = self._pa.module()
        handle = _SdHandle(self._pa)

        def on_block(data: Block, _frames: int, time_info: Any, status: Any) -> None:
            delay = time_info.currentTime - time_info.inputBufferAdcTime
            callback(data, plausible_delay(delay, handle.latency_s), bool(status.input_overflow))

        return handle.open(
            lambda: sd.InputStream(
                device=device,
                samplerate=rate_hz,
                channels=channels,
                dtype="float32",
                blocksize=block_frames,
                latency="low",
                callback=on_block,
                finished_callback=handle.mark_finished,
            )
        )

    def open_output(
        self,
        device: int,
        rate_hz: int,
        channels: int,
        block_frames: int,
        latency_s: float,
        callback: OutputCallback,
    ) -> StreamHandle:
        sd = self._pa.module()
        handle = _SdHandle(self._pa)

        def on_block(data: Block, _frames: int, time_info: Any, status: Any) -> None:
            delay = time_info.outputBufferDacTime - time_info.currentTime
            callback(data, plausible_delay(delay, handle.latency_s), bool(status.output_underflow))

        return handle.open(
            lambda: sd.OutputStream(
                device=device,
                samplerate=rate_hz,
                channels=channels,
                dtype="float32",
                blocksize=block_frames,
                latency=latency_s,
                callback=on_block,
                finished_callback=handle.mark_finished,
            )
        )


def _defaults(sd: ModuleType) -> tuple[int, int]:
    try:
        default_in, default_out = (int(i) for i in sd.default.device)
    except (TypeError, ValueError):
        return -1, -1
    hostapi_defaults = sd.query_hostapis()
    ins = {int(h["default_input_device"]) for h in hostapi_defaults}
    outs = {int(h["default_output_device"]) for h in hostapi_defaults}
    return (default_in if default_in >= 0 else max(ins, default=-1)), (
        default_out if default_out >= 0 else max(outs, default=-1)
    )


class _SdHandle:
    """One sounddevice stream, guarded by the PortAudio lock and generation."""

    def __init__(self, pa: _PortAudio) -> None:
        self._pa = pa
        self._stream: Any = None
        self._generation = -1
        self._finished = False
        self.latency_s = 0.0

    def open(self, make: Callable[[], Any]) -> _SdHandle:
        sd = self._pa.module()
        with self._pa.lock:
            try:
                self._stream = make()
            except (sd.PortAudioError, ValueError) as e:
                raise DeviceError(f"could not open the audio stream: {e}") from e
            self._generation = self._pa.generation
            self._pa.live += 1
            self.latency_s = float(self._stream.latency)
        return self

    def mark_finished(self) -> None:
        self._finished = True  # called by PortAudio when the stream ends (or dies)

    def start(self) -> None:
        sd = self._pa.module()
        with self._pa.lock:
            try:
                if self._current():
                    self._stream.start()
                    return
            except sd.PortAudioError as e:
                self.close()
                raise DeviceError(f"could not start the audio stream: {e}") from e
        raise DeviceError("the audio stream was closed before it started")

    def alive(self) -> bool:
        with self._pa.lock:
            return self._current() and not self._finished and bool(self._stream.active)

    def close(self) -> None:
        with self._pa.lock:
            if self._current():
                self._stream.close(ignore_errors=True)
                self._pa.live -= 1
            self._stream = None

    def _current(self) -> bool:
        return self._stream is not None and self._generation == self._pa.generation
