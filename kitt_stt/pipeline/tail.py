"""A segment's audio at one moment, split as its text will be joined: the closed chunks, then the
open tail after them.

The rule this unit owns: a decode of the open tail is joined with exactly the chunks that were
closed when the tail was taken, never with the chunks closed since. A chunk closed while the tail
decodes covers the start of that tail's own audio, so joining it as well writes the same words
twice, the chunk's copy in front (``打开车门打开车门`` for the final ``打开车门``). The snapshot is
taken synchronously, when the decode is asked for, so it is one consistent cut of the segment.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from kitt_stt.asr.engine import AsrRequest
from kitt_stt.pipeline.chunks import ClosedChunk
from kitt_stt.pipeline.segment import Segment
from kitt_stt.scheduler import DecodeOutcome


@dataclass(frozen=True)
class TailSnapshot:
    """The chunks closed so far and the open tail's decode request (None when the tail holds no
    speech: the chunks say everything), as of ``audio_ms``."""

    audio_ms: int
    chunks: tuple[ClosedChunk, ...]
    request: AsrRequest | None
    tail_start: int = 0  # the tail's first sample in the segment buffer (where its words are placed)

    @classmethod
    def take(cls, segment: Segment, audio_ms: int, interim: bool = False) -> TailSnapshot:
        """``interim``: the final replaces this decode's text, so it is not asked for word timings
        (a softmax over the vocabulary per token, for words nobody reads)."""
        chunks = segment.chunks
        request = None
        if chunks.tail_needs_decode:
            options = replace(segment.options, words=False) if interim else segment.options
            request = AsrRequest(segment.buffer.view()[chunks.open_start :], options, chunks.features)
        return cls(audio_ms, tuple(chunks.closed), request, chunks.open_start)

    async def chunk_outcomes(self) -> list[DecodeOutcome] | None:
        """These chunks' decodes (awaiting any still running); None if one was cancelled. Shielded:
        the final and every interim of the segment await the same decodes."""
        outcomes = []
        for chunk in self.chunks:
            outcome = await asyncio.shield(chunk.decode)
            if outcome is None:
                return None
            outcomes.append(outcome)
        return outcomes

    def piece_starts(self) -> list[int]:
        """Where each piece of a final starts in the segment buffer: the chunks', then the tail's."""
        return [chunk.start for chunk in self.chunks] + [self.tail_start]
