"""Camera source strings: every accepted form, and errors that name the source and the forms."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import pytest

import venus.hw.video_source
from venus.errors import DeviceError
from venus.hw.video_source import JETSON_CSI_SOURCE, check_openable, parse_source

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


@pytest.mark.parametrize(
    ("text", "kind", "argument"),
    [("0", "v4l2", 0), (" 2 ", "v4l2", 2), ("/dev/video1", "v4l2", "/dev/video1"),
     ("gst:videotestsrc ! videoconvert ! appsink", "gstreamer",
      "videotestsrc ! videoconvert ! appsink"),
     ("rtsp://cam.local:554/stream1", "url", "rtsp://cam.local:554/stream1"),
     ("HTTP://127.0.0.1:8080/stream", "url", "HTTP://127.0.0.1:8080/stream"),
     ("clip.avi", "file", "clip.avi"), ("/srv/videos/desk.mp4", "file", "/srv/videos/desk.mp4")],
)  # fmt: skip
def test_parse_source(text: str, kind: str, argument: int | str) -> None:
    source = parse_source(text)
    assert (source.kind, source.argument, source.text) == (kind, argument, text)
    assert source.live == (kind != "file")


@pytest.mark.parametrize(
    ("text", "says"),
    [("", "empty"), ("   ", "empty"), ("-1", "0 or more"), ("gst:", "appsink"),
     ("gst:videotestsrc ! fakesink", "appsink"), ("ftp://host/clip.avi", "scheme 'ftp'"),
     ("http:///stream", "no host")],
)  # fmt: skip
def test_parse_source_errors_name_the_source_and_the_forms(text: str, says: str) -> None:
    with pytest.raises(DeviceError) as info:
        parse_source(text)
    assert repr(text) in str(info.value) and says in str(info.value)
    if "appsink" not in says:
        assert "V4L2 index ('0')" in str(info.value) and "rtsp://" in str(info.value)


def test_the_documented_jetson_csi_source_parses() -> None:
    doc = venus.hw.video_source.__doc__ or ""
    snippet = doc[doc.index('source = """') : doc.index('"""', doc.index('source = """') + 12) + 3]
    assert tomllib.loads(snippet.replace("\n      ", "\n"))["source"] == JETSON_CSI_SOURCE
    source = parse_source(JETSON_CSI_SOURCE)
    assert source.kind == "gstreamer" and str(source.argument).startswith("nvarguscamerasrc")


def test_a_missing_file_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="no such file"):
        check_openable(parse_source(str(tmp_path / "nope.avi")))


@pytest.mark.skipif(
    cv2.videoio_registry.hasBackend(cv2.CAP_GSTREAMER), reason="this OpenCV has GStreamer"
)
def test_gstreamer_without_gstreamer_cannot_open() -> None:
    with pytest.raises(DeviceError, match="no GStreamer support"):
        check_openable(parse_source("gst:videotestsrc ! videoconvert ! appsink"))
