"""Drawn scenes for visual questions: shapes, signs, cards and clocks, changing in time.

A :class:`Scene` is a background and objects, each shown from ``start_s`` to ``end_s``;
an object that moves, changes colour or changes its text is two objects with the same
``name`` and consecutive times. :func:`draw_scene` draws the picture at a time with
OpenCV (anti-aliased, so edges blend, but a shape's centre is exactly its colour), and
:func:`write_frames` writes one frame per ``1 / fps`` seconds as MJPG in AVI, which
``venus run --offline --video FILE`` reads (``venus.hw.video_file.VideoFile``): frame
``i`` shows the scene at ``i / fps`` seconds. The same scene and time give the same
pixels; the same scene gives the same file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from numpy.typing import NDArray

from venus.errors import DatagenError

Image = NDArray[np.uint8]  # height x width x 3, RGB

SIZE = 448  # px, the side the vision encoder takes (venus.hw.frames.VISION_SIZE)
FONT = cv2.FONT_HERSHEY_SIMPLEX
JPEG_QUALITY = 95

COLOURS: dict[str, tuple[int, int, int]] = {  # RGB
    "red": (220, 30, 30),
    "orange": (245, 135, 20),
    "yellow": (245, 215, 30),
    "green": (40, 160, 60),
    "cyan": (40, 200, 220),
    "blue": (30, 80, 220),
    "purple": (135, 50, 175),
    "pink": (245, 130, 185),
    "brown": (125, 80, 40),
    "black": (20, 20, 20),
    "grey": (128, 128, 128),
    "white": (245, 245, 245),
    "beige": (235, 225, 200),
}
SHAPES = ("circle", "square", "triangle", "star")
LABELS = ("sign", "card", "clock")  # objects that carry text
KINDS = SHAPES + LABELS
_CLOCK_TIME = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")


class VideoError(DatagenError):
    """A scene's video could not be written."""


@dataclass(frozen=True)
class SceneObject:
    """One thing in the picture.

    Attributes:
        kind: a shape (circle, square, triangle, star) or a label (sign, card, clock).
        colour: a name in COLOURS: the shape's fill, the sign's board, the card's face,
            the clock's face. A label's text is black or white, whichever contrasts.
        x, y: centre, as fractions of the width and height (0, 0 top left).
        size: fraction of the picture's shorter side: a circle's or clock's diameter, a
            square's side, a star's outer diameter, a triangle's and sign's width, a
            card's height.
        text: a sign's word, a card's number, a clock's time "H:MM" (24 h).
        name: which object this is, for changes over time (defaults to ``kind``).
        start_s, end_s: shown while ``start_s <= t < end_s``.
    """

    kind: str
    colour: str
    x: float
    y: float
    size: float = 0.2
    text: str = ""
    name: str = ""
    start_s: float = 0.0
    end_s: float = math.inf

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown object kind {self.kind!r}; use one of {KINDS}")
        if self.colour not in COLOURS:
            raise ValueError(f"unknown colour {self.colour!r}; use one of {tuple(COLOURS)}")
        if not (0 <= self.x <= 1 and 0 <= self.y <= 1):
            raise ValueError(f"{self.kind} at ({self.x}, {self.y}): x and y are 0-1 fractions")
        if not 0 < self.size <= 1:
            raise ValueError(f"{self.kind} size {self.size}: a fraction of the side, 0-1")
        if not self.start_s < self.end_s:
            raise ValueError(f"{self.kind} shown from {self.start_s} s to {self.end_s} s")
        if self.kind in LABELS and not self.text:
            raise ValueError(f"a {self.kind} needs text")
        if self.kind == "card" and not self.text.isdigit():
            raise ValueError(f"a card shows a number, got {self.text!r}")
        if self.kind == "clock" and not _CLOCK_TIME.fullmatch(self.text):
            raise ValueError(f"a clock shows a time H:MM, got {self.text!r}")

    @property
    def key(self) -> str:
        return self.name or self.kind

    def shown_at(self, t_s: float) -> bool:
        return self.start_s <= t_s < self.end_s


