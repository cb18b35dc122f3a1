"""An append-only int16 buffer that grows by doubling.

Segments receive 20 ms at a time for up to ``vad.max_segment_ms``; ``bytes +=`` would copy the
whole segment on every frame.  Here appends are amortised O(frame) and :meth:`view` hands the
decoder a zero-copy view: we only ever write past the end, so an earlier view never changes.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000


class PcmBuffer:
    __slots__ = ("_data", "_length")

    def __init__(self, initial_samples: int = SAMPLE_RATE) -> None:
        self._data = np.empty(max(initial_samples, 1), dtype=np.int16)
        self._length = 0

    def append(self, samples: np.ndarray) -> None:
        needed = self._length + samples.shape[0]
        if needed > self._data.shape[0]:
            grown = np.empty(max(needed, 2 * self._data.shape[0]), dtype=np.int16)
            grown[: self._length] = self._data[: self._length]
            self._data = grown
        self._data[self._length : needed] = samples
        self._length = needed

    def view(self) -> np.ndarray:
        """The samples so far; stays valid and unchanged while the buffer keeps growing."""
        return self._data[: self._length]

    @property
    def samples(self) -> int:
        return self._length

    @property
    def duration_ms(self) -> int:
        return self._length * 1000 // SAMPLE_RATE

    @property
    def nbytes(self) -> int:
        """Bytes held (capacity), which is what memory accounting should count."""
        return int(self._data.nbytes)
