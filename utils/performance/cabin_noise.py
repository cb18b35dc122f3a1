"""Cabin noise for the VAD benchmark and tests: synthetic road, engine, fan and babble noise, and
mixing at a given SNR or level. All numpy, seeded, so every run hears the same noise.

What each stands for: ``brown`` (1/f^2, road and tyre rumble), ``pink`` (1/f, wind), ``white``
(hiss), ``engine`` (a firing-frequency hum with harmonics whose rpm drifts, plus some rumble),
``fan`` (blower: band-limited noise with a blade tone), ``babble`` (several speech recordings
overlapped: passengers talking, the hardest case for any VAD).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

SAMPLE_RATE = 16000


def _shaped(samples: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise with power spectrum ~ 1/f**exponent (above 20 Hz), unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(samples))
    freqs = np.fft.rfftfreq(samples, 1.0 / SAMPLE_RATE)
    spectrum *= 1.0 / np.maximum(freqs, 20.0) ** (exponent / 2.0)
    noise = np.fft.irfft(spectrum, samples)
    return noise / np.sqrt(np.mean(noise**2))


def brown(samples: int, rng: np.random.Generator) -> np.ndarray:
    return _shaped(samples, 2.0, rng)


def pink(samples: int, rng: np.random.Generator) -> np.ndarray:
    return _shaped(samples, 1.0, rng)


def white(samples: int, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(samples)


def engine(samples: int, rng: np.random.Generator) -> np.ndarray:
    """A 4-cylinder engine between ~1500 and ~3000 rpm: firing frequency 50-100 Hz, drifting."""
    t = np.arange(samples) / SAMPLE_RATE
    rpm = 2200.0 + 700.0 * np.sin(2 * np.pi * t / 7.0) + 100.0 * np.sin(2 * np.pi * t / 1.3)
    phase = 2 * np.pi * np.cumsum(rpm / 60.0 * 2.0) / SAMPLE_RATE  # 2 firings a revolution
    hum = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 9))
    noise = hum / np.sqrt(np.mean(hum**2)) + 0.5 * brown(samples, rng)
    return noise / np.sqrt(np.mean(noise**2))


def fan(samples: int, rng: np.random.Generator) -> np.ndarray:
    """Blower noise: white noise rolled off above ~2 kHz, with a 180 Hz blade-pass tone."""
    spectrum = np.fft.rfft(rng.standard_normal(samples))
    freqs = np.fft.rfftfreq(samples, 1.0 / SAMPLE_RATE)
    spectrum /= 1.0 + (freqs / 2000.0) ** 2
    noise = np.fft.irfft(spectrum, samples)
    noise /= np.sqrt(np.mean(noise**2))
    t = np.arange(samples) / SAMPLE_RATE
    noise += 0.4 * np.sin(2 * np.pi * 180.0 * t)
    return noise / np.sqrt(np.mean(noise**2))


def babble_from(recordings: Sequence[np.ndarray]) -> Callable[[int, np.random.Generator], np.ndarray]:
    """Noise made of the given speech recordings (int16), several overlapped at random offsets."""
    def babble(samples: int, rng: np.random.Generator) -> np.ndarray:
        mix = np.zeros(samples)
        for _voice in range(4):
            position = int(rng.integers(0, SAMPLE_RATE // 2))
            while position < samples:
                clip = recordings[int(rng.integers(len(recordings)))].astype(np.float64)
                end = min(samples, position + clip.shape[0])
                mix[position:end] += clip[: end - position]
                position = end + int(rng.integers(0, SAMPLE_RATE // 4))
        return mix / np.sqrt(np.mean(mix**2))
    return babble


SYNTHETIC: dict[str, Callable[[int, np.random.Generator], np.ndarray]] = {
    "brown": brown, "pink": pink, "white": white, "engine": engine, "fan": fan,
}


def at_level(noise: np.ndarray, dbfs: float) -> np.ndarray:
    """Unit-RMS noise scaled to an RMS of ``dbfs`` (int16 scale, float)."""
    return noise * 32768.0 * 10.0 ** (dbfs / 20.0)


def voiced_power(speech: np.ndarray, threshold: int = 300) -> float:
    """Mean power of the samples louder than ``threshold`` (the speech, not its pauses)."""
    voiced = speech[np.abs(speech.astype(np.int32)) > threshold].astype(np.float64)
    return float(np.mean(voiced**2)) if voiced.size else 1.0


def mix(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``speech`` (int16) over ``noise`` (unit RMS, at least as long) at ``snr_db`` below the
    speech's voiced power; int16, clipped."""
    scale = np.sqrt(voiced_power(speech) / 10.0 ** (snr_db / 10.0))
    mixed = speech.astype(np.float64) + scale * noise[: speech.shape[0]]
    return np.clip(np.rint(mixed), -32768, 32767).astype(np.int16)


def to_int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(audio), -32768, 32767).astype(np.int16)
