"""Drawn scenes: the answer to a visual question is really in the pixels, changes show
at their times, and the written AVI reads back (with OpenCV and with the daemon's
VideoFile) frame for frame."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from venus.datagen.video import (
    COLOURS,
    SHAPES,
    SIZE,
    Scene,
    SceneObject,
    VideoError,
    draw_scene,
    frame_count,
    write_frames,
)
from venus.hw.video_file import VideoFile


def centre_px(o: SceneObject, width: int = SIZE, height: int = SIZE) -> tuple[int, int]:
    """(row, column) of an object's centre."""
    return round(o.y * (height - 1)), round(o.x * (width - 1))


def near(pixel: np.ndarray, colour: str, tolerance: int = 0) -> bool:
    return bool(np.all(np.abs(pixel.astype(int) - COLOURS[colour]) <= tolerance))


@pytest.mark.parametrize("kind", SHAPES)
@pytest.mark.parametrize("size", [SIZE, (640, 360)])
def test_a_shape_has_its_colour_at_its_centre(kind: str, size: int | tuple[int, int]) -> None:
    shape = SceneObject(kind, "red", 0.3, 0.6, 0.2)
    image = draw_scene(Scene((shape,)), size)
    width, height = (size, size) if isinstance(size, int) else size
    assert image.shape == (height, width, 3) and image.dtype == np.uint8
    row, col = centre_px(shape, width, height)
    assert near(image[row, col], "red")
    assert near(image[0, 0], "beige")  # the background away from it
    # the shape is about its size: red pixels fill a share of its box that fits the kind
    side = 0.2 * min(width, height)
    red = np.all(image == COLOURS["red"], axis=2).sum()
    share = {"circle": math.pi / 4, "square": 1.0, "triangle": math.sqrt(3) / 4, "star": 0.3}
    assert red / side**2 == pytest.approx(share[kind], rel=0.25)


