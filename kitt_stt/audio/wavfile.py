"""Read WAV files for the client: 16 kHz mono int16 only, with an actionable error otherwise."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000


class WavFormatError(ValueError):
    pass


def read_wav_16k_mono(path: Path) -> np.ndarray:
    try:
        with wave.open(str(path), "rb") as handle:
            rate, channels, width = handle.getframerate(), handle.getnchannels(), handle.getsampwidth()
            frames = handle.readframes(handle.getnframes())
    except (wave.Error, EOFError) as exc:
        raise WavFormatError(f"{path}: not a PCM WAV file ({exc})") from None
    problems = []
    if rate != SAMPLE_RATE:
        problems.append(f"{rate} Hz (need 16000)")
    if channels != 1:
        problems.append(f"{channels} channels (need mono)")
    if width != 2:
        problems.append(f"{8 * width}-bit samples (need 16-bit)")
    if problems:
        raise WavFormatError(
            f"{path}: {', '.join(problems)}. Convert it first, e.g. "
            f"`sox {path.name} -r 16000 -c 1 -b 16 out.wav` or `ffmpeg -i {path.name} -ar 16000 -ac 1 out.wav`"
        )
    return np.frombuffer(frames, dtype="<i2").copy()


def write_wav_16k_mono(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(SAMPLE_RATE)
        handle.writeframes(np.asarray(samples, dtype="<i2").tobytes())
