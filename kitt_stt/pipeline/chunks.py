"""Pause-chunked decoding of one segment.

Re-decoding a whole growing segment for every interim and for the final makes the final's
cost grow with the segment (and the total with its square).  Instead the segment is cut into
chunks, each decoded once at a priority between finals and interims, and its text is kept.
Interims and the final decode only the open tail and join the texts, so the final costs what
the last phrase costs.

Where a chunk is cut:

* **At a pause, as soon as it is long enough.**  When ``asr.chunk_pause_ms`` of non-speech
  follow speech, the chunk closes right there (speech plus that much silence).  If the silence
  goes on and ends the segment, the open tail holds no voiced frame, so the final needs no
  decode of its own: its text is the chunks' texts, which were decoding while the VAD waited
  out ``vad.silence_ms``.  The cut comes before the segment's end, which is why
  ``chunk_pause_ms`` must be shorter than ``silence_ms``.
* **At the quietest point before the limit.**  Speech without such a pause is cut when the open
  chunk reaches ``asr.max_chunk_ms``, at the quietest 20 ms frame of the last
  ``QUIET_WINDOW_MS`` and of the chunk's second half (a breath or a stop consonant rather than
  mid-vowel); what follows that frame stays in the open chunk.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kitt_stt.asr.features import FeatureStream
from kitt_stt.audio.vad import FRAME_MS, FRAME_SAMPLES
from kitt_stt.scheduler import DecodeOutcome
from kitt_stt.str_enum import StrEnum

QUIET_WINDOW_MS = 2000  # how far back from the limit the quietest frame is looked for


class CutKind(StrEnum):
    """Why a chunk was cut: a pause (optional work, skipped at a decode cap) or the length limit
    (always cut, so no decode reads more than ``asr.max_chunk_ms``)."""

    PAUSE = "pause"
    LIMIT = "limit"


@dataclass(frozen=True)
class Cut:
    position: int  # sample offset in the segment buffer where the open chunk ends
    kind: CutKind


@dataclass
class ClosedChunk:
    start: int  # sample offsets in the segment buffer
    end: int
    decode: asyncio.Future[DecodeOutcome | None]
    # the chunk decoded again in another language (the segment decided otherwise than the early
    # guess it was decoded in), by language: asked once, shared by the segment's interims and final
    redecodes: dict[str, asyncio.Future[DecodeOutcome | None]] = field(default_factory=dict)

    def decodes(self) -> list[asyncio.Future[DecodeOutcome | None]]:
        """Every decode of this chunk (the final promotes those still queued)."""
        return [self.decode, *self.redecodes.values()]


@dataclass(frozen=True)
class _Frame:
    end: int  # sample offset in the segment buffer just after the frame
    voiced: bool


@dataclass
class ChunkTracker:
    """Where the open chunk starts and which chunks are closed; fed one VAD frame at a time."""

    pause_frames: int  # 0: chunking off
    max_chunk_samples: int
    # how far the VAD's decisions trail the audio (its front end's filter delay): a frame's voiced
    # flag describes the audio that ended this many samples before the frame did
    lag_samples: int = 0
    open_start: int = 0
    closed: list[ClosedChunk] = field(default_factory=list)
    features: FeatureStream | None = None  # the open chunk's incremental front end
    tail_voiced: bool = True  # the open chunk holds speech (the pre-roll's onset counts as speech)
    _pause_run: int = 0
    _recent: deque[_Frame] = field(default_factory=lambda: deque(maxlen=QUIET_WINDOW_MS // FRAME_MS))

    def reached_max(self, buffered_samples: int) -> bool:
        """The open chunk is ``asr.max_chunk_ms`` long: it must be cut, whatever else wants."""
        return buffered_samples - self.open_start >= self.max_chunk_samples

    def boundary_after(self, voiced: bool, audio: np.ndarray) -> Cut | None:
        """Call after appending a frame to the segment's ``audio`` (all of it so far, a view);
        returns where to cut when the open chunk should close."""
        if not self.pause_frames:
            return None
        buffered_samples = audio.shape[0]
        decided_until = max(self.open_start, buffered_samples - self.lag_samples)  # what ``voiced`` is about
        self._recent.append(_Frame(decided_until, voiced))
        if voiced:
            self._pause_run = 0
            self.tail_voiced = True
        else:
            self._pause_run += 1
        if self.reached_max(buffered_samples):  # first: a pause cut may be refused, this one may not
            return Cut(self._quietest_point(audio), CutKind.LIMIT)
        if self.pause_reached and self.tail_voiced:
            return Cut(decided_until, CutKind.PAUSE)
        return None

    @property
    def pause_reached(self) -> bool:
        """The frame just fed made the current pause ``asr.chunk_pause_ms`` long."""
        return bool(self.pause_frames) and self._pause_run == self.pause_frames

    @property
    def tail_needs_decode(self) -> bool:
        """Whether the open chunk says anything the closed ones do not: it holds speech (or
        nothing was closed, so it is all there is)."""
        return self.tail_voiced or not self.closed

    def _quietest_point(self, audio: np.ndarray) -> int:
        """End of the quietest recent frame in the second half of the open chunk (the latest one
        among equals): never so early that the next chunk reaches the limit again at once. Energies
        are computed here, at a length cut, not for every frame. The latest frame always qualifies:
        the open chunk has just reached its limit."""
        earliest = self.open_start + self.max_chunk_samples // 2
        ends = [f.end for f in reversed(self._recent) if f.end >= earliest]
        frames = (audio[end - FRAME_SAMPLES : end].astype(np.float32) for end in ends)
        energies = [float(np.dot(frame, frame)) for frame in frames]
        return ends[energies.index(min(energies))]

    def cut(self, position: int, features: FeatureStream | None) -> tuple[int, int]:
        """Close the open chunk at ``position``; returns its (start, end) sample range."""
        start, self.open_start = self.open_start, position
        self.features = features
        self.tail_voiced = any(f.voiced for f in self._recent if f.end > position)
        return start, position
