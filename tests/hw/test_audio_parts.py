"""The microphone's ring and chunking and the speaker's position bookkeeping, alone.

The same parts run against a real PulseAudio in ``test_audio_io``; these pin the edge
cases (overflow, a gap in the input, interpolation inside the device buffer) exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from venus.hw.playout import Playout
from venus.hw.resample import ChunkAssembler
from venus.hw.ring import SampleRing


def test_the_ring_drops_the_oldest_and_says_how_many() -> None:
    ring = SampleRing(8)
    assert ring.write(np.arange(6, dtype=np.float32)) == 0
    assert ring.write(np.arange(6, 11, dtype=np.float32), filled=True) == 3
    start, samples, filled = ring.read()
    assert start == 3
    assert samples.tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert filled.tolist() == [False] * 3 + [True] * 5
    assert ring.available == 0


def test_chunks_restart_at_a_boundary_after_a_gap_and_count_silence() -> None:
    asm = ChunkAssembler(16000, 16000, 0.01)  # 160-sample chunks
    none = np.zeros(400, np.bool_)
    asm.feed(0, np.ones(400, np.float32), none)
    assert [asm.pop()[0], asm.pop()[0], asm.pop()] == [0, 1, None]  # type: ignore[index]
    asm.feed(500, np.ones(300, np.float32), np.arange(300) >= 200)  # 100 samples were lost
    index, samples, filled_s = asm.pop()  # type: ignore[misc]
    assert (index, samples.size) == (4, 160)  # [640, 800): 500..639 skipped
    assert filled_s == pytest.approx(100 / 16000)  # 700..799 were silence filled in
    asm.feed(800, np.ones(160, np.float32), np.ones(160, np.bool_))
    assert asm.pop()[2] == pytest.approx(160 / 16000)  # type: ignore[index]


def test_the_played_position_interpolates_inside_the_device_buffer() -> None:
    playout = Playout(48000)
    playout.enqueue(np.ones(960, np.float32), 480.0)  # 20 ms at 48 kHz from 24 kHz
    block = np.empty(480, np.float32)
    playout.fill(block, heard_at_s=10.0)
    assert block.all()
    assert playout.played(9.99) == 0.0  # still in the device buffer
    assert playout.played(10.005) == pytest.approx(120.0)
    playout.fill(block, heard_at_s=10.01)
    playout.fill(block, heard_at_s=10.02)  # the queue ran dry: silence, no record
    assert not block.any()
    assert playout.played(10.5) == pytest.approx(480.0)
