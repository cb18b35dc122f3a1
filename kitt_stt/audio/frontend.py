"""What the speech detectors hear: cabin noise taken out before the decision.

Road, tyre and engine noise put most of their energy below ~150 Hz, where speech carries little
that a detector needs (its harmonics go on far above). webrtcvad, in particular, weighs its
lowest band (80-250 Hz) heavily and calls steady low-frequency noise speech. So every engine's
input goes through a high-pass filter, and the segmenter's decision is also held against a
running estimate of the noise floor: a frame counts as speech only if it stands out from the
noise around it, which is what lets a segment end in a moving car.

Both run on 20 ms frames in numpy (one pair of FFTs a frame, a few microseconds): the filter is
a linear-phase FIR applied by overlap-save, which needs no scipy.
"""

from __future__ import annotations

from collections import deque

import numpy as np

SAMPLE_RATE = 16000
#: Silence and digital zero sit at the floor's lower clamp instead of -inf.
LEVEL_FLOOR_DB = -90.0


def level_db(frame: np.ndarray) -> float:
    """RMS level of an int16 (or int16-scaled float) frame in dBFS."""
    if frame.size == 0:
        return LEVEL_FLOOR_DB
    samples = frame.astype(np.float64, copy=False)
    rms = float(np.sqrt(np.dot(samples, samples) / samples.shape[0])) / 32768.0  # dot: one call, not three
    return max(LEVEL_FLOOR_DB, 20.0 * np.log10(rms)) if rms > 0.0 else LEVEL_FLOOR_DB


class HighPassFilter:
    """Streaming linear-phase FIR high-pass (windowed sinc, spectral inversion) by overlap-save.

    ``cutoff_hz`` is the -6 dB point. The output lags the input by half the filter's length
    (``delay_samples``, ~20 ms): the segmenter's clock is the input's, and 20 ms is inside one frame of
    what the hysteresis already adds.
    """

    def __init__(self, cutoff_hz: float, frame_samples: int, taps: int = 641) -> None:
        if taps % 2 == 0:
            raise ValueError("a linear-phase high-pass needs an odd number of taps")
        self.delay_samples = taps // 2
        n = np.arange(taps) - taps // 2
        lowpass = np.sinc(2.0 * cutoff_hz / SAMPLE_RATE * n) * np.blackman(taps)
        lowpass /= lowpass.sum()
        kernel = -lowpass
        kernel[taps // 2] += 1.0
        self._frame = frame_samples
        self._history = taps - 1
        self._fft_size = 1 << int(np.ceil(np.log2(frame_samples + self._history)))
        self._response = np.fft.rfft(kernel, self._fft_size)
        self._tail = np.zeros(self._history, dtype=np.float64)

    def process(self, frame: np.ndarray) -> np.ndarray:
        """Filter one frame (int16 in, float64 int16-scaled out, same length)."""
        block = np.concatenate([self._tail, frame.astype(np.float64)])
        self._tail = block[-self._history :]
        filtered = np.fft.irfft(np.fft.rfft(block, self._fft_size) * self._response, self._fft_size)
        return filtered[self._history : self._history + frame.shape[0]]

    @staticmethod
    def process_together(filters: list[HighPassFilter], frames: list[np.ndarray]) -> list[np.ndarray]:
        """One frame through each of several filters of the same design (one per seat) with one
        FFT pair for all: each output is what that filter's :meth:`process` gives, without paying
        numpy's per-call overhead once per seat (half the filter's cost at 64 seats)."""
        first = filters[0]
        blocks = np.stack([np.concatenate([f._tail, frame.astype(np.float64)]) for f, frame in zip(filters, frames,
                                                                                                   strict=True)])
        spectra = np.fft.rfft(blocks, first._fft_size, axis=1) * first._response
        filtered = np.fft.irfft(spectra, first._fft_size, axis=1)
        for f, block in zip(filters, blocks, strict=True):
            f._tail = block[-f._history :]
        return [filtered[row, first._history : first._history + frame.shape[0]] for row, frame in enumerate(frames)]

    def reset(self) -> None:
        self._tail[:] = 0.0

    @property
    def nbytes(self) -> int:
        return self._tail.nbytes


class NoiseFloor:
    """The noise level around the speech: the quietest 20 ms frame of the last ``window_ms``.

    Speech is bursty (syllables, stops, breaths between words), so within a second or two some
    frame of it dips to the noise underneath; stationary noise never rises above its own minimum by
    much (a 20 ms frame's level varies by well under a dB). The minimum over the window tracks a
    noise that starts, stops or changes (a car accelerating) within that window, without having to
    know where the speech is. Frames are not smoothed first: smoothing would fill the short gaps
    between words that keep the floor down under continuous speech.
    """

    def __init__(self, window_ms: int, frame_ms: int) -> None:
        self._levels = deque[float](maxlen=max(1, window_ms // frame_ms))

    def update(self, level: float) -> float:
        """Take one frame's level (dBFS); return the floor, including that frame."""
        self._levels.append(level)
        return min(self._levels)

    def reset(self) -> None:
        self._levels.clear()

    @property
    def nbytes(self) -> int:
        return 8 * len(self._levels)
