"""Pause-chunked decoding of one segment.

Re-decoding a whole growing segment for every interim and for the final makes the final's
cost grow with the segment (and the total with its square).  Instead, a pause of at least
``asr.chunk_pause_ms`` inside the segment (shorter than ``vad.silence_ms``, so the segment goes
on) closes a chunk, cut in the middle of the pause; speech without such pauses is cut at
``asr.max_chunk_ms``.  A closed chunk is decoded once, at a priority between finals and interims,
and its text is kept.  Interims and the final decode only the open tail and join the texts,
so the final costs what the last phrase costs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kitt_stt.asr.features import FeatureStream
from kitt_stt.scheduler import DecodeOutcome

FRAME_SAMPLES = 320


@dataclass
class ClosedChunk:
    start: int  # sample offsets in the segment buffer
    end: int
    decode: asyncio.Future[DecodeOutcome | None]


@dataclass
class ChunkTracker:
    """Where the open chunk starts and which chunks are closed; fed one VAD frame at a time."""

    pause_frames: int  # 0: chunking off
    max_chunk_samples: int
    open_start: int = 0
    closed: list[ClosedChunk] = field(default_factory=list)
    features: FeatureStream | None = None  # the open chunk's incremental front end
    _pause_run: int = 0

    def reached_max(self, buffered_samples: int) -> bool:
        """The open chunk is ``asr.max_chunk_ms`` long: it must be cut, whatever else wants."""
        return buffered_samples - self.open_start >= self.max_chunk_samples

    def boundary_after(self, voiced: bool, buffered_samples: int) -> int | None:
        """Call after appending a frame; returns a cut position when the open chunk should close."""
        if not self.pause_frames:
            return None
        if not voiced:
            self._pause_run += 1
            if self.reached_max(buffered_samples):
                return buffered_samples  # long speech without a real pause: cut in this quiet frame
            return None
        run, self._pause_run = self._pause_run, 0
        if run >= self.pause_frames:
            cut = buffered_samples - FRAME_SAMPLES - (run // 2) * FRAME_SAMPLES  # middle of the pause
            return cut if cut > self.open_start else None
        if buffered_samples - self.open_start >= 2 * self.max_chunk_samples:
            return buffered_samples - FRAME_SAMPLES  # no quiet frame at all: hard cut
        return None
