"""Admission of decode work: what a connection may add to the shared inference queue.

Audio has its rate budget; this bounds the *decodes* a client can cause, which audio alone does
not: a client that opens and closes segments as fast as it can (``vad start`` / one frame /
``vad stop``) would otherwise queue a full final decode per cycle. Three limits, checked when a
seat is about to open a segment (every segment costs one final, and its chunks):

* the connection's outstanding decodes (``server.max_pending_decodes``);
* the whole queue (``asr.max_queue``), so the service as a whole stays bounded;
* the seat's segment-start budget (``server.segment_starts``).

Optional work is not requested while either cap is reached: interims, and chunk decodes at pauses
(the final then decodes the longer tail). Finals of segments already open are never refused
(every ``speech_start`` gets its final), nor are chunks that reached ``asr.max_chunk_ms``.
"""

from __future__ import annotations

from collections.abc import Hashable

from kitt_stt.config.schema import AppConfig
from kitt_stt.pipeline.rate_limit import SegmentStartLimiter
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.scheduler import InferenceScheduler


class Admission:
    def __init__(self, config: AppConfig, scheduler: InferenceScheduler, owner: Hashable) -> None:
        self._server = config.server
        self._max_queue = config.asr.max_queue
        self._scheduler = scheduler
        self._owner = owner
        self._starts: dict[str, SegmentStartLimiter] = {}

    def optional_decode(self) -> bool:
        """Whether work nobody strictly needs (an interim, a chunk at a pause) may be queued now."""
        return self._at_cap() is None

    def open_segment(self, seat: str) -> ProtocolError | None:
        """None when ``seat`` may open a segment now (one start is spent), else the refusal."""
        cap = self._at_cap()
        if cap is not None:
            return ProtocolError(ErrorCode.OVERLOADED, f"{cap}; segment not opened, its audio is not transcribed",
                                 seat)
        limiter = self._starts.get(seat)
        if limiter is None:
            limiter = self._starts[seat] = SegmentStartLimiter(self._server.segment_starts)
        if not limiter.allow(1.0):
            budget = self._server.segment_starts
            return ProtocolError(ErrorCode.RATE_LIMITED,
                                 f"segments are opening faster than {budget.per_s:g}/s (burst {budget.burst}); "
                                 "segment not opened, its audio is not transcribed", seat)
        return None

    def _at_cap(self) -> str | None:
        """Which decode cap is reached (the connection's or the server's), if any."""
        outstanding = self._scheduler.outstanding(self._owner)
        if outstanding >= self._server.max_pending_decodes:
            return f"this connection has {outstanding} decodes outstanding (limit {self._server.max_pending_decodes})"
        depth = self._scheduler.queue_depth
        if depth >= self._max_queue:
            return f"the server's decode queue is full ({depth})"
        return None
