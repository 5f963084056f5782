r'''Camera sources: one string each, parsed, checked and opened with the right OpenCV backend.

Sources (``video.source`` in ``venus.toml``), read by ``parse_source``:

- ``0``, ``1``, ...: a V4L2 device index; ``/dev/video0`` or a stable
  ``/dev/v4l/by-id/...`` path also works (and survives re-plugging in another port).
- ``gst:PIPELINE``: a GStreamer pipeline ending in ``appsink``; needs an OpenCV built
  with GStreamer (JetPack's is; the pip wheels are not). The Jetson CSI camera, as a
  TOML multi-line string (a line-ending backslash joins the lines)::

      source = """gst:nvarguscamerasrc sensor-id=0 \
        ! video/x-raw(memory:NVMM),width=1280,height=720,framerate=30/1 ! nvvidconv \
        ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR \
        ! appsink drop=true max-buffers=1 sync=false"""

  (``JETSON_CSI_SOURCE`` is the same string.) ``drop=true max-buffers=1`` keeps
  GStreamer from queueing old frames; ``sensor-id`` picks the CSI port.
- ``rtsp://``, ``rtsps://``, ``rtmp://``, ``http://``, ``https://``: a network stream
  read through FFmpeg (an IP camera's RTSP stream, an MJPEG-over-HTTP stream).
- anything else: a video file.

No threads and no state: ``venus.hw.camera`` runs these on its grabber thread.
'''

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import cv2

from venus.errors import DeviceError
from venus.hw.frames import Image

OPEN_TIMEOUT_MS = 5000  # FFmpeg: give up connecting to a network stream after this
READ_TIMEOUT_MS = 5000  # FFmpeg: a stream silent this long counts as dropped
JETSON_CSI_SOURCE = (  # the CSI camera on a Jetson, 1280x720 at 30 fps
    "gst:nvarguscamerasrc sensor-id=0"
    " ! video/x-raw(memory:NVMM),width=1280,height=720,framerate=30/1 ! nvvidconv"
    " ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR"
    " ! appsink drop=true max-buffers=1 sync=false"
)
URL_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https")
ACCEPTED = (
    "use a V4L2 index ('0') or device path ('/dev/video0'), 'gst:PIPELINE' ending in "
    "appsink, an rtsp://, rtsps://, rtmp://, http:// or https:// URL, or a video file path"
)

SourceKind = Literal["v4l2", "gstreamer", "url", "file"]

_CANNOT_OPEN: dict[SourceKind, str] = {
    "v4l2": "could not open the V4L2 device (unplugged, busy, or no permission: "
    "is the service user in the 'video' group? `v4l2-ctl --list-devices` lists cameras)",
    "gstreamer": "GStreamer could not start the pipeline (try it with gst-launch-1.0, "
    "replacing appsink by fakesink)",
    "url": "could not connect to the stream (is the URL right and the camera reachable?)",
    "file": "OpenCV could not read the file as a video",
}


@dataclass(frozen=True)
class CameraSource:
    """A parsed ``video.source``: which OpenCV backend opens it, and with what."""

    kind: SourceKind
    argument: int | str  # V4L2 index or device path, pipeline, URL, or file path
    text: str  # as configured; names the camera in events and messages

    @property
    def live(self) -> bool:
        """Whether the source can come back after it fails (a file cannot)."""
        return self.kind != "file"


def parse_source(text: str) -> CameraSource:
    """Read a camera source string (see the module docstring for the forms).

    Raises:
        DeviceError: naming the source and the accepted forms.
    """
    s = text.strip()
    if not s:
        raise DeviceError(f"camera source {text!r} is empty; {ACCEPTED}")
    if s.startswith("gst:"):
        pipeline = s[len("gst:") :].strip()
        if "appsink" not in pipeline:
            raise DeviceError(
                f"camera source {text!r}: a GStreamer pipeline for OpenCV must end in "
                "appsink, e.g. 'gst:videotestsrc ! videoconvert ! appsink'"
            )
        return CameraSource("gstreamer", pipeline, text)
    if re.fullmatch(r"[0-9]+", s):
        return CameraSource("v4l2", int(s), text)
    if re.fullmatch(r"-[0-9]+", s):
        raise DeviceError(f"camera source {text!r}: a V4L2 index is 0 or more; {ACCEPTED}")
    if s.startswith("/dev/"):
        return CameraSource("v4l2", s, text)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", s)
    if scheme is not None:
        if scheme.group(1).lower() not in URL_SCHEMES:
            raise DeviceError(
                f"camera source {text!r}: unsupported URL scheme {scheme.group(1)!r}; {ACCEPTED}"
            )
        if not urlsplit(s).hostname:
            raise DeviceError(f"camera source {text!r}: the URL has no host; {ACCEPTED}")
        return CameraSource("url", s, text)
    return CameraSource("file", s, text)


def check_openable(source: CameraSource) -> None:
    """Raise ``DeviceError`` if ``source`` can never open here, however long one waits."""
    if source.kind == "file" and not Path(str(source.argument)).is_file():
        raise DeviceError(f"camera source {source.text!r}: no such file; {ACCEPTED}")
    if source.kind == "gstreamer" and not cv2.videoio_registry.hasBackend(cv2.CAP_GSTREAMER):
        raise DeviceError(
            f"camera source {source.text!r}: this OpenCV has no GStreamer support "
            "(see cv2.getBuildInformation()); use the system OpenCV (JetPack's "
            "python3-opencv) in the venv (--system-site-packages), or a V4L2 / URL source"
        )


def open_capture(source: CameraSource, width: int, height: int) -> tuple[Any, Image] | str:
    """Open ``source`` and read its first frame: ``(cv2.VideoCapture, BGR image)``, or why not.

    ``width`` x ``height`` (px) is requested from V4L2 cameras only; the others decide
    their own size (a GStreamer pipeline says it in its caps).
    """
    kind, arg = source.kind, source.argument
    try:
        if kind == "v4l2":
            cap = cv2.VideoCapture(arg, cv2.CAP_V4L2)
        elif kind == "gstreamer":
            cap = cv2.VideoCapture(arg, cv2.CAP_GSTREAMER)
        elif kind == "url":
            timeouts = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS]
            timeouts += [cv2.CAP_PROP_READ_TIMEOUT_MSEC, READ_TIMEOUT_MS]
            cap = cv2.VideoCapture(arg, cv2.CAP_FFMPEG, timeouts)
        else:
            cap = cv2.VideoCapture(arg)
    except cv2.error as e:
        return f"OpenCV could not open it: {e}"
    if not cap.isOpened():
        cap.release()
        return _CANNOT_OPEN[kind]
    if kind == "v4l2":
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
    cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # backends without a buffer setting ignore it
    image = read_frame(cap)
    if image is None:
        cap.release()
        return "it opened but delivered no frame"
    return cap, image


def read_frame(cap: Any) -> Image | None:
    """The next BGR frame from a ``cv2.VideoCapture``, or None when it delivered none."""
    try:
        ok, image = cap.read()
    except cv2.error:
        return None
    if not ok or image is None or image.size == 0:
        return None
    frame: Image = image
    return frame


def capture_fps(cap: Any) -> float:
    """The frame rate (Hz) a ``cv2.VideoCapture`` reports, or 0.0 when it does not know."""
    fps = float(cap.get(cv2.CAP_PROP_FPS))
    return fps if math.isfinite(fps) and fps > 0 else 0.0
