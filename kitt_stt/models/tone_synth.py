"""Synthesizer for the tone test language: turns text into harmonic buzzes.

The tone model (:mod:`kitt_stt.models.tone_model`) recognises exactly these sounds, which lets
functional tests push deterministic "speech" through the real VAD, sherpa-onnx and the server.
The pitch table and the buzz formula are a public contract (``docs/testing.md``): tests outside
this repository synthesise their own audio from it, so do not change them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16000

#: Token -> fundamental frequency in Hz.  Order is the contract's order.
TONE_PITCHES: dict[str, float] = {
    "打": 100.0,
    "开": 118.0,
    "关": 140.0,
    "车": 165.0,
    "门": 195.0,
    "窗": 230.0,
    "A": 270.0,
    "B": 320.0,
    "C": 380.0,
    "D": 450.0,
    "E": 530.0,
    "F": 620.0,
}

MAX_HARMONIC_HZ = 7800.0
FADE_MS = 10.0


def buzz(f0: float, duration_ms: float, peak: float = 0.5) -> np.ndarray:
    """One harmonic buzz ``sum_j sin(2*pi*j*f0*t)/j`` as float32 in [-peak, peak].

    Harmonics stop at 7.8 kHz (below Nyquist) and 10 ms raised-cosine fades avoid clicks,
    which webrtcvad and the fbank would otherwise see as broadband energy.
    """
    n = round(duration_ms * SAMPLE_RATE / 1000.0)
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    wave = np.zeros(n, dtype=np.float64)
    harmonic = 1
    while harmonic * f0 <= MAX_HARMONIC_HZ:
        wave += np.sin(2.0 * np.pi * harmonic * f0 * t) / harmonic
        harmonic += 1
    top = float(np.max(np.abs(wave))) if n else 0.0
    if top > 0.0:
        wave *= peak / top
    fade = min(int(FADE_MS * SAMPLE_RATE / 1000.0), n // 2)
    if fade > 0:
        ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)
        wave[:fade] *= ramp
        wave[n - fade :] *= ramp[::-1]
    return wave.astype(np.float32)


@dataclass(frozen=True)
class ToneStyle:
    """How a sentence is spoken: burst length, gap between bursts, loudness, noise."""

    burst_ms: float = 200.0
    gap_ms: float = 100.0
    peak: float = 0.5
    lead_ms: float = 0.0
    tail_ms: float = 0.0
    snr_db: float | None = None
    seed: int = 0


def synthesize(text: str, style: ToneStyle | None = None) -> np.ndarray:
    """Speak ``text`` (characters from :data:`TONE_PITCHES`) as float32 audio at 16 kHz.

    Spaces are ignored.  Unknown characters raise ``ValueError`` so a typo in a test fails
    loudly instead of producing silence.
    """
    style = style or ToneStyle()
    gap = np.zeros(round(style.gap_ms * SAMPLE_RATE / 1000.0), dtype=np.float32)
    pieces = [np.zeros(round(style.lead_ms * SAMPLE_RATE / 1000.0), dtype=np.float32)]
    tokens = [ch for ch in text if not ch.isspace()]
    for index, token in enumerate(tokens):
        if token not in TONE_PITCHES:
            raise ValueError(f"{token!r} is not a tone token; known: {''.join(TONE_PITCHES)}")
        if index:
            pieces.append(gap)
        pieces.append(buzz(TONE_PITCHES[token], style.burst_ms, style.peak))
    pieces.append(np.zeros(round(style.tail_ms * SAMPLE_RATE / 1000.0), dtype=np.float32))
    audio = np.concatenate(pieces)
    if style.snr_db is not None:
        audio = add_white_noise(audio, style.snr_db, style.seed)
    return audio


def add_white_noise(audio: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    """Add white noise whose power is ``snr_db`` below the power of the voiced samples."""
    voiced = audio[np.abs(audio) > 0]
    signal_power = float(np.mean(voiced.astype(np.float64) ** 2)) if voiced.size else 1e-6
    noise_power = signal_power / (10.0 ** (snr_db / 10.0))
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, np.sqrt(noise_power), size=audio.shape)
    return np.clip(audio + noise, -1.0, 1.0).astype(np.float32)


def to_pcm16(audio: np.ndarray) -> bytes:
    """Float [-1, 1] -> little-endian int16 bytes, the wire format."""
    clipped = np.clip(audio, -1.0, 32767.0 / 32768.0)
    return (clipped * 32768.0).astype("<i2").tobytes()
