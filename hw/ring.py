"""A fixed-size ring of mono float32 samples between an audio callback and its reader.

Positions are absolute: sample ``n`` is the n-th sample written since the ring was made,
so the reader can tell exactly what an overflow took. Each sample carries a ``filled``
flag (silence inserted while the device was lost). The ring is not locked: its owner
holds one lock around ``write`` and ``read``, which only copy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Samples = npt.NDArray[np.float32]
Flags = npt.NDArray[np.bool_]


class SampleRing:
    """Single writer, single reader; a full ring drops its oldest samples."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be at least 1 sample, got {capacity}")
        self.capacity = capacity
        self._samples = np.zeros(capacity, np.float32)
        self._filled = np.zeros(capacity, np.bool_)
        self.written = 0  # absolute position of the next sample to write
        self.read_pos = 0  # absolute position of the oldest unread sample

    @property
    def available(self) -> int:
        return self.written - self.read_pos

    def write(self, samples: Samples, filled: bool = False) -> int:
        """Append ``samples``; returns how many unread samples were dropped to make room."""
        n = int(samples.shape[0])
        if n > self.capacity:  # keep the newest
            self.written += n - self.capacity
            samples = samples[-self.capacity :]
            n = self.capacity
        dropped = max(0, self.written + n - self.read_pos - self.capacity)
        self.read_pos += dropped
        start = self.written % self.capacity
        first = min(n, self.capacity - start)
        self._samples[start : start + first] = samples[:first]
        self._samples[: n - first] = samples[first:]
        self._filled[start : start + first] = filled
        self._filled[: n - first] = filled
        self.written += n
        return dropped

    def read(self, max_samples: int | None = None) -> tuple[int, Samples, Flags]:
        """(absolute position of the first, samples, filled flags): everything unread."""
        n = self.available if max_samples is None else min(max_samples, self.available)
        pos = self.read_pos
        idx = (pos + np.arange(n)) % self.capacity
        self.read_pos += n
        return pos, self._samples[idx], self._filled[idx]
