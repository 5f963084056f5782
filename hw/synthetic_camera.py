"""A synthetic camera: drawn frames with ``Camera``'s ``latest`` / ``wait_frame`` / ``info``.

Paced by its clock, like a camera: frame ``seq`` appears ``(seq - 1) / fps`` seconds
after ``start``, and its picture (moving shapes, "frame N" in white) depends only on the
seed and ``seq``. For offline mode and tests; no thread, nothing to release.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import cv2
import numpy as np

from venus.errors import DeviceError
from venus.hw.frames import VISION_SIZE, CameraInfo, Frame, Image


class SyntheticCamera:
    """Drawn frames with the camera's ``latest`` / ``wait_frame`` / ``info`` interface."""

    def __init__(
        self,
        size: int = VISION_SIZE,
        seed: int = 0,
        fps: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 16 or fps <= 0:
            raise ValueError(f"SyntheticCamera needs size >= 16 px and fps > 0, got {size}, {fps}")
        self.size, self.seed, self.fps = size, seed, fps
        self._clock = clock
        self._started_at: float | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._last: Frame | None = None

    def start(self) -> None:
        self._started_at = self._clock()
        self._stopped.clear()

    def stop(self) -> None:
        self._started_at = None
        self._stopped.set()

    def __enter__(self) -> SyntheticCamera:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def state(self) -> Literal["stopped", "running"]:
        return "stopped" if self._started_at is None else "running"

    def info(self) -> CameraInfo:
        """What it delivers; raises DeviceError before ``start``, as a camera does."""
        if self._started_at is None:
            raise DeviceError("synthetic camera is stopped: start() it first")
        return CameraInfo(width=self.size, height=self.size, fps=self.fps, backend="SYNTHETIC")

    def latest(self) -> Frame | None:
        """The newest frame, None before ``start``."""
        started = self._started_at
        if started is None:
            return None
        return self._frame(started, math.floor((self._clock() - started) * self.fps) + 1)

    def wait_frame(self, after_seq: int, timeout_s: float) -> Frame | None:
        """The newest frame with ``seq > after_seq`` (0: any frame).

        Returns None after ``timeout_s``, or at once when stopped, as a camera does.
        """
        started = self._started_at
        if started is None:
            return None
        due_at = started + after_seq / self.fps  # when frame after_seq + 1 appears
        wait_s = due_at - self._clock()
        if wait_s > timeout_s:
            self._stopped.wait(max(0.0, timeout_s))
            return None
        if wait_s > 0 and self._stopped.wait(wait_s):
            return None
        return self.latest()

    def _frame(self, started: float, seq: int) -> Frame:
        with self._lock:
            if self._last is None or self._last.seq != seq:
                image = draw_frame(seq, self.size, self.seed)
                image.setflags(write=False)
                self._last = Frame(image, seq, started + (seq - 1) / self.fps, self.size, self.size)
            return self._last


def draw_frame(seq: int, size: int = VISION_SIZE, seed: int = 0) -> Image:
    """A deterministic RGB test picture: moving shapes and the frame number as text."""
    rng = np.random.default_rng(seed)
    background = tuple(int(c) for c in rng.integers(0, 96, 3))
    image = np.full((size, size, 3), background, np.uint8)
    for shape in range(3):
        colour = tuple(int(c) for c in rng.integers(96, 256, 3))
        start, speed = rng.uniform(0, size, 2), rng.uniform(-6, 6, 2)
        x, y = (_bounce(start[i] + speed[i] * seq * size / VISION_SIZE, size) for i in (0, 1))
        r = max(2, size // (8 + 2 * shape))
        if shape == 0:
            cv2.circle(image, (x, y), r, colour, -1, cv2.LINE_AA)
        elif shape == 1:
            cv2.rectangle(image, (x - r, y - r), (x + r, y + r), colour, -1)
        else:
            corners = np.array([[x, y - r], [x - r, y + r], [x + r, y + r]], np.int32)
            cv2.fillPoly(image, [corners], colour, cv2.LINE_AA)
    scale = size / VISION_SIZE
    cv2.putText(
        image,
        f"frame {seq}",
        (round(12 * scale), round(40 * scale)),
        cv2.FONT_HERSHEY_SIMPLEX,
        1.2 * scale,
        (255, 255, 255),
        max(1, round(2 * scale)),
        cv2.LINE_AA,
    )
    return image


def _bounce(position: float, size: int) -> int:
    """``position`` folded into [0, size) as a ball bouncing between the edges."""
    period = 2 * size
    p = position % period
    return int(p if p < size else period - p - 1)
