"""A fixed-size ring of the most recent int16 samples of a seat.

The end-of-turn model looks at the last 8 s of a turn.  Keeping exactly that many samples
(allocated once, on first use) bounds the memory per seat by bytes, whatever the frame sizes.
"""

from __future__ import annotations

import numpy as np


class SampleRing:
    __slots__ = ("_capacity", "_data", "_total")

    def __init__(self, capacity_samples: int) -> None:
        self._capacity = capacity_samples
        self._data: np.ndarray | None = None
        self._total = 0  # samples ever appended: absolute position of the stream's end

    def append(self, samples: np.ndarray) -> None:
        if self._data is None:
            self._data = np.zeros(self._capacity, dtype=np.int16)
        count = samples.shape[0]
        if count > self._capacity:  # only the newest samples can be kept
            self._total += count - self._capacity
            samples, count = samples[-self._capacity :], self._capacity
        start = self._total % self._capacity
        first = min(count, self._capacity - start)
        self._data[start : start + first] = samples[:first]
        self._data[: count - first] = samples[first:]
        self._total += count

    @property
    def position(self) -> int:
        """Absolute sample index of the end of the stream so far."""
        return self._total

    def since(self, position: int) -> np.ndarray:
        """A copy of the samples from absolute ``position`` to now (at most the ring's capacity)."""
        if self._data is None:
            return np.zeros(0, dtype=np.int16)
        count = min(self._total - max(position, 0), self._capacity, self._total)
        if count <= 0:
            return np.zeros(0, dtype=np.int16)
        end = self._total % self._capacity
        start = (end - count) % self._capacity
        if start < end:
            return self._data[start:end].copy()
        return np.concatenate([self._data[start:], self._data[:end]])

    @property
    def nbytes(self) -> int:
        return 0 if self._data is None else int(self._data.nbytes)

    def release(self) -> None:
        self._data = None