def test_counting_circles() -> None:
    circles = [SceneObject("circle", "blue", x, 0.5, 0.1) for x in (0.15, 0.4, 0.65, 0.9)]
    image = draw_scene(Scene((*circles, SceneObject("square", "blue", 0.5, 0.85, 0.1))))
    mask = np.all(image == COLOURS["blue"], axis=2).astype(np.uint8)
    blobs, _ = cv2.connectedComponents(mask[: SIZE * 3 // 4])  # above the square
    assert blobs - 1 == 4  # label 0 is the background


def sign_region(o: SceneObject) -> tuple[slice, slice]:
    row, col = centre_px(o)
    w, h = o.size * SIZE, o.size * SIZE * 0.5
    return slice(round(row - h / 2) + 2, round(row + h / 2) - 2), slice(
        round(col - w / 2) + 2, round(col + w / 2) - 2
    )


def test_a_signs_word_is_written_on_it() -> None:
    exit_sign = SceneObject("sign", "green", 0.5, 0.4, 0.4, text="EXIT")
    open_sign = SceneObject("sign", "green", 0.5, 0.4, 0.4, text="OPEN")
    blank = SceneObject("sign", "green", 0.5, 0.4, 0.4, text=" ")
    rows, cols = sign_region(exit_sign)
    drawn = {o.text: draw_scene(Scene((o,)))[rows, cols] for o in (exit_sign, open_sign, blank)}
    assert np.all(drawn[" "] == COLOURS["green"])  # the board alone
    for word in ("EXIT", "OPEN"):
        ink = np.all(drawn[word] == COLOURS["white"], axis=2).mean()  # white on green
        assert 0.05 < ink < 0.6
    assert np.any(drawn["EXIT"] != drawn["OPEN"], axis=2).mean() > 0.05


def test_a_light_sign_gets_dark_ink() -> None:
    sign = SceneObject("sign", "yellow", 0.5, 0.5, 0.5, text="STOP")
    rows, cols = sign_region(sign)
    board = draw_scene(Scene((sign,)))[rows, cols]
    assert np.all(board == COLOURS["black"], axis=2).mean() > 0.05


def test_a_card_shows_its_number() -> None:
    images = [
        draw_scene(Scene((SceneObject("card", "white", 0.5, 0.5, 0.4, text=n),))) for n in "17"
    ]
    region = (slice(150, 300), slice(170, 280))
    for image in images:
        assert np.all(image[region] == COLOURS["black"], axis=2).mean() > 0.03
    assert np.any(images[0][region] != images[1][region])


@pytest.mark.parametrize(
    "time, inked, bare",
    [
        ("3:00", (0.0, 0.3), (0.0, -0.3)),  # hour hand to the right, none to the left
        ("9:00", (0.0, -0.3), (0.0, 0.3)),
        ("6:30", (0.3, 0.0), (-0.3, 0.0)),  # both hands down
        ("12:00", (-0.3, 0.0), (0.3, 0.0)),
    ],
)
def test_a_clock_shows_its_time(
    time: str, inked: tuple[float, float], bare: tuple[float, float]
) -> None:
    clock = SceneObject("clock", "white", 0.5, 0.5, 0.6, text=time)
    image = draw_scene(Scene((clock,)))
    radius = 0.3 * SIZE
    row, col = centre_px(clock)
    at = lambda offset: image[round(row + offset[0] * radius), round(col + offset[1] * radius)]  # noqa: E731
    assert near(at(inked), "black", 60)
    assert near(at(bare), "white")


def test_changes_show_at_their_times() -> None:
    scene = Scene(
        (
            SceneObject("circle", "red", 0.3, 0.5, 0.2, name="ball", end_s=2.0),
            SceneObject("circle", "blue", 0.3, 0.5, 0.2, name="ball", start_s=2.0, end_s=4.0),
            SceneObject("circle", "blue", 0.7, 0.5, 0.2, name="ball", start_s=4.0),
            SceneObject("star", "yellow", 0.5, 0.2, 0.2, start_s=3.0),
        )
    )
    left, right, star = (
        (round(0.5 * (SIZE - 1)), round(0.3 * (SIZE - 1))),
        (
            round(0.5 * (SIZE - 1)),
            round(0.7 * (SIZE - 1)),
        ),
        (round(0.2 * (SIZE - 1)), round(0.5 * (SIZE - 1))),
    )
    at = {t: draw_scene(scene, SIZE, t) for t in (0.0, 1.99, 2.0, 3.0, 4.0, 9.0)}
    assert near(at[1.99][left], "red") and near(at[2.0][left], "blue")  # changes colour
    assert near(at[3.0][left], "blue") and near(at[3.0][right], "beige")
    assert near(at[4.0][left], "beige") and near(at[4.0][right], "blue")  # moves
    assert near(at[2.0][star], "beige") and near(at[3.0][star], "yellow")  # appears
    assert scene.change_times() == (2.0, 3.0, 4.0)
    assert [o.colour for o in scene.at(2.5)] == ["blue"]


def test_the_same_scene_and_time_give_the_same_pixels() -> None:
    scene = Scene(
        (
            SceneObject("star", "purple", 0.31, 0.42, 0.33),
            SceneObject("clock", "white", 0.7, 0.7, 0.3, text="10:10"),
            SceneObject("sign", "red", 0.3, 0.8, 0.3, text="CAFE"),
        )
    )
    assert np.array_equal(draw_scene(scene, SIZE, 1.0), draw_scene(scene, SIZE, 1.0))


def demo_scene() -> Scene:
    return Scene(
        (
            SceneObject("square", "green", 0.25, 0.5, 0.3, end_s=2.0),
            SceneObject("square", "orange", 0.25, 0.5, 0.3, start_s=2.0),
            SceneObject("sign", "blue", 0.7, 0.4, 0.35, text="PARK"),
        )
    )


def test_written_frames_read_back_with_opencv(tmp_path: Path) -> None:
    path = tmp_path / "scene.avi"
    assert write_frames(demo_scene(), 4.5, path) == 5  # at 0, 1, 2, 3, 4 s
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    capture.release()
    assert len(frames) == 5
    assert all(f.shape == (SIZE, SIZE, 3) for f in frames)
    square = (SIZE // 2, round(0.25 * (SIZE - 1)))
    assert [near(f[square], "green", 12) for f in frames] == [True, True, False, False, False]
    assert [near(f[square], "orange", 12) for f in frames] == [False, False, True, True, True]


def test_written_frames_read_back_with_the_daemons_video_file(tmp_path: Path) -> None:
    path = tmp_path / "scene.avi"
    write_frames(demo_scene(), 3.0, path, fps=2.0)
    with VideoFile(path) as video:
        assert video.frames == 6 and video.fps == pytest.approx(2.0)
        frame = video.frame_at(2.2)  # the frame drawn at 2.0 s
        assert frame is not None and frame.seq == 5
        # RGB, and 448 px square needs no letterbox
        assert near(frame.image[SIZE // 2, round(0.25 * (SIZE - 1))], "orange", 12)


def test_the_same_scene_writes_the_same_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a.avi", tmp_path / "b.avi"
    write_frames(demo_scene(), 3.0, first)
    write_frames(demo_scene(), 3.0, second)
    assert first.read_bytes() == second.read_bytes()


def test_frame_count_covers_the_duration() -> None:
    assert [frame_count(d, 1.0) for d in (0.5, 1.0, 1.01, 10.0)] == [1, 1, 2, 10]
    assert frame_count(2.0, 2.0) == 4


def test_write_frames_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.avi"):
        write_frames(demo_scene(), 1.0, tmp_path / "scene.mp4")
    with pytest.raises(ValueError, match="fps"):
        write_frames(demo_scene(), 1.0, tmp_path / "scene.avi", fps=0)
    with pytest.raises(VideoError, match="writable"):
        write_frames(demo_scene(), 1.0, tmp_path / "no" / "such" / "scene.avi")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"kind": "hexagon", "colour": "red"}, "kind"),
        ({"kind": "circle", "colour": "mauve"}, "colour"),
        ({"kind": "circle", "colour": "red", "x": 1.5}, "fractions"),
        ({"kind": "circle", "colour": "red", "size": 0.0}, "size"),
        ({"kind": "circle", "colour": "red", "start_s": 2.0, "end_s": 1.0}, "shown"),
        ({"kind": "sign", "colour": "red"}, "text"),
        ({"kind": "card", "colour": "red", "text": "seven"}, "number"),
        ({"kind": "clock", "colour": "white", "text": "25:00"}, "time"),
    ],
)
def test_objects_are_checked(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SceneObject(**{"x": 0.5, "y": 0.5, **fields})  # type: ignore[arg-type]


def test_an_invisible_shape_is_an_error() -> None:
    with pytest.raises(ValueError, match="invisible"):
        Scene((SceneObject("circle", "beige", 0.5, 0.5),))
