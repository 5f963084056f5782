"""``venus run``: the frontend on the live microphone, camera and speaker.

The microphone paces the loop (one chunk per period of its sample clock); the camera
keeps only its newest frame, read at each boundary; the speaker plays the queue and
reports what was heard. Before the devices open, one chunk of silence warms the engines
up (``session.warm_up``). Runs until ``stop`` is set (SIGINT / SIGTERM in the CLI);
``LiveHooks`` tell the service layer (systemd) what happens on the way.
The microphone's chunks go through ``EchoPath`` (``audio.echo_cancellation``) with what
the speaker played as the reference, then the mute switch. Device loss is handled by
``venus.hw``: a lost microphone delivers silence-filled
chunks, a lost camera gives no frame (the chunk runs audio only), a lost speaker drops
audio and reports nothing played.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.channel import HarnessChannel
from venus.daemon.frontend.clock import RealTimeClock
from venus.daemon.frontend.echo import EchoPath
from venus.daemon.frontend.loop import LoopStats
from venus.daemon.frontend.playback import AudioOut
from venus.daemon.frontend.session import Frontend, open_frontend, warm_up
from venus.daemon.frontend.timeline import ChunkRecord, TimelineWriter
from venus.engines.runners import Engines
from venus.hw.aec import make_echo_canceller
from venus.hw.audio import AudioChunk, Microphone
from venus.hw.camera import Camera
from venus.hw.events import EventSink, ignore_events
from venus.hw.frames import VISION_SIZE, Frame
from venus.hw.speaker import Position, Speaker

log = logging.getLogger(__name__)


def _nothing(*_args: object) -> None:
    return None


@dataclass(frozen=True)
class LiveHooks:
    """What a live run tells its owner (the service layer); each is optional."""

    warming_up: Callable[[], None] = _nothing  # the engines are about to be warmed up
    started: Callable[[Frontend], None] = _nothing  # warmed up, devices open; loop's thread
    device: EventSink = ignore_events  # DeviceLost / Restored, Overrun, Underflow (their threads)


class Gain:
    """An ``AudioOut`` that scales what it plays (``playback.volume``)."""

    def __init__(self, out: AudioOut, gain: float) -> None:
        self.out, self.gain = out, gain

    def play(self, pcm: NDArray[np.float32]) -> int:
        return self.out.play(np.clip(pcm * self.gain, -1.0, 1.0).astype(np.float32))

    def flush(self) -> None:
        self.out.flush()

    def position(self) -> Position:
        return self.out.position()


class LiveAudio:
    """Microphone chunks with the assistant's echo removed, silent while ``muted`` is set."""

    def __init__(self, mic: Microphone, echo: EchoPath, muted: threading.Event) -> None:
        self.mic, self.echo, self.muted = mic, echo, muted

    def read(self, timeout_s: float | None = None) -> AudioChunk:
        chunk = self.echo.process(self.mic.read(timeout_s))
        if self.muted.is_set():
            return dataclasses.replace(chunk, samples=np.zeros_like(chunk.samples))
        return chunk


def run_realtime(
    cfg: VenusConfig,
    engines: Engines,
    stop: threading.Event,
    timeline: Path | None = None,
    on_record: Callable[[ChunkRecord], None] = lambda _r: None,
    harness: HarnessChannel | None = None,
    muted: threading.Event | None = None,
    hooks: LiveHooks | None = None,
) -> LoopStats:
    s = engines.manifest.schedule
    a, p, v = cfg.audio, cfg.playback, cfg.video
    hooks = hooks or LiveHooks()
    muted = muted or threading.Event()
    if a.muted:
        muted.set()
    speaker = Speaker(
        p.device,
        backend=a.backend,
        sample_rate=p.sample_rate,
        buffer_ms=p.buffer_ms,
        source_rate=s.sample_rate_out,
        on_event=hooks.device,
    )
    mic = Microphone(
        a.device,
        backend=a.backend,
        sample_rate=a.sample_rate,
        channels=a.channels,
        block_ms=a.block_ms,
        chunk_s=s.chunk_s,
        on_event=hooks.device,
    )
    camera = Camera(
        v.source,
        size=s.image_size or VISION_SIZE,
        enabled=v.enabled and engines.vision is not None,
        capture_width=v.capture_width,
        capture_height=v.capture_height,
        reconnect_max_s=v.reconnect_max_s,
        on_event=hooks.device,
    )

    def frames(_t: float) -> Frame | None:
        return camera.latest()

    with ExitStack() as stack:
        writer = stack.enter_context(TimelineWriter(timeline)) if timeline else None

        def sink(record: ChunkRecord) -> None:
            if writer is not None:
                writer.write(record)
            on_record(record)

        out = Gain(speaker, p.volume) if p.volume != 1.0 else speaker
        echo = EchoPath(
            out, make_echo_canceller(a.echo_cancellation), s.sample_rate_out, p.buffer_ms
        )
        clock = RealTimeClock(s.chunk_s)
        frontend = open_frontend(
            cfg, engines, echo, clock, sink, harness, keep_records=False, resume=True
        )
        stack.callback(frontend.close)
        if stop.is_set():
            return frontend.loop.stats
        hooks.warming_up()
        log.info("engines warmed up in %.2f s (one chunk of silence)", warm_up(frontend))
        if stop.is_set():
            return frontend.loop.stats
        stack.enter_context(speaker)
        stack.enter_context(camera)
        stack.enter_context(mic)
        log.info(
            "listening: %s s chunks, microphone %r, speaker %r, camera %s, echo %s",
            s.chunk_s,
            a.device,
            p.device,
            v.source if camera.state != "disabled" else "off",
            echo.canceller.strategy,
        )
        hooks.started(frontend)
        return frontend.loop.run(frontend.stream, LiveAudio(mic, echo, muted), frames, stop)
