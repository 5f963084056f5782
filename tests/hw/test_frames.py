"""Letterboxing camera frames for the vision encoder: aspect, padding, colour order."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from venus.hw.frames import letterbox


def test_letterbox_landscape_pads_top_and_bottom_and_swaps_to_rgb() -> None:
    image = np.empty((240, 320, 3), np.uint8)
    image[:] = (50, 100, 200)  # BGR
    out = letterbox(image, 448)
    assert out.shape == (448, 448, 3) and out.dtype == np.uint8
    assert not out[:56].any() and not out[392:].any()  # 448 * 240/320 = 336 rows, 56 each side
    assert (out[56:392] == (200, 100, 50)).all()  # RGB


def test_letterbox_portrait_pads_left_and_right() -> None:
    out = letterbox(np.full((200, 100, 3), 255, np.uint8), 64)
    assert not out[:, :16].any() and not out[:, 48:].any()
    assert (out[:, 16:48] == 255).all()


@pytest.mark.parametrize(
    ("height", "width", "size"),
    [(3, 5, 7), (5, 3, 7), (1, 1, 448), (480, 640, 448), (720, 1280, 448), (1080, 1920, 448),
     (1, 1000, 10), (448, 448, 448), (10, 10, 448), (333, 777, 101)],
)  # fmt: skip
def test_letterbox_keeps_aspect_and_centres(height: int, width: int, size: int) -> None:
    out = letterbox(np.full((height, width, 3), 255, np.uint8), size)
    assert out.shape == (size, size, 3)
    rows, cols = np.nonzero(out[..., 0])
    top, bottom = rows.min(), size - 1 - rows.max()
    left, right = cols.min(), size - 1 - cols.max()
    content_h, content_w = size - top - bottom, size - left - right
    assert max(content_h, content_w) == size  # the long side fills the square
    assert abs(content_w * height - content_h * width) <= max(height, width)  # short side rounded
    assert 0 <= bottom - top <= 1 and 0 <= right - left <= 1  # centred, odd pixel after
    assert (out[top : size - bottom, left : size - right] == 255).all()  # no holes


def test_letterbox_takes_grey_and_bgra() -> None:
    assert (letterbox(np.full((4, 4), 7, np.uint8), 8) == 7).all()
    bgra = np.zeros((4, 4, 4), np.uint8)
    bgra[..., 0] = 9  # blue
    assert (letterbox(bgra, 8)[..., 2] == 9).all()


@pytest.mark.parametrize(
    ("image", "size"),
    [(np.zeros((4, 4, 3), np.uint8), 0), (np.zeros((4, 4, 3), np.float32), 8),
     (np.zeros((4, 4, 2), np.uint8), 8), (np.zeros((0, 4, 3), np.uint8), 8)],
)  # fmt: skip
def test_letterbox_rejects_what_it_cannot_read(image: npt.NDArray[np.uint8], size: int) -> None:
    with pytest.raises(ValueError, match="letterbox"):
        letterbox(image, size)
