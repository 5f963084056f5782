"""The camera with real OpenCV: video files written here, and a real MJPEG-over-HTTP stream
served here that drops and comes back. No physical camera is needed."""

from __future__ import annotations

import http.server
import logging
import queue
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest

from venus.errors import DeviceError
from venus.hw.camera import Camera, Frame
from venus.hw.events import DeviceLost, DeviceRestored, HwEvent

WIDTH, HEIGHT, FPS = 320, 240, 30.0  # the test videos: 4:3, so 448 px letterboxing pads 56 rows
STEP = 4  # green level per frame index; JPEG keeps flat colour within about +-2
WAIT_S = 10.0  # every wait in this file ends by then


def numbered(index: int) -> npt.NDArray[np.uint8]:
    """A BGR frame whose green level says its index; the number is drawn in a corner too."""
    image = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    image[:] = (50, (STEP * index) % 256, 200)
    cv2.putText(image, str(index), (5, 30), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (255, 255, 255), 2)
    return image


def index_of(frame: Frame) -> int:
    """The frame index read back from a 448 px letterboxed frame's centre (RGB)."""
    centre = frame.image[204:244, 204:244].astype(np.float64)
    assert abs(centre[..., 0].mean() - 200) < 6 and abs(centre[..., 2].mean() - 50) < 6  # RGB
    return round(centre[..., 1].mean() / STEP)


def write_video(path: Path, frames: int) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), FPS, (WIDTH, HEIGHT))
    assert writer.isOpened(), "this OpenCV cannot write MJPG .avi"
    for i in range(frames):
        writer.write(numbered(i))
    writer.release()
    return path


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_video(tmp_path_factory.mktemp("camera") / "count60.avi", 60)  # 2 s


@pytest.fixture(scope="module")
def short_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_video(tmp_path_factory.mktemp("camera") / "count10.avi", 10)  # 0.33 s


@pytest.fixture
def events() -> queue.Queue[HwEvent]:
    return queue.Queue()


def next_event(events: queue.Queue[HwEvent]) -> HwEvent:
    return events.get(timeout=WAIT_S)


# Camera on files


def test_file_frames_arrive_letterboxed_in_order(video: Path) -> None:
    with Camera(str(video), size=448) as camera:
        first = camera.wait_frame(0, WAIT_S)
        assert first is not None
        second = camera.wait_frame(first.seq, WAIT_S)
        assert second is not None
        info = camera.info()
    assert first.image.shape == (448, 448, 3) and first.image.dtype == np.uint8
    assert not first.image.flags.writeable
    assert (first.source_width, first.source_height) == (WIDTH, HEIGHT)
    assert not first.image[:56].any() and not first.image[392:].any()
    assert (first.seq, index_of(first)) == (1, 0)
    assert index_of(second) == second.seq - 1  # each grab is the next frame of the file
    assert (info.width, info.height, info.fps) == (WIDTH, HEIGHT, FPS) and info.backend
    assert camera.state == "stopped" and camera.latest() is None


def test_a_slow_consumer_gets_the_newest_frame_not_a_backlog(video: Path) -> None:
    with Camera(str(video), loop_file=True) as camera:
        first = camera.wait_frame(0, WAIT_S)
        assert first is not None
        time.sleep(0.5)  # a slow chunk: ~15 frames go by at 30 fps
        later = camera.latest()
        assert later is not None
        age_s = time.monotonic() - later.captured_at_s
    assert later.seq - first.seq >= 5  # frames were skipped, not queued
    assert index_of(later) == (later.seq - 1) % 60  # and it is the frame grabbed last
    assert age_s < 0.5  # generous: one frame period is 33 ms
    assert camera.latest() is None


def test_loop_file_rewinds_without_a_loss(short_video: Path, events: queue.Queue[HwEvent]) -> None:
    with Camera(str(short_video), loop_file=True, on_event=events.put) as camera:
        frame = camera.wait_frame(0, WAIT_S)
        while frame is not None and frame.seq <= 15:
            frame = camera.wait_frame(frame.seq, WAIT_S)
        assert frame is not None
    assert index_of(frame) == (frame.seq - 1) % 10
    assert events.empty()


