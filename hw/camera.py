"""The camera: a grabber thread that keeps only the newest frame, and reconnects.

Sources are one string each (``video.source``); ``venus.hw.video_source`` lists the forms
(V4L2 index or path, ``gst:PIPELINE`` with the Jetson CSI example, RTSP / HTTP URL,
video file) and opens them.

No stale frames: the grabber thread reads the source continuously and keeps only the
newest frame, so the driver's and the network's buffers never fill (and
``CAP_PROP_BUFFERSIZE`` is 1 where the backend supports it). ``latest()`` hands out that
frame, letterboxed on first use; the frontend takes one per chunk. A file source is read
at its own frame rate, like a camera.

Devices come and go: when reads fail the camera emits ``DeviceLost`` once, drops its
frame (``latest()`` is None: the loop runs without video), and reopens with backoff
(0.5 s, doubling, capped at ``reconnect_max_s``); the first frame after that emits
``DeviceRestored``. A live source missing at start is handled the same way. A file has
nothing to wait for: at its end it rewinds if ``loop_file``, else it emits
``DeviceLost(reason="end of file")`` and the camera is ``ended`` for good (no retries).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import astuple, dataclass
from types import TracebackType
from typing import Any, Literal

import cv2

from venus.errors import DeviceError
from venus.hw.events import DeviceLost, DeviceRestored, EventSink, ignore_events
from venus.hw.frames import VISION_SIZE, CameraInfo, Frame, Image, letterbox
from venus.hw.video_source import (
    CameraSource,
    capture_fps,
    check_openable,
    open_capture,
    parse_source,
    read_frame,
)

__all__ = ["Camera", "CameraInfo", "CameraSource", "CameraState", "Frame", "parse_source"]

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5  # wait before the first reopen; doubles up to reconnect_max_s
JOIN_TIMEOUT_S = 15.0  # stop(): longer than any blocking read (V4L2 waits up to 10 s)
FILE_FPS_FALLBACK = 30.0  # Hz, when a file does not say its frame rate

CameraState = Literal["disabled", "stopped", "opening", "running", "lost", "ended"]


@dataclass(frozen=True)
class _Grab:
    """The newest decoded frame, before letterboxing (that is done on first use)."""

    image_bgr: Image
    seq: int
    captured_at_s: float


class Camera:
    """A camera that keeps only its newest frame and survives its source coming and going.

    Events go to ``on_event`` from the grabber thread: the sink must be thread-safe and
    quick (a queue's ``put``), and must not raise.

    Args:
        source: see ``parse_source``.
        size: side of the letterboxed square frames in px.
        enabled: privacy switch; False never opens the device and ``latest()`` is None.
        capture_width: width in px requested from a V4L2 camera (others ignore it).
        capture_height: height in px requested from a V4L2 camera.
        reconnect_max_s: longest wait between reopen attempts.
        on_event: receives ``DeviceLost`` / ``DeviceRestored``.
        loop_file: rewind a file source at its end instead of ending.
    """

    def __init__(
        self,
        source: str,
        *,
        size: int = VISION_SIZE,
        enabled: bool = True,
        capture_width: int = 1280,
        capture_height: int = 720,
        reconnect_max_s: float = 30.0,
        on_event: EventSink = ignore_events,
        loop_file: bool = False,
    ) -> None:
        if size < 1 or capture_width < 1 or capture_height < 1 or not reconnect_max_s > 0:
            raise ValueError("size, capture_width/height and reconnect_max_s must be positive")
        self.source = parse_source(source)
        self._size = size
        self._enabled = enabled
        self._capture_size = (capture_width, capture_height)
        self._reconnect_max_s = reconnect_max_s
        self._on_event = on_event
        self._loop_file = loop_file
        self._cond = threading.Condition()  # guards everything below
        self._state: CameraState = "stopped" if enabled else "disabled"
        self._grab: _Grab | None = None
        self._frame: Frame | None = None  # letterboxed self._grab, once asked for
        self._seq = 0
        self._info: CameraInfo | None = None
        self._last_error = "not started"
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_disabled = False

    @property
    def state(self) -> CameraState:
        with self._cond:
            return self._state

    def start(self) -> None:
        """Start the grabber thread; opening happens there, so this does not block.

        Raises:
            DeviceError: the source can never work here (no such file, or a GStreamer
                pipeline on an OpenCV without GStreamer). A live device that is missing
                now is not an error: it is reported lost and retried.
        """
        if not self._enabled:
            if not self._said_disabled:
                log.info(
                    "camera disabled (video.enabled = false): %s is never opened", self.source.text
                )
                self._said_disabled = True
            return
        if self._thread is not None:
            return
        check_openable(self.source)
        self._stopping.clear()
        self._set_state("opening")
        log.info("camera %s: opening (%s)", self.source.text, self.source.kind)
        self._thread = threading.Thread(target=self._run, name="camera-grabber", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the grabber thread, which releases the device."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        thread.join(JOIN_TIMEOUT_S)
        if thread.is_alive():
            log.warning("camera %s: grabber still blocked in OpenCV after stop", self.source.text)
        with self._cond:
            self._grab = self._frame = self._info = None
        self._set_state("stopped")

    def __enter__(self) -> Camera:
        self.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()

    def latest(self) -> Frame | None:
        """The newest frame, or None while disabled, stopped, opening, lost or ended."""
        with self._cond:
            grab, frame = self._grab, self._frame
        if grab is None:
            return None
        if frame is not None and frame.seq == grab.seq:
            return frame
        image = letterbox(grab.image_bgr, self._size)
        image.flags.writeable = False
        height, width = grab.image_bgr.shape[:2]
        frame = Frame(image, grab.seq, grab.captured_at_s, width, height)
        with self._cond:
            if self._frame is None or self._frame.seq < frame.seq:
                self._frame = frame
        return frame

    def wait_frame(self, after_seq: int, timeout_s: float) -> Frame | None:
        """Wait up to ``timeout_s`` for a frame newer than ``after_seq`` (0: any frame).

        Returns None at the timeout, or at once when no frame can come (disabled,
        stopped, ended).
        """
        with self._cond:
            self._cond.wait_for(
                lambda: (
                    (self._grab is not None and self._grab.seq > after_seq)
                    or self._state in ("disabled", "stopped", "ended")
                ),
                timeout_s,
            )
        frame = self.latest()
        return frame if frame is not None and frame.seq > after_seq else None

    def info(self) -> CameraInfo:
        """What the open source delivers.

        Raises:
            DeviceError: the camera is not delivering frames now, with the last reason.
        """
        with self._cond:
            if self._info is not None:
                return self._info
            state, error = self._state, self._last_error
        raise DeviceError(f"camera {self.source.text!r} is {state}: {error}")

    # The grabber thread: everything below runs on it, and it alone touches the capture.

    def _run(self) -> None:
        backoff_s = FIRST_BACKOFF_S
        lost_at_s: float | None = None
        while True:
            opened = open_capture(self.source, *self._capture_size)
            if isinstance(opened, str):
                reason = opened
            else:
                cap, image = opened
                self._opened(cap, image)  # info() is set before the first frame shows
                self._publish(image)
                if lost_at_s is not None:
                    down_s = time.monotonic() - lost_at_s
                    log.info("camera %s: restored after %.1f s", self.source.text, down_s)
                    event = DeviceRestored("camera", self.source.text, down_s, time.monotonic())
                    self._on_event(event)
                    lost_at_s = None
                backoff_s = FIRST_BACKOFF_S
                failure = self._pump(cap)
                cap.release()
                if failure is None:  # asked to stop
                    return
                reason = failure
            if lost_at_s is None:
                lost_at_s = time.monotonic()
                self._lose(reason)
            else:
                log.debug("camera %s: reopen failed: %s", self.source.text, reason)
            if not self.source.live:
                return
            log.debug("camera %s: retrying in %.1f s", self.source.text, backoff_s)
            if self._stopping.wait(backoff_s):
                return
            backoff_s = min(2 * backoff_s, self._reconnect_max_s)

    def _opened(self, cap: Any, image: Image) -> None:
        info = CameraInfo(image.shape[1], image.shape[0], capture_fps(cap), cap.getBackendName())
        with self._cond:
            self._info = info
        self._set_state("running")
        log.info("camera %s: %dx%d at %.1f fps via %s", self.source.text, *astuple(info))

    def _pump(self, cap: Any) -> str | None:
        """Read frames until the source fails (returns why) or stop() (returns None).

        A live source is read as fast as it delivers, which keeps its buffers empty; a
        file is paced at its own frame rate, like a camera.
        """
        period_s = 0.0
        if not self.source.live:
            period_s = 1.0 / (capture_fps(cap) or FILE_FPS_FALLBACK)
        due_s = time.monotonic() + period_s
        while not self._stopping.wait(max(0.0, due_s - time.monotonic())):
            due_s = max(due_s + period_s, time.monotonic() - period_s)
            image = read_frame(cap)
            if image is None and not self.source.live:
                if not self._loop_file:
                    return "end of file"
                cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                image = read_frame(cap)
            if image is None:
                return "reads failed (stream dropped or device unplugged)"
            self._publish(image)
        return None

    def _publish(self, image: Image) -> None:
        with self._cond:
            self._seq += 1
            self._grab = _Grab(image, self._seq, time.monotonic())
            self._cond.notify_all()

    def _lose(self, reason: str) -> None:
        with self._cond:
            self._grab = self._frame = self._info = None
            self._last_error = reason
        self._set_state("lost" if self.source.live else "ended")  # a file does not come back
        level = logging.WARNING if self.source.live else logging.INFO
        log.log(level, "camera %s: lost: %s", self.source.text, reason)
        self._on_event(DeviceLost("camera", self.source.text, reason, time.monotonic()))

    def _set_state(self, state: CameraState) -> None:
        with self._cond:
            self._state = state
            self._cond.notify_all()
