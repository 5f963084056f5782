"""The log-mel augmentation (train/augment.py) against the daemon's own front end: a
warped tone is the front end's tone at the warped frequency, a gain is the front end's
louder audio, the masks and the padding are where they should be, and the draws are the
step's."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from venus.engines.mel import LogMel
from venus.train.augment import MASK_BINS, MelAugment, augment_mel, warp_index, warp_mel

FRONT = LogMel()


def tone(hz: float, amplitude: float = 0.3) -> torch.Tensor:
    """One second of a sine through the daemon's front end: [80, 100]."""
    t = np.arange(FRONT.samples) / FRONT.sample_rate
    samples = (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)
    return torch.from_numpy(FRONT(samples, FRONT.new_state())[0])


def peak(mel: torch.Tensor) -> int:
    return int(mel[:, 50].argmax())


@pytest.mark.parametrize("hz, alpha", [(250, 0.9), (500, 1.1), (1500, 0.9), (3000, 1.12)])
def test_a_warped_tone_peaks_where_the_front_end_puts_the_warped_tone(
    hz: float, alpha: float
) -> None:
    assert peak(tone(hz * alpha)) != peak(tone(hz))  # the warp is big enough to see
    assert peak(warp_mel(tone(hz), alpha)) == peak(tone(hz * alpha))


def test_the_warp_moves_formants_the_way_alpha_says() -> None:
    index = warp_index(1.1, 80)
    assert np.all(index[10:] < np.arange(80)[10:])  # a bin reads below it: formants move up
    assert np.all(warp_index(0.9, 80)[:-5] > np.arange(75))
    assert np.allclose(warp_index(1.0, 80), np.arange(80))
    assert warp_index(0.8, 80)[-1] == 79.0  # above the top bin: the top bin


def test_a_gain_is_the_front_end_on_louder_audio() -> None:
    base = tone(700)
    out = augment_mel(base[None], [100], MelAugment(gain_db=6.0), torch.Generator().manual_seed(3))
    shift = out[0] - base
    assert float(shift.max() - shift.min()) < 1e-5  # one constant
    gain_db = 40.0 * float(shift.mean())
    assert 0.1 < abs(gain_db) <= 6.0
    louder = tone(700, 0.3 * 10 ** (gain_db / 20))
    assert torch.allclose(out[0], louder, atol=1e-4)


def test_masks_cover_bands_with_the_rows_mean_and_the_padding_is_kept() -> None:
    mel = torch.stack([tone(400), tone(2000)])
    mel[1, :, 60:] = 0.0  # row 1 holds 60 frames; the rest is padding
    g = torch.Generator().manual_seed(5)
    out = augment_mel(mel, [100, 60], MelAugment(freq_masks=2), g)
    assert torch.equal(out[1, :, 60:], mel[1, :, 60:])
    for row, n in ((0, 100), (1, 60)):
        changed = (out[row, :, :n] != mel[row, :, :n]).any(dim=1)
        bins = changed.nonzero().flatten().tolist()
        assert 1 <= len(bins) <= 2 * MASK_BINS
        masked = out[row, bins, :n]
        assert torch.allclose(masked, masked[0, 0].expand_as(masked))
        assert float(masked[0, 0]) == pytest.approx(float(mel[row, :, :n].mean()), abs=1e-5)
    assert torch.equal(augment_mel(mel, [100, 60], MelAugment(), g), mel)  # nothing asked


def test_the_draws_are_the_steps() -> None:
    from venus.train.augment import augmented
    from venus.train.batch import Batch

    mel = torch.stack([tone(300), tone(900)])
    names = [f.name for f in fields(Batch)]
    tokens = names[: names.index("mel")]  # the [B, L] tensors
    batch = Batch(**{name: torch.zeros(2, 4, dtype=torch.int64) for name in tokens}, mel=mel,
                  frames=None, frame_offset=torch.zeros(2, dtype=torch.int64))  # fmt: skip

    class Row:  # an Example as augmented reads it: its log-mel's frames
        def __init__(self, frames: int) -> None:
            self.mel = np.zeros((80, frames), np.float32)

    rows = [Row(100), Row(100)]
    aug = MelAugment(warp=0.1, gain_db=6.0, freq_masks=2)
    once = augmented(batch, rows, aug, seed=0, step=7).mel  # type: ignore[arg-type]
    again = augmented(batch, rows, aug, seed=0, step=7).mel  # type: ignore[arg-type]
    other = augmented(batch, rows, aug, seed=0, step=8).mel  # type: ignore[arg-type]
    assert torch.equal(once, again) and not torch.equal(once, other)
    assert not torch.equal(once, mel) and torch.equal(batch.mel, mel)  # a new tensor
    assert augmented(batch, rows, MelAugment(), 0, 7) is batch  # type: ignore[arg-type]