def test_file_end_is_lost_once_and_ended(short_video: Path, events: queue.Queue[HwEvent]) -> None:
    with Camera(str(short_video), on_event=events.put) as camera:
        lost = next_event(events)
        assert isinstance(lost, DeviceLost)
        assert (lost.device, lost.name, lost.reason) == ("camera", str(short_video), "end of file")
        assert camera.state == "ended" and camera.latest() is None
        started = time.monotonic()
        assert camera.wait_frame(0, WAIT_S) is None
        assert time.monotonic() - started < 1.0  # no frame can come: no waiting
        with pytest.raises(DeviceError, match="end of file"):
            camera.info()
    assert events.empty()  # no retries, no second event


def test_missing_file_is_an_error_at_start(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="no such file"):
        Camera(str(tmp_path / "nope.avi")).start()


def test_privacy_switch_never_opens(
    video: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("a disabled camera opened its source")

    monkeypatch.setattr(cv2, "VideoCapture", refuse)
    caplog.set_level(logging.INFO, logger="venus.hw.camera")
    camera = Camera(str(video), enabled=False)
    with camera:
        camera.start()
        assert camera.state == "disabled" and camera.latest() is None
        assert camera.wait_frame(0, WAIT_S) is None  # at once
        with pytest.raises(DeviceError, match="disabled"):
            camera.info()
    assert [r.getMessage() for r in caplog.records if "disabled" in r.getMessage()] == [
        f"camera disabled (video.enabled = false): {video} is never opened"
    ]


def test_a_missing_device_is_lost_and_retried_not_fatal(events: queue.Queue[HwEvent]) -> None:
    camera = Camera("/dev/video-venus-test-none", reconnect_max_s=0.5, on_event=events.put)
    with camera:
        lost = next_event(events)
        assert isinstance(lost, DeviceLost) and "V4L2" in lost.reason
        assert camera.state in ("lost", "opening") and camera.latest() is None
        time.sleep(1.2)  # two more failed reopens
        with pytest.raises(DeviceError, match="could not open the V4L2 device"):
            camera.info()
    assert events.empty()  # lost once, however often the reopen fails


# Camera on a network stream that drops and comes back


class MjpegServer:
    """MJPEG over HTTP (multipart/x-mixed-replace), as IP cameras and ESP32-CAMs serve it."""

    def __init__(self, port: int = 0) -> None:
        self.closing = threading.Event()
        closing = self.closing

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                index = 0
                try:
                    while not closing.is_set():
                        jpeg = cv2.imencode(".jpg", numbered(index))[1].tobytes()
                        head = f"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}"
                        self.wfile.write(head.encode() + b"\r\n\r\n" + jpeg + b"\r\n")
                        index += 1
                        closing.wait(1 / 25)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving and end every open stream (the handlers close their sockets)."""
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(WAIT_S)


@pytest.fixture
def mjpeg() -> Iterator[MjpegServer]:
    server = MjpegServer()
    yield server
    server.close()


def test_a_url_source_that_drops_and_returns(
    mjpeg: MjpegServer, events: queue.Queue[HwEvent]
) -> None:
    url = f"http://127.0.0.1:{mjpeg.port}/stream"
    camera = Camera(url, reconnect_max_s=1.0, on_event=events.put)
    with camera:
        frame = camera.wait_frame(0, WAIT_S)
        assert frame is not None and (frame.source_width, frame.source_height) == (WIDTH, HEIGHT)
        assert camera.info().backend == "FFMPEG" and events.empty()

        mjpeg.close()  # the camera goes away mid-stream
        lost = next_event(events)
        assert isinstance(lost, DeviceLost) and (lost.device, lost.name) == ("camera", url)
        assert camera.state == "lost" and camera.latest() is None
        with pytest.raises(DeviceError, match="lost"):
            camera.info()
        time.sleep(0.8)  # at least one reopen fails while it is away

        back = MjpegServer(mjpeg.port)  # and comes back at the same address
        try:
            restored = next_event(events)
            assert isinstance(restored, DeviceRestored), restored
            assert restored.name == url and restored.down_s >= 0.8
            again = camera.wait_frame(frame.seq, WAIT_S)
            assert again is not None and camera.state == "running"
            assert camera.info().width == WIDTH
        finally:
            camera.stop()
            back.close()
    assert events.empty()  # one loss, one restore
