"""f0 of the training audio for the vocoder's sine source, and the f0 head's loss.

**Tracker.** Praat's autocorrelation pitch (Boersma 1993), through ``praat-parselmouth``
(the ``export`` extra): Praat is the reference pitch tracker of phonetics, and
parselmouth ships it as a manylinux wheel for CPython 3.11 that needs only numpy (no
compiler, no model download); it tracks 37 s of speech in 60 ms on one core here.
(``pyworld`` has no cp311 manylinux wheel of its own; a hand-written YIN would be one
more thing to get right.) The ``export`` extra carries it because training already needs
torch from there.

**Frames.** Output-mel frame t spans samples ``[t*HOP - 272, t*HOP + 752)``, centred on
``(t + 1/2) * HOP``; each frame takes the f0 of the tracker's analysis nearest that centre,
0 where Praat calls it unvoiced (or where no analysis reaches, at the very ends).

**Loss** (``f0_losses``): L1 of ln f0 on the frames the tracker calls voiced, plus the
binary cross-entropy of the head's voicing logit against voiced / unvoiced.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from numpy.typing import NDArray
from torch import Tensor

from venus.export.model.vocoder_source import F0Prediction
from venus.train.data import TrainDataError
from venus.train.speech_units import HOP, SAMPLE_RATE

__all__ = ["F0_RANGE_HZ", "f0_agreement", "f0_losses", "track_f0"]

F0_RANGE_HZ: Final = (50.0, 600.0)  # Praat's pitch floor and ceiling: speech, low voices too
TIME_STEP_S: Final = HOP / SAMPLE_RATE  # one analysis a frame (20 ms)


def _parselmouth() -> Any:
    try:
        import parselmouth
    except ImportError as e:
        raise TrainDataError(
            "a vocoder with a sine source needs the f0 of its training audio, tracked with "
            "praat-parselmouth: pip install -e '.[export]'"
        ) from e
    return parselmouth


def track_f0(pcm: NDArray[np.float32], frames: int) -> NDArray[np.float32]:
    """f0 in Hz (0: unvoiced) of 24 kHz ``pcm`` at each of ``frames`` output-mel frames."""
    out = np.zeros(frames, np.float32)
    if len(pcm) < SAMPLE_RATE * 3 / F0_RANGE_HZ[0]:  # shorter than one analysis window
        return out
    sound = _parselmouth().Sound(pcm.astype(np.float64), sampling_frequency=SAMPLE_RATE)
    pitch = sound.to_pitch_ac(
        time_step=TIME_STEP_S, pitch_floor=F0_RANGE_HZ[0], pitch_ceiling=F0_RANGE_HZ[1]
    )
    hz = np.asarray(pitch.selected_array["frequency"], np.float32)
    centres = (np.arange(frames) + 0.5) * TIME_STEP_S
    index = np.rint((centres - pitch.x1) / pitch.dt).astype(np.int64)
    inside = (index >= 0) & (index < len(hz))
    out[inside] = hz[index[inside]]
    return out


def f0_losses(pred: F0Prediction, target_hz: Tensor) -> tuple[Tensor, Tensor]:
    """(ln f0 L1 on voiced frames, voicing BCE) of the head's ``pred`` against the tracked
    f0 [B, frames] (0: unvoiced). The L1 is 0 when no frame is voiced."""
    voiced = target_hz > 0
    error = (pred.log_f0 - torch.log(target_hz.clamp(min=1.0))).abs()
    l1 = (error * voiced).sum() / voiced.sum().clamp(min=1)
    bce = F.binary_cross_entropy_with_logits(pred.voicing, voiced.to(pred.voicing.dtype))
    return l1, bce


def f0_agreement(pred_hz: Tensor, target_hz: Tensor) -> tuple[float | None, float]:
    """(median |error| in cents on the frames both call voiced, None if there are none;
    the share of frames whose voicing agrees) of a predicted f0 against the tracked one."""
    both = (pred_hz > 0) & (target_hz > 0)
    agree = float(((pred_hz > 0) == (target_hz > 0)).float().mean())
    if not bool(both.any()):
        return None, agree
    cents = 1200 * torch.log2(pred_hz[both] / target_hz[both]).abs()
    return float(cents.median()), agree
