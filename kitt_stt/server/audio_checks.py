"""What an ``audio`` frame must be before its PCM reaches a seat (``bad_audio`` otherwise)."""

from __future__ import annotations

from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import AudioFrame

SAMPLE_RATE = 16000
BYTES_PER_10MS = SAMPLE_RATE // 100 * 2


def checked_pcm_bytes(frame: AudioFrame, max_frame_ms: int) -> int:
    """The frame's PCM length: 16 kHz, whole 10 ms blocks, at most ``max_frame_ms``."""
    if frame.sample_rate is not None and frame.sample_rate != SAMPLE_RATE:
        raise ProtocolError(ErrorCode.BAD_AUDIO,
                            f"sample_rate {frame.sample_rate} is not supported; send 16000 Hz mono int16", frame.seat)
    size = len(frame.pcm)
    if size % BYTES_PER_10MS:
        raise ProtocolError(ErrorCode.BAD_AUDIO, f"pcm is {size} bytes, not a whole number of 10 ms blocks "
                                                 f"({BYTES_PER_10MS} bytes of 16 kHz int16)", frame.seat)
    if size > max_frame_ms * BYTES_PER_10MS // 10:
        raise ProtocolError(ErrorCode.BAD_AUDIO, f"pcm is {size // 32} ms; at most {max_frame_ms} ms per frame",
                            frame.seat)
    return size