@dataclass(frozen=True)
class Scene:
    """A background colour and objects, drawn in order (later ones on top)."""

    objects: tuple[SceneObject, ...]
    background: str = "beige"

    def __post_init__(self) -> None:
        if self.background not in COLOURS:
            raise ValueError(f"unknown background {self.background!r}; use one of {tuple(COLOURS)}")
        for thing in self.objects:
            if thing.colour == self.background and thing.kind in SHAPES:
                raise ValueError(
                    f"a {thing.colour} {thing.kind} on a {self.background} background is invisible"
                )

    def at(self, t_s: float) -> tuple[SceneObject, ...]:
        """The objects shown at ``t_s``."""
        return tuple(o for o in self.objects if o.shown_at(t_s))

    def change_times(self) -> tuple[float, ...]:
        """When something appears or goes, sorted (0 and inf left out)."""
        times = {o.start_s for o in self.objects} | {o.end_s for o in self.objects}
        return tuple(sorted(t for t in times if 0 < t < math.inf))


def draw_scene(scene: Scene, size: int | tuple[int, int] = SIZE, t_s: float = 0.0) -> Image:
    """The scene at ``t_s`` seconds: RGB uint8, ``size`` px square or (width, height)."""
    width, height = (size, size) if isinstance(size, int) else size
    if width < 16 or height < 16:
        raise ValueError(f"draw_scene size {width}x{height}: at least 16x16 px")
    image = np.empty((height, width, 3), np.uint8)
    image[:] = COLOURS[scene.background]
    unit = min(width, height)
    for thing in scene.at(t_s):
        centre = (round(thing.x * (width - 1)), round(thing.y * (height - 1)))
        _DRAW[thing.kind](image, thing, centre, thing.size * unit)
    return image


