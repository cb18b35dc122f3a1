"""Whisper log-mel features for the end-of-turn model, in numpy float64.

The shipped int8 model is very sensitive to its input (a float32 variant differing by 1e-5
moved the probability by up to 0.15), so this follows the Whisper feature extractor exactly:
last 8 s, zero-padded on the left; zero-mean unit-variance over the padded buffer; periodic
Hann window of 400, hop 160, centred reflect padding; power spectrum; 80 Slaney-normalised mel
bands 0-8000 Hz; log10 with a 1e-10 floor; last frame dropped; clamp at max-8; (x+4)/4.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16000
WINDOW_SECONDS = 8
WINDOW_SAMPLES = SAMPLE_RATE * WINDOW_SECONDS
N_FFT = 400
HOP = 160
N_MELS = 80
FRAMES = WINDOW_SAMPLES // HOP  # 800


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    linear = freq / (200.0 / 3.0)
    log_part = 15.0 + np.log(np.maximum(freq, 1e-12) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(freq >= 1000.0, log_part, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * (200.0 / 3.0)
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log_part, linear)


@lru_cache(maxsize=1)
def mel_filters() -> np.ndarray:
    """(201, 80) triangular filters on the rFFT bins, each scaled by 2 / its bandwidth (Slaney)."""
    fft_freqs = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(8000.0)), N_MELS + 2))
    widths = np.diff(edges)
    offsets = edges[None, :] - fft_freqs[:, None]
    rising = -offsets[:, :-2] / widths[:-1]
    falling = offsets[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    return filters * (2.0 / (edges[2:] - edges[:-2]))[None, :]


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann


def prepare_window(samples: np.ndarray) -> np.ndarray:
    """int16 (or float) audio -> the last 8 s as float64, zero-padded on the left, normalised."""
    audio = np.asarray(samples)
    audio = audio.astype(np.float64) / 32768.0 if audio.dtype == np.int16 else audio.astype(np.float64)
    audio = audio[-WINDOW_SAMPLES:]
    if audio.shape[0] < WINDOW_SAMPLES:
        audio = np.concatenate([np.zeros(WINDOW_SAMPLES - audio.shape[0]), audio])
    return (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)


def log_mel(samples: np.ndarray) -> np.ndarray:
    """Audio -> (80, 800) float32 model input."""
    return log_mel_spectrogram(prepare_window(samples))


def log_mel_spectrogram(audio: np.ndarray) -> np.ndarray:
    """float64 audio as it is (no normalisation, no window) -> (80, len/160) float32 Whisper features."""
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    count = 1 + (padded.shape[0] - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(
        padded, shape=(count, N_FFT), strides=(padded.strides[0] * HOP, padded.strides[0]), writeable=False
    )
    power = np.abs(np.fft.rfft(frames * _window(), axis=1)) ** 2
    mel = np.log10(np.maximum(power @ mel_filters(), 1e-10)).T[:, :-1]
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)
