"""A synthetic hour of camera video, drawn with OpenCV, for long-session benchmarks and tests.

One frame a second (one per 1 s chunk), MJPG in AVI (OpenCV writes and reads it
everywhere). The hour is a sequence of scenes of ``SCENE_S`` seconds: each a background
colour, a few filled shapes and a slow drift, so consecutive frames are near-duplicates
and scenes differ. One **landmark** scene (a checkerboard with a red disc and a word on
it, unlike any other) is shown at ``landmark_s`` and again at ``repeat_s``, the second
time with a grey block over part of it (partly occluded). ``LongVideo.scene_at`` says
what is on screen when, so a run can be scored against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from numpy.typing import NDArray

from venus.errors import BenchError

SCENE_S = 20  # seconds per scene
LANDMARK_SCENE = -1  # scene id of the landmark
SIZE = 96  # frame side in px (the tiny vision encoder takes 64; the reader resizes)


@dataclass(frozen=True)
class LongVideo:
    path: Path
    seconds: int
    landmark_s: int  # first showing of the landmark scene
    repeat_s: int  # second showing, partly occluded
    occlusion: float  # fraction of the frame's width the block covers at the repeat

    def chunks(self, start_s: int) -> range:
        """The chunks that show the scene starting at ``start_s``: chunk k takes the
        latest frame at its end, the frame of second k + 1."""
        return range(start_s - 1, start_s - 1 + SCENE_S)

    def scene_at(self, t: int) -> int:
        """The scene on screen in second ``t`` (``LANDMARK_SCENE`` for the landmark)."""
        for start in (self.landmark_s, self.repeat_s):
            if start <= t < start + SCENE_S:
                return LANDMARK_SCENE
        return t // SCENE_S


def make_long_video(
    path: Path,
    seconds: int = 3600,
    landmark_s: int = 300,
    repeat_s: int = 3300,
    occlusion: float = 0.3,
    seed: int = 0,
) -> LongVideo:
    """Write ``seconds`` frames at 1 fps to ``path`` (.avi, MJPG)."""
    if not 0 <= landmark_s < repeat_s <= seconds - SCENE_S:
        raise BenchError(
            f"the landmark at {landmark_s} s and its repeat at {repeat_s} s must fit in "
            f"{seconds} s, in that order, {SCENE_S} s each"
        )
    if not 0.0 <= occlusion < 1.0:
        raise BenchError(f"occlusion {occlusion} must be in [0, 1)")
    video = LongVideo(path, seconds, landmark_s, repeat_s, occlusion)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), 1.0, (SIZE, SIZE))
    if not writer.isOpened():
        raise BenchError(f"{path}: OpenCV cannot write an MJPG AVI there")
    rng = np.random.default_rng(seed)
    scenes: dict[int, _Scene] = {}
    try:
        for t in range(seconds):
            scene = video.scene_at(t)
            if scene == LANDMARK_SCENE:
                image = _landmark(t - (landmark_s if t < repeat_s else repeat_s))
                if t >= repeat_s:
                    width = round(occlusion * SIZE)
                    image[:, SIZE - width :] = 128
            else:
                if scene not in scenes:
                    scenes = {scene: _Scene.random(rng)}  # one at a time: memory stays flat
                image = scenes[scene].draw(t % SCENE_S)
            writer.write(cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    return video


@dataclass(frozen=True)
class _Scene:
    background: tuple[int, int, int]
    shapes: list[tuple[int, tuple[int, int], int, tuple[int, int, int]]]  # kind, at, r, rgb
    drift: tuple[int, int]

    @classmethod
    def random(cls, rng: np.random.Generator) -> _Scene:
        def colour() -> tuple[int, int, int]:
            r, g, b = (int(c) for c in rng.integers(0, 256, 3))
            return r, g, b

        shapes = [
            (
                int(rng.integers(0, 2)),
                (int(rng.integers(10, SIZE - 10)), int(rng.integers(10, SIZE - 10))),
                int(rng.integers(6, 24)),
                colour(),
            )
            for _ in range(int(rng.integers(2, 5)))
        ]
        drift = (int(rng.integers(-1, 2)), int(rng.integers(-1, 2)))
        return cls(colour(), shapes, drift)

    def draw(self, step: int) -> NDArray[np.uint8]:
        image = np.empty((SIZE, SIZE, 3), np.uint8)
        image[:] = self.background
        dx, dy = self.drift[0] * step // 4, self.drift[1] * step // 4
        for kind, (x, y), r, rgb in self.shapes:
            at = (x + dx, y + dy)
            if kind == 0:
                cv2.circle(image, at, r, rgb, -1)
            else:
                cv2.rectangle(image, (at[0] - r, at[1] - r), (at[0] + r, at[1] + r), rgb, -1)
        return image


def _landmark(step: int) -> NDArray[np.uint8]:
    """A checkerboard with a red disc and a word: nothing else in the hour looks like it."""
    cells = (np.indices((SIZE, SIZE)) // 12).sum(axis=0) % 2
    image = np.where(cells[..., None] == 1, 235, 20).astype(np.uint8).repeat(3, axis=2)
    cv2.circle(image, (30 + step % 3, 34), 16, (220, 20, 20), -1)
    cv2.putText(image, "VENUS", (8, 84), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (40, 200, 240), 2)
    return image
