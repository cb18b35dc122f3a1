"""Uploaded audio files -> 16 kHz mono int16, for ``POST /v1/audio/transcriptions``.

WAV only, read by hand: the stdlib ``wave`` module refuses float and WAVE_FORMAT_EXTENSIBLE
files (what most tools write for 24-bit and multichannel audio), and a decoding library for
FLAC/MP3/Opus (libsndfile, ffmpeg) is not among the core dependencies, which stay light for the
car image. Any channel count is accepted, and any sample rate whose ratio to 16 kHz is a small
fraction (every standard rate from 8 to 384 kHz): channels are averaged and the audio resampled
with a windowed-sinc polyphase filter. Anything else is refused with a message that names the
one-line conversion.
"""

from __future__ import annotations

import struct
from math import gcd

import numpy as np

from kitt_stt.quote import quoted

TARGET_RATE = 16000
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_TAPS_PER_PHASE = 16  # filter half-width in output-rate periods: >60 dB stopband above the target Nyquist (tests)
#: The filter has 2 * _TAPS_PER_PHASE * max(up, down) taps for a rate ratio reduced to up/down, so a
#: rate coprime with 16 kHz (383999 Hz: 12.3M taps, 1 GB and seconds of CPU for 2 s of audio) is
#: refused; 11025 Hz (640/441) is the largest ratio among the standard rates.
MAX_RATIO_TERM = 1000
#: Window elements (output samples x filter phases) per vectorised step: ~24 MB of working memory
#: whatever the rate, for long files and high rates alike.
_STEP_ELEMENTS = 1 << 20


class UnsupportedAudio(ValueError):
    """The upload is not audio this server can decode; the message says what to do."""


class AudioTooLong(ValueError):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:.1f} s of audio")
        self.seconds = seconds


