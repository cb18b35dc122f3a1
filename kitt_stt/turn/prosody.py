"""Prosody at the end of a turn, from its audio, in numpy: computed once per look, in a few ms.

A speaker who is done usually lets the pitch fall, the energy decay and the last syllable
stretch; one who stops to think often holds the pitch level or rising and stops abruptly. None
of this is reliable alone (read speech, Mandarin tones), so these are features for the combiner,
not rules. Pitch is YIN per 32 ms frame (10 ms hop, 70-400 Hz), its difference function taken
from one batched FFT autocorrelation; frames without a clear period count as unvoiced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16000
FRAME = 512  # 32 ms
HOP = 160  # 10 ms
MIN_LAG, MAX_LAG = SAMPLE_RATE // 400, SAMPLE_RATE // 70
YIN_THRESHOLD = 0.2  # the first lag whose normalised difference dips under this is the period
VOICING = 0.35  # frames whose best normalised difference stays above this are unvoiced
TAIL_S = 1.0  # the end of the turn that is looked at
SILENCE_DB = 25.0  # frames this far below the loudest frame are silence (trailing pause trimmed)
QUIET_DB = -70.0  # a tail whose loudest frame is below this (dB full scale) holds no speech


@dataclass(frozen=True)
class Prosody:
    pitch_slope: float  # semitones per second over the last 0.4 s of voiced speech (falling < 0)
    pitch_final: float  # the last 0.1 s of voiced pitch against the tail's median, semitones
    energy_slope: float  # dB per second over the last 0.3 s of speech (decaying < 0)
    final_lengthening: float  # log of the last voiced run's length over the tail's median run

    def as_list(self) -> list[float]:
        return [self.pitch_slope, self.pitch_final, self.energy_slope, self.final_lengthening]


NEUTRAL = Prosody(0.0, 0.0, 0.0, 0.0)


def _frames(audio: np.ndarray) -> np.ndarray:
    count = 1 + (audio.shape[0] - FRAME) // HOP
    return np.lib.stride_tricks.as_strided(audio, shape=(count, FRAME),
                                           strides=(audio.strides[0] * HOP, audio.strides[0]), writeable=False)


def _db(frames: np.ndarray) -> np.ndarray:
    return 10.0 * np.log10(np.mean(frames ** 2, axis=1) + 1e-10)


def speech_tail(samples: np.ndarray) -> np.ndarray:
    """The last ``TAIL_S`` of speech: trailing silence (the pause the decision sits in) removed."""
    audio = np.asarray(samples, dtype=np.float64) / 32768.0
    if audio.shape[0] < FRAME:
        return audio[:0]
    db = _db(_frames(audio))
    end = int(np.flatnonzero(db > db.max() - SILENCE_DB)[-1]) * HOP + FRAME
    return audio[max(0, end - int(TAIL_S * SAMPLE_RATE)):end]


def _pitch(frames: np.ndarray) -> np.ndarray:
    """f0 in Hz per frame, NaN where unvoiced: YIN's cumulative-mean-normalised difference, with
    the difference taken from the unbiased autocorrelation (frame energy treated as constant)."""
    centred = frames - frames.mean(axis=1, keepdims=True)
    acf = np.fft.irfft(np.abs(np.fft.rfft(centred, n=2 * FRAME, axis=1)) ** 2, axis=1)[:, : MAX_LAG + 1]
    acf = acf * (FRAME / (FRAME - np.arange(MAX_LAG + 1)))  # lag k sums FRAME - k products
    diff = 2.0 * (acf[:, :1] - acf[:, 1:])  # diff[:, k] is lag k + 1
    cmnd = diff / (np.cumsum(diff, axis=1) / np.arange(1, MAX_LAG + 1) + 1e-12)
    window = cmnd[:, MIN_LAG - 1:]
    below = window < YIN_THRESHOLD
    best = np.where(below.any(axis=1), np.argmax(below, axis=1), np.argmin(window, axis=1))
    rows = np.arange(window.shape[0])
    for _ in range(8):  # from the first dip under the threshold down to its local minimum
        step = np.minimum(best + 1, window.shape[1] - 1)
        better = window[rows, step] < window[rows, best]
        if not better.any():
            break
        best = np.where(better, step, best)
    return np.where(window[rows, best] < VOICING, SAMPLE_RATE / (best + MIN_LAG).astype(np.float64), np.nan)


def _last_run_lengthening(voiced: np.ndarray) -> float:
    edges = np.diff(np.concatenate([[0], voiced.astype(np.int8), [0]]))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    return float(np.log(runs[-1] / max(1.0, float(np.median(runs))))) if runs.size else 0.0


def prosody(samples: np.ndarray) -> Prosody:
    """Prosody features of the end of the turn in ``samples`` (int16, 16 kHz, trailing pause allowed)."""
    tail = speech_tail(samples)
    if tail.shape[0] < FRAME * 4:
        return NEUTRAL
    frames = _frames(tail)
    db = _db(frames)
    if db.max() < QUIET_DB:
        return NEUTRAL
    semitones = 12.0 * np.log2(_pitch(frames) / 100.0)
    semitones[db < db.max() - SILENCE_DB] = np.nan  # a quiet frame has no pitch worth reading
    voiced = np.isfinite(semitones)
    times = np.flatnonzero(voiced)
    if times.size < 5:
        return NEUTRAL
    last = times[-40:]  # the last 0.4 s of voiced speech, wherever the unvoiced ending starts
    slope = float(np.polyfit(last * (HOP / SAMPLE_RATE), semitones[last], 1)[0])
    pitch_final = float(np.median(semitones[times[-10:]]) - np.median(semitones[times]))
    energy = float(np.polyfit(np.arange(30) * (HOP / SAMPLE_RATE), db[-30:], 1)[0]) if db.size >= 30 else 0.0
    return Prosody(float(np.clip(slope, -60.0, 60.0)), float(np.clip(pitch_final, -12.0, 12.0)),
                   float(np.clip(energy, -300.0, 300.0)), _last_run_lengthening(voiced))
