"""VideoFile: frames by schedule time from small MJPG files written here, rewinds, errors."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

from venus.errors import DeviceError
from venus.hw.video_file import VideoFile

WIDTH, HEIGHT = 160, 120  # px, 4:3 so the letterbox has bars at the top and bottom


def blue_of(index: int) -> int:
    """The blue level frame ``index`` is painted with: far apart enough to survive JPEG."""
    return 20 + 10 * index


def make_video(path: Path, frames: int, fps: float = 4.0) -> Path:
    """An MJPG AVI whose frame ``index`` is a flat BGR (blue_of(index), 100, 200)."""
    fourcc = cv2.VideoWriter.fourcc(*"MJPG")
    writer = cv2.VideoWriter(str(path), cv2.CAP_OPENCV_MJPEG, fourcc, fps, (WIDTH, HEIGHT))
    assert writer.isOpened()
    for index in range(frames):
        writer.write(np.full((HEIGHT, WIDTH, 3), (blue_of(index), 100, 200), np.uint8))
    writer.release()
    return path


def index_shown(video: VideoFile, t_s: float) -> int:
    """The frame index ``frame_at(t_s)`` returned, checked against its picture and times."""
    frame = video.frame_at(t_s)
    assert frame is not None
    index = frame.seq - 1
    red, green, blue = (int(c) for c in frame.image[video.size // 2, video.size // 2])
    assert abs(blue - blue_of(index)) <= 4 and abs(green - 100) <= 4 and abs(red - 200) <= 4
    assert frame.captured_at_s == pytest.approx(index / video.fps)
    return index


def test_opens_with_rate_count_and_duration(tmp_path: Path) -> None:
    with VideoFile(make_video(tmp_path / "clip.avi", 12), size=64) as video:
        assert (video.fps, video.frames, video.duration_s) == (4.0, 12, 3.0)


def test_each_time_shows_the_last_frame_at_or_before_it(tmp_path: Path) -> None:
    with VideoFile(make_video(tmp_path / "clip.avi", 12), size=64) as video:
        assert video.frame_at(-0.01) is None
        times = [0.0, 0.1, 0.2499, 0.25, 0.25, 0.6, 1.0, 1.74, 2.75, 2.99, 3.0, 60.0]
        shown = [index_shown(video, t) for t in times]
        assert shown == [0, 0, 0, 1, 1, 2, 4, 6, 11, 11, 11, 11]
        assert index_shown(video, float("inf")) == 11 and video.frame_at(float("-inf")) is None
        with pytest.raises(ValueError, match="NaN"):
            video.frame_at(float("nan"))


def test_exact_frame_times_land_on_their_frame(tmp_path: Path) -> None:
    with VideoFile(make_video(tmp_path / "clip.avi", 20, fps=15.0), size=32) as video:
        assert [index_shown(video, k / video.fps) for k in range(20)] == list(range(20))


def test_rewinding_gives_the_same_pictures(tmp_path: Path) -> None:
    with VideoFile(make_video(tmp_path / "clip.avi", 12), size=64) as video:
        forward = {}
        for index in range(12):
            frame = video.frame_at(index / 4)
            assert frame is not None
            forward[index] = frame.image.copy()
        for index in (5, 0, 9, 1, 2, 11, 3):  # back, forward, back again
            frame = video.frame_at(index / 4 + 0.1)
            assert frame is not None and frame.seq == index + 1
            assert np.array_equal(frame.image, forward[index])


def test_frames_are_letterboxed_rgb_and_read_only(tmp_path: Path) -> None:
    with VideoFile(make_video(tmp_path / "clip.avi", 2), size=64) as video:
        frame = video.frame_at(0.0)
    assert frame is not None
    assert frame.image.shape == (64, 64, 3) and frame.image.dtype == np.uint8
    assert (frame.source_width, frame.source_height) == (WIDTH, HEIGHT)
    # 160 x 120 into 64 x 64: 64 x 48, centred, black bars of 8 rows above and below
    assert not frame.image[:8].any() and not frame.image[56:].any()
    assert frame.image[8:56].min() > 0
    assert not frame.image.flags.writeable


def test_a_file_shorter_than_its_header_ends_at_its_last_frame(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = make_video(tmp_path / "clip.avi", 12).read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(whole[: len(whole) // 2])
    with VideoFile(cut, size=32) as video, caplog.at_level(logging.INFO):
        last = index_shown(video, 60.0)
        assert 1 <= last < 11 and video.frames == last + 1
        assert "declares 12 frames" in caplog.text
        assert index_shown(video, 0.0) == 0 and index_shown(video, 60.0) == last


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.avi"
    with pytest.raises(DeviceError, match="no such file") as info:
        VideoFile(path)
    assert str(path) in str(info.value)
    with pytest.raises(DeviceError, match="no such file"):
        VideoFile(tmp_path)  # a folder


@pytest.mark.parametrize("content", [b"", b"RIFF\x00\x00 not a video at all" * 300])
def test_unreadable_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.avi"
    path.write_bytes(content)
    with pytest.raises(DeviceError, match="cannot read it") as info:
        VideoFile(path)
    assert str(path) in str(info.value) and "ffmpeg -i" in str(info.value)


def test_a_video_without_frames(tmp_path: Path) -> None:
    path = make_video(tmp_path / "empty.avi", 0)
    with pytest.raises(DeviceError, match="has no frames") as info:
        VideoFile(path)
    assert str(path) in str(info.value)


def test_closed_file_says_so(tmp_path: Path) -> None:
    video = VideoFile(make_video(tmp_path / "clip.avi", 2), size=32)
    video.close()
    video.close()  # twice is fine
    with pytest.raises(DeviceError, match="is closed"):
        video.frame_at(0.0)


def test_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1 px"):
        VideoFile(make_video(tmp_path / "clip.avi", 1), size=0)
