"""The pyaudio backend: UNTESTED, kept minimal.

pyaudio is an optional extra (``pip install 'realtime-venus[pyaudio]'``) and is not installed
in CI, so nothing here has ever run there. It exists for boards whose vendor ships a pyaudio
but no working sounddevice; prefer the sounddevice backend. Known gaps: no finished
callback (a lost device is noticed by the watchdog when ``is_active`` turns false or the
callbacks stop), and a rescan re-creates the ``PyAudio`` object, which ends its streams.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import Any

import numpy as np

from venus.errors import DeviceError
from venus.hw.backends import (
    AudioDevice,
    InputCallback,
    OutputCallback,
    StreamHandle,
    plausible_delay,
)

INSTALL_HINT = "pip install 'realtime-venus[pyaudio]'"


class PyAudioBackend:
    """PortAudio through pyaudio (UNTESTED)."""

    name = "pyaudio"

    def __init__(self) -> None:
        try:
            pyaudio = importlib.import_module("pyaudio")  # no type stubs; optional extra
        except ImportError as e:
            raise DeviceError(
                f"audio backend 'pyaudio' is not installed; install it with {INSTALL_HINT} "
                "or set audio.backend = 'sounddevice'"
            ) from e
        self._mod: Any = pyaudio
        self._pa: Any = pyaudio.PyAudio()
        self._lock = threading.RLock()
        self._generation = 0

    def generation(self) -> int:
        return self._generation

    def list_devices(self) -> list[AudioDevice]:
        with self._lock:
            default_in = _default_index(self._pa.get_default_input_device_info)
            default_out = _default_index(self._pa.get_default_output_device_info)
            infos = [
                self._pa.get_device_info_by_index(i) for i in range(self._pa.get_device_count())
            ]
        return [
            AudioDevice(
                index=int(info["index"]),
                name=str(info["name"]),
                max_input_channels=int(info["maxInputChannels"]),
                max_output_channels=int(info["maxOutputChannels"]),
                default_rate_hz=float(info["defaultSampleRate"]),
                default_input=int(info["index"]) == default_in,
                default_output=int(info["index"]) == default_out,
            )
            for info in infos
        ]

    def rescan(self, seen_generation: int, *, force: bool = False) -> None:
        with self._lock:
            if seen_generation != self._generation:
                return
            self._generation += 1
            self._pa.terminate()
            self._pa = self._mod.PyAudio()

    def open_input(
        self, device: int, rate_hz: int, channels: int, block_frames: int, callback: InputCallback
    ) -> StreamHandle:
        handle = _PyAudioHandle(self)

        def on_block(data: bytes, _n: int, info: dict[str, float], status: int) -> tuple[None, int]:
            block = np.frombuffer(data, np.float32).reshape(-1, channels)
            delay = info["current_time"] - info["input_buffer_adc_time"]
            overflow = bool(status & self._mod.paInputOverflow)
            callback(block, plausible_delay(delay, handle.latency_s), overflow)
            return None, int(self._mod.paContinue)

        return handle.open(
            format=self._mod.paFloat32,
            channels=channels,
            rate=rate_hz,
            input=True,
            input_device_index=device,
            frames_per_buffer=block_frames,
            stream_callback=on_block,
            start=False,
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
        handle = _PyAudioHandle(self)

        def on_block(_d: None, n: int, info: dict[str, float], status: int) -> tuple[bytes, int]:
            block = np.zeros((n, channels), np.float32)
            delay = info["output_buffer_dac_time"] - info["current_time"]
            underflow = bool(status & self._mod.paOutputUnderflow)
            callback(block, plausible_delay(delay, handle.latency_s), underflow)
            return block.tobytes(), int(self._mod.paContinue)

        return handle.open(
            format=self._mod.paFloat32,
            channels=channels,
            rate=rate_hz,
            output=True,
            output_device_index=device,
            frames_per_buffer=block_frames,
            stream_callback=on_block,
            start=False,
        )


def _default_index(get_info: Any) -> int:
    try:
        return int(get_info()["index"])
    except (OSError, KeyError):
        return -1


class _PyAudioHandle:
    def __init__(self, backend: PyAudioBackend) -> None:
        self._backend = backend
        self._stream: Any = None
        self._generation = -1
        self.latency_s = 0.0

    def open(self, **kwargs: Any) -> _PyAudioHandle:
        with self._backend._lock:
            try:
                self._stream = self._backend._pa.open(**kwargs)
            except (OSError, ValueError) as e:
                raise DeviceError(f"could not open the audio stream (pyaudio): {e}") from e
            self._generation = self._backend._generation
            latency = self._stream.get_input_latency() if kwargs.get("input") else None
            self.latency_s = float(latency or self._stream.get_output_latency())
        return self

    def start(self) -> None:
        with self._backend._lock:
            try:
                if self._current():
                    self._stream.start_stream()
                    return
            except OSError as e:
                self.close()
                raise DeviceError(f"could not start the audio stream (pyaudio): {e}") from e
        raise DeviceError("the audio stream was closed before it started")

    def alive(self) -> bool:
        with self._backend._lock:
            return self._current() and bool(self._stream.is_active())

    def close(self) -> None:
        with self._backend._lock:
            if self._current():
                with contextlib.suppress(OSError):
                    self._stream.close()
            self._stream = None

    def _current(self) -> bool:
        return self._stream is not None and self._generation == self._backend._generation