def decode_upload(data: bytes, filename: str, max_seconds: float | None = None) -> np.ndarray:
    """The upload as 16 kHz mono int16 samples; ``AudioTooLong`` before any resampling work when
    the file holds more than ``max_seconds``."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        kind = _sniff(data)
        name = quoted(filename) if filename else None
        raise UnsupportedAudio(
            f"{name or 'the file'} is {kind}, not a WAV file: this server decodes WAV (PCM or float, "
            f"any channel count) only. Convert it first, e.g. "
            f"`ffmpeg -i {name or 'input'} -ar 16000 -ac 1 out.wav`")
    rate, channels, samples = _read_wav(data)
    if max_seconds is not None and samples.shape[0] / rate > max_seconds:
        raise AudioTooLong(samples.shape[0] / rate)
    mono = samples.mean(axis=1) if channels > 1 else samples[:, 0]
    resampled = resample(mono, rate, TARGET_RATE)
    return np.clip(np.round(resampled * 32768.0), -32768, 32767).astype(np.int16)


def _sniff(data: bytes) -> str:
    signatures = {b"fLaC": "FLAC", b"OggS": "Ogg", b"ID3": "MP3", b"\xff\xfb": "MP3", b"\x1aE\xdf\xa3": "WebM/Matroska"}
    for magic, name in signatures.items():
        if data.startswith(magic):
            return name
    if data[4:8] == b"ftyp":
        return "MP4/M4A"
    return "not a recognised audio format"


def _read_wav(data: bytes) -> tuple[int, int, np.ndarray]:
    """(sample rate, channels, float samples in [-1, 1] shaped [frames, channels])."""
    fmt: tuple[int, int, int, int] | None = None
    payload: bytes | None = None
    offset = 12
    while offset + 8 <= len(data):
        chunk_id, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        body = data[offset + 8:offset + 8 + size]
        if chunk_id == b"fmt " and len(body) >= 16:
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", body)
            if tag == _EXTENSIBLE and len(body) >= 26:
                tag = struct.unpack_from("<H", body, 24)[0]  # the sub-format GUID starts with the tag
            fmt = (tag, channels, rate, bits)
        elif chunk_id == b"data":
            payload = body  # a truncated file (size larger than what arrived) keeps what is there
            break
        offset += 8 + size + (size & 1)
    if fmt is None or payload is None:
        raise UnsupportedAudio("the WAV file has no fmt or no data chunk (truncated or not a WAV file)")
    tag, channels, rate, bits = fmt
    if channels < 1 or not 1000 <= rate <= 384_000:
        raise UnsupportedAudio(f"the WAV header is implausible ({channels} channels, {rate} Hz)")
    up, down = ratio(rate, TARGET_RATE)
    if max(up, down) > MAX_RATIO_TERM:
        raise UnsupportedAudio(
            f"the sample rate {rate} Hz is not one this server resamples (to 16000 Hz it is {up}/{down}, which needs "
            f"a filter of {2 * _TAPS_PER_PHASE * max(up, down)} taps): use a standard rate such as 8000, 11025, "
            f"16000, 22050, 32000, 44100, 48000 or 96000 Hz (any rate whose ratio to 16000 Hz reduces to terms of at "
            f"most {MAX_RATIO_TERM}), e.g. `ffmpeg -i in.wav -ar 16000 -ac 1 out.wav`")
    samples = _samples(payload, tag, bits)
    frames = samples.shape[0] // channels
    return rate, channels, samples[: frames * channels].reshape(frames, channels)


def _samples(payload: bytes, tag: int, bits: int) -> np.ndarray:
    if tag == _PCM and bits == 8:
        return (np.frombuffer(payload, np.uint8).astype(np.float32) - 128.0) / 128.0
    if tag == _PCM and bits == 16:
        return np.frombuffer(payload[: len(payload) // 2 * 2], "<i2").astype(np.float32) / 32768.0
    if tag == _PCM and bits == 24:
        raw = np.frombuffer(payload[: len(payload) // 3 * 3], np.uint8).reshape(-1, 3).astype(np.int32)
        value = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        return (np.where(value >= 1 << 23, value - (1 << 24), value) / float(1 << 23)).astype(np.float32)
    if tag == _PCM and bits == 32:
        return (np.frombuffer(payload[: len(payload) // 4 * 4], "<i4") / float(1 << 31)).astype(np.float32)
    if tag == _FLOAT and bits in (32, 64):
        dtype = "<f4" if bits == 32 else "<f8"
        width = bits // 8
        return np.frombuffer(payload[: len(payload) // width * width], dtype).astype(np.float32)
    raise UnsupportedAudio(f"WAV format tag {tag} with {bits}-bit samples is not supported (use PCM 8/16/24/32-bit "
                           f"or float 32/64-bit), e.g. `ffmpeg -i in.wav -ar 16000 -ac 1 -c:a pcm_s16le out.wav`")


def ratio(rate: int, target: int) -> tuple[int, int]:
    """``target / rate`` in lowest terms, as (up, down)."""
    divisor = gcd(rate, target)
    return target // divisor, rate // divisor


def resample(signal: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Rational-ratio polyphase resampling with a Kaiser-windowed sinc low-pass at the lower
    Nyquist frequency (so 44.1/48 kHz uploads do not alias into the speech band)."""
    if rate == target or signal.size == 0:
        return signal.astype(np.float32)
    up, down = ratio(rate, target)
    cutoff = 0.5 / max(up, down) * 0.94  # cycles per sample of the up-sampled stream, a little below Nyquist
    half = _TAPS_PER_PHASE * max(up, down)
    taps = np.arange(-half, half + 1)
    kernel = 2 * cutoff * up * np.sinc(2 * cutoff * taps) * np.kaiser(taps.size, 8.6)
    phases = -(-kernel.size // up)
    padded_kernel = np.zeros(phases * up)
    padded_kernel[: kernel.size] = kernel
    bank = padded_kernel.reshape(phases, up).T  # bank[p, k] = kernel[p + k*up]
    source = np.concatenate([np.zeros(phases), signal.astype(np.float64), np.zeros(phases)])
    total = signal.size * up // down
    out = np.empty(total, dtype=np.float32)
    reach = np.arange(phases)
    step = max(1, _STEP_ELEMENTS // phases)  # a 384 kHz file has 769 phases, a 48 kHz one 97
    for start in range(0, total, step):
        n = np.arange(start, min(total, start + step))
        position = n * down + half  # index into the up-sampled stream, delayed by the filter's centre
        phase, base = position % up, position // up
        window = source[(base + phases)[:, None] - reach[None, :]]
        out[start:start + n.size] = np.einsum("ij,ij->i", window, bank[phase])
    return out
