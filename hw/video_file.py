"""Frames from a video file by schedule time, for offline runs (``venus demo``).

Unlike ``venus.hw.camera``, nothing is paced by a clock: the caller asks for the frame
showing at ``t_s`` seconds into the file and gets the last frame whose timestamp
(``index / fps``) is at or before it. Asking with non-decreasing times only decodes
forward; an earlier time reopens the file and seeks. The same time always gives the
same picture. A frame's ``seq`` is its index + 1 and its ``captured_at_s`` its time in
the file (``index / fps``), not a ``time.monotonic()`` reading as from a camera.

Timestamps come from the frame rate the container declares, not from per-frame
timestamps: a variable-frame-rate file is read as if its frames were evenly spaced.
"""

from __future__ import annotations

import logging
import math
import shlex
from pathlib import Path
from types import TracebackType
from typing import Any

import cv2

from venus.errors import DeviceError
from venus.hw.frames import VISION_SIZE, Frame, Image, letterbox
from venus.hw.video_source import capture_fps, read_frame

logger = logging.getLogger(__name__)

# A time this close below a frame's timestamp counts as that frame's: k / fps * fps can
# land a hair under k in floating point.
_TIME_SLACK_FRAMES = 1e-6


class VideoFile:
    """A video file read frame by frame at schedule times; not thread-safe."""

    def __init__(self, path: Path | str, size: int = VISION_SIZE) -> None:
        """Open ``path`` and read its first frame.

        Args:
            path: a video file OpenCV can read (MJPG in AVI reads everywhere).
            size: side in px of the letterboxed square frames.

        Raises:
            DeviceError: naming the path, when it is missing, unreadable, has no frame
                rate or no frames.
            ValueError: ``size`` < 1.
        """
        if size < 1:
            raise ValueError(f"VideoFile size must be at least 1 px, got {size}")
        self.path = Path(path)
        self.size = size
        if not self.path.is_file():
            raise DeviceError(
                f"video file {str(self.path)!r}: no such file; give the path of a video file"
            )
        self._cap: Any = self._capture()
        self._current: Frame | None = None  # the last frame decoded; the capture reads on
        self.fps: float = capture_fps(self._cap)
        if self.fps <= 0:
            self.close()
            raise DeviceError(
                f"video file {str(self.path)!r} declares no frame rate, so its frames have "
                f"no times; {self._fix}"
            )
        self._current = self._read_first()
        self.frames: int = self._count_frames()
        logger.debug("opened %s: %d frames at %.3f fps", self.path, self.frames, self.fps)

    @property
    def _fix(self) -> str:
        """What to do about a file OpenCV cannot read."""
        quoted = shlex.quote(str(self.path))
        return (
            f"check that it plays (`ffprobe {quoted}`) or re-encode it as MJPG in AVI "
            f"(`ffmpeg -i {quoted} -c:v mjpeg out.avi`)"
        )

    @property
    def duration_s(self) -> float:
        """How long the file shows: its last frame stays up for 1 / fps."""
        return self.frames / self.fps

    def frame_at(self, t_s: float) -> Frame | None:
        """The last frame whose timestamp is <= ``t_s``; None before the first (t_s < 0).

        Past the end, the last frame. The returned frame's ``image`` is read-only.

        Raises:
            ValueError: ``t_s`` is NaN.
            DeviceError: the file is closed, or it could not be decoded where it could be
                before (it changed while being read).
        """
        current = self._current
        if current is None:
            raise DeviceError(f"video file {str(self.path)!r} is closed")
        if math.isnan(t_s):
            raise ValueError("frame_at needs a time, got NaN")
        if t_s < 0:
            return None
        position = t_s * self.fps + _TIME_SLACK_FRAMES  # in frames
        index = self.frames - 1 if position >= self.frames else math.floor(position)
        if index < current.seq - 1:
            self._seek(index)
        if not self._decode_to(index):  # ended early: self.frames now says where
            self._seek(self.frames - 1)
            if not self._decode_to(self.frames - 1):
                raise DeviceError(
                    f"video file {str(self.path)!r}: frame {self.frames} decoded before but "
                    "not now; did the file change while being read?"
                )
        return self._current

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
        self._current = None

    def __enter__(self) -> VideoFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _capture(self) -> Any:
        """A new ``cv2.VideoCapture`` on the file, opened."""
        try:
            cap = cv2.VideoCapture(str(self.path))
        except cv2.error as e:
            raise DeviceError(
                f"video file {str(self.path)!r}: OpenCV failed: {e}; {self._fix}"
            ) from e
        if not cap.isOpened():
            cap.release()
            raise DeviceError(f"video file {str(self.path)!r}: OpenCV cannot read it; {self._fix}")
        return cap

    def _read_first(self) -> Frame:
        image = read_frame(self._cap)
        if image is None:
            self.close()
            raise DeviceError(f"video file {str(self.path)!r} has no frames; {self._fix}")
        return self._frame(0, image)

    def _rewind(self) -> None:
        """Reopen the file and decode frame 0."""
        if self._cap is not None:
            self._cap.release()
        self._cap = self._capture()
        self._current = self._read_first()

    def _count_frames(self) -> int:
        """The frame count the container declares, else counted by grabbing every frame."""
        declared = self._cap.get(cv2.CAP_PROP_FRAME_COUNT)
        if math.isfinite(declared) and declared >= 1:
            return int(declared)
        count = 1  # frame 0 is decoded
        while self._cap.grab():
            count += 1
        self._rewind()
        return count

    def _decode_to(self, index: int) -> bool:
        """Decode forward from the current frame to frame ``index``, skipping frames between.

        Returns False when the file ends first, after lowering ``frames`` to what exists.
        """
        assert self._current is not None
        position = self._current.seq  # index of the frame the capture reads next
        while position < index:
            if not self._cap.grab():
                return self._ended_at(position)
            position += 1
        if position == index:
            image = read_frame(self._cap)
            if image is None:
                return self._ended_at(position)
            self._current = self._frame(index, image)
        return True

    def _ended_at(self, position: int) -> bool:
        """The file ended at frame ``position``, before its declared end."""
        logger.info("%s: declares %d frames but has %d", self.path, self.frames, position)
        self.frames = min(self.frames, position)
        return False

    def _seek(self, index: int) -> None:
        """Reopen the file and go to frame ``index`` or before it.

        Seeks with CAP_PROP_POS_FRAMES when the backend says it landed where asked, and
        starts from frame 0 otherwise; ``_decode_to`` goes on from there.
        """
        self._rewind()
        if index < 2:
            return
        landed = self._cap.set(cv2.CAP_PROP_POS_FRAMES, index) and (
            self._cap.get(cv2.CAP_PROP_POS_FRAMES) == index
        )
        image = read_frame(self._cap) if landed else None
        if image is not None:
            self._current = self._frame(index, image)
        else:
            logger.debug(
                "%s: seeking to frame %d failed; decoding from the start", self.path, index
            )
            self._rewind()

    def _frame(self, index: int, image_bgr: Image) -> Frame:
        height, width = image_bgr.shape[:2]
        image = letterbox(image_bgr, self.size)
        image.setflags(write=False)
        return Frame(image, index + 1, index / self.fps, width, height)
