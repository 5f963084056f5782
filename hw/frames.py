"""Camera frames as the vision encoder wants them: square, RGB, aspect kept.

Pure functions and small frozen types, shared by ``venus.hw.camera`` and
``venus.hw.synthetic_camera``. The vision encoder runs at 448 px (SigLIP2 so400m),
hence the default size.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

VISION_SIZE = 448  # px, the SigLIP2 so400m input side

Image = npt.NDArray[np.uint8]

# OpenCV colour conversions to RGB, by channel count of the decoded image.
_TO_RGB = {1: cv2.COLOR_GRAY2RGB, 3: cv2.COLOR_BGR2RGB, 4: cv2.COLOR_BGRA2RGB}


@dataclass(frozen=True, eq=False)
class Frame:
    """One camera frame, letterboxed for the vision encoder.

    ``image`` is read-only and may be shared by several consumers of the same frame.
    """

    image: Image  # uint8 [size, size, 3], RGB, aspect kept, black bars, centred
    seq: int  # frames grabbed since the camera object was made, from 1; never reset
    captured_at_s: float  # time.monotonic() when the grab returned
    source_width: int  # px, as the source delivered it
    source_height: int  # px


@dataclass(frozen=True)
class CameraInfo:
    """What an open camera delivers, for ``venus doctor`` and the startup log."""

    width: int  # px, of the frames actually decoded
    height: int  # px
    fps: float  # as the backend reports it; 0.0 when it does not know
    backend: str  # OpenCV backend name: V4L2, GSTREAMER, FFMPEG, ...


def letterbox(image_bgr: Image, size: int = VISION_SIZE) -> Image:
    """Scale ``image_bgr`` to fit a ``size`` x ``size`` square, pad with black, centre it.

    Args:
        image_bgr: uint8 image as OpenCV decodes it: [h, w, 3] BGR, [h, w, 4] BGRA or
            [h, w] / [h, w, 1] grey.
        size: side of the output square in px.

    Returns:
        A new uint8 [size, size, 3] RGB array. The longer side of the input fills the
        square; the shorter one is scaled by the same factor (at least 1 px) and
        centred, with the odd pixel of padding, if any, at the bottom / right.

    Raises:
        ValueError: ``size`` < 1, or the image is empty, not uint8 or of an unknown shape.
    """
    if size < 1:
        raise ValueError(f"letterbox size must be at least 1 px, got {size}")
    if image_bgr.dtype != np.uint8:
        raise ValueError(f"letterbox needs a uint8 image, got {image_bgr.dtype}")
    channels = 1 if image_bgr.ndim == 2 else image_bgr.shape[2] if image_bgr.ndim == 3 else 0
    if channels not in _TO_RGB:
        raise ValueError(
            f"letterbox needs [h, w], [h, w, 1], [h, w, 3] or [h, w, 4], got {image_bgr.shape}"
        )
    height, width = image_bgr.shape[:2]
    if height == 0 or width == 0:
        raise ValueError(f"letterbox got an empty image of shape {image_bgr.shape}")
    scale = size / max(height, width)
    new_w = min(size, max(1, round(width * scale)))
    new_h = min(size, max(1, round(height * scale)))
    # INTER_AREA averages when shrinking (no aliasing); INTER_LINEAR when enlarging.
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    resized = cv2.resize(image_bgr, (new_w, new_h), interpolation=interpolation)
    rgb = cv2.cvtColor(resized, _TO_RGB[channels])
    out = np.zeros((size, size, 3), np.uint8)
    top = (size - new_h) // 2
    left = (size - new_w) // 2
    out[top : top + new_h, left : left + new_w] = rgb.reshape(new_h, new_w, 3)
    return out