def _circle(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    cv2.circle(image, c, max(1, round(side / 2)), COLOURS[o.colour], -1, cv2.LINE_AA)


def _square(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    half = side / 2
    _polygon(
        image,
        o.colour,
        [
            (c[0] - half, c[1] - half),
            (c[0] + half, c[1] - half),
            (c[0] + half, c[1] + half),
            (c[0] - half, c[1] + half),
        ],
    )


def _triangle(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    # equilateral, pointing up, centred on its centroid
    r = side / math.sqrt(3)
    _polygon(
        image,
        o.colour,
        [
            (c[0] + r * math.sin(a), c[1] - r * math.cos(a))
            for a in (0, 2 * math.pi / 3, 4 * math.pi / 3)
        ],
    )


def _star(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    outer, inner = side / 2, side / 2 * 0.45
    points = [
        (c[0] + r * math.sin(i * math.pi / 5), c[1] - r * math.cos(i * math.pi / 5))
        for i, r in enumerate([outer, inner] * 5)
    ]
    _polygon(image, o.colour, points)


def _sign(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    w, h = side, side * 0.5
    post = (round(c[0]), round(c[1])), (round(c[0]), round(c[1] + h))  # behind the board
    cv2.line(image, post[0], post[1], COLOURS["brown"], max(1, round(side / 25)), cv2.LINE_AA)
    _square_box(image, o.colour, c, w, h)
    _text(image, o.text, c, w * 0.85, h * 0.6, _ink(o.colour))


def _card(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    w, h = side * 0.7, side
    _square_box(image, o.colour, c, w, h)
    _text(image, o.text, c, w * 0.75, h * 0.5, _ink(o.colour))


def _clock(image: Image, o: SceneObject, c: tuple[int, int], side: float) -> None:
    ink = _ink(o.colour)
    radius = side / 2
    cv2.circle(image, c, max(1, round(radius)), COLOURS[o.colour], -1, cv2.LINE_AA)
    cv2.circle(image, c, max(1, round(radius)), ink, max(1, round(side / 40)), cv2.LINE_AA)
    for hour in range(12):
        a = hour * math.pi / 6
        outer, inner = radius * 0.9, radius * (0.75 if hour % 3 == 0 else 0.82)
        cv2.line(
            image,
            _polar(c, inner, a),
            _polar(c, outer, a),
            ink,
            max(1, round(side / 60)),
            cv2.LINE_AA,
        )
    match = _CLOCK_TIME.fullmatch(o.text)
    assert match is not None  # checked in SceneObject
    hours, minutes = int(match[1]) % 12, int(match[2])
    hour_angle = (hours + minutes / 60) * math.pi / 6
    minute_angle = minutes * math.pi / 30
    cv2.line(
        image, c, _polar(c, radius * 0.5, hour_angle), ink, max(1, round(side / 25)), cv2.LINE_AA
    )
    cv2.line(
        image, c, _polar(c, radius * 0.78, minute_angle), ink, max(1, round(side / 45)), cv2.LINE_AA
    )


_DRAW = {
    "circle": _circle,
    "square": _square,
    "triangle": _triangle,
    "star": _star,
    "sign": _sign,
    "card": _card,
    "clock": _clock,
}


def _polar(c: tuple[int, int], r: float, angle: float) -> tuple[int, int]:
    """The point ``r`` px from ``c`` at ``angle`` radians clockwise from 12 o'clock."""
    return round(c[0] + r * math.sin(angle)), round(c[1] - r * math.cos(angle))


def _polygon(image: Image, colour: str, points: list[tuple[float, float]]) -> None:
    shift = 4  # sub-pixel vertices: coordinates in 1/16 px
    vertices = np.array([[round(x * 16), round(y * 16)] for x, y in points], np.int32)
    cv2.fillPoly(image, [vertices], COLOURS[colour], cv2.LINE_AA, shift)


def _square_box(image: Image, colour: str, c: tuple[int, int], w: float, h: float) -> None:
    _polygon(
        image,
        colour,
        [
            (c[0] - w / 2, c[1] - h / 2),
            (c[0] + w / 2, c[1] - h / 2),
            (c[0] + w / 2, c[1] + h / 2),
            (c[0] - w / 2, c[1] + h / 2),
        ],
    )


def _ink(colour: str) -> tuple[int, int, int]:
    """Black on light colours, white on dark ones (by luma)."""
    r, g, b = COLOURS[colour]
    return COLOURS["black"] if 0.299 * r + 0.587 * g + 0.114 * b > 140 else COLOURS["white"]


def _text(
    image: Image,
    text: str,
    c: tuple[int, int],
    max_w: float,
    max_h: float,
    ink: tuple[int, int, int],
) -> None:
    """``text`` centred on ``c``, as large as fits in max_w x max_h."""
    (w, h), _ = cv2.getTextSize(text, FONT, 1.0, 2)
    scale = min(max_w / max(w, 1), max_h / max(h, 1))
    thickness = max(1, round(2 * scale))
    (w, h), _ = cv2.getTextSize(text, FONT, scale, thickness)
    origin = (round(c[0] - w / 2), round(c[1] + h / 2))
    cv2.putText(image, text, origin, FONT, scale, ink, thickness, cv2.LINE_AA)


def frame_count(duration_s: float, fps: float) -> int:
    """Frames covering ``duration_s`` at ``fps``: frame i shows [i / fps, (i + 1) / fps)."""
    return max(1, math.ceil(duration_s * fps - 1e-9))


def write_frames(
    scene: Scene,
    duration_s: float,
    path: Path | str,
    *,
    fps: float = 1.0,
    size: int | tuple[int, int] = SIZE,
) -> int:
    """The scene as an MJPG AVI, frame ``i`` drawn at ``i / fps`` s; returns the count.

    Raises:
        ValueError: ``path`` is not ``.avi``, or ``fps`` or ``duration_s`` not positive.
        VideoError: OpenCV could not open the file for writing or write it.
    """
    path = Path(path)
    if path.suffix.lower() != ".avi":
        raise ValueError(f"{path}: write_frames writes MJPG in AVI; name the file .avi")
    if not (fps > 0 and duration_s > 0):
        raise ValueError(f"write_frames needs fps and duration_s > 0, got {fps} and {duration_s}")
    width, height = (size, size) if isinstance(size, int) else size
    count = frame_count(duration_s, fps)
    fourcc = cv2.VideoWriter.fourcc(*"MJPG")
    # OpenCV's own MJPEG writer: in every build (with or without FFmpeg), byte-stable
    writer = cv2.VideoWriter(str(path), cv2.CAP_OPENCV_MJPEG, fourcc, fps, (width, height))
    try:
        if not writer.isOpened():
            raise VideoError(
                f"{path}: OpenCV cannot write an MJPG AVI there; "
                "check that the folder exists and is writable"
            )
        writer.set(cv2.VIDEOWRITER_PROP_QUALITY, JPEG_QUALITY)
        for i in range(count):
            rgb = draw_scene(scene, (width, height), i / fps)
            writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    if not path.is_file() or path.stat().st_size == 0:
        raise VideoError(f"{path}: OpenCV wrote nothing")
    return count
