"""Real speech for the evaluation tools: espeak-ng and recordings from Debian packages as 16 kHz
mono int16, trimmed to the speech. Needs Debian's ``espeak-ng`` and ``sox``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from kitt_stt.audio.wavfile import read_wav_16k_mono


def to_16k(src: Path, dst: Path) -> np.ndarray:
    """Any audio file as 16 kHz mono int16. ``-D``: no dither, so the same file gives the same
    samples on every run."""
    subprocess.run(["sox", "-D", str(src), "-r", "16000", "-c", "1", "-b", "16", str(dst)], check=True,
                   capture_output=True)
    return read_wav_16k_mono(dst)


def trim_silence(samples: np.ndarray, threshold: int = 300) -> np.ndarray:
    """From the first to the last sample louder than ``threshold``."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > threshold)
    return samples[loud[0] : loud[-1] + 1] if loud.size else samples


def espeak(text: str, voice: str, work: Path, *options: str) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``voice`` (extra command-line ``options``, e.g. "-s", "160"),
    trimmed; ``work`` holds the intermediate files."""
    raw = work / "espeak.wav"
    subprocess.run(["espeak-ng", "-v", voice, *options, "-w", str(raw), text], check=True, capture_output=True)
    return trim_silence(to_16k(raw, work / "espeak16.wav"))
