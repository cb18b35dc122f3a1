"""Where a seat reports what it does: its trace track (the tracer may be off) and the metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kitt_stt.observability.metrics import Metrics
from kitt_stt.observability.trace import Tracer, Track
from kitt_stt.pipeline.segment import Segment
from kitt_stt.scheduler.jobs import TraceTag


@dataclass(frozen=True)
class SeatObservers:
    """One seat's reporting targets; ``ids`` names a segment the same way in every span."""

    tracer: Tracer | None
    track: Track
    session_id: str
    metrics: Metrics | None = None

    def ids(self, seat: str, segment_id: int) -> dict[str, Any]:
        return {"session": self.session_id, "seat": seat, "segment": segment_id}

    def trace_tag(self, seat: str, segment_id: int) -> TraceTag | None:
        """The tag a decode carries so the scheduler's spans land on this seat's track."""
        if self.tracer is None:
            return None
        return TraceTag(self.track, self.ids(seat, segment_id))

    def segment_span(self, seat: str, segment: Segment) -> None:
        """The ended segment as a ``vad.segment`` span on the seat's track, when tracing is on."""
        if self.tracer is None:
            return
        self.tracer.add("vad.segment", "vad", self.tracer.to_us(segment.started_at),
                        int((segment.ended_at - segment.started_at) * 1e6), self.track,
                        {**self.ids(seat, segment.segment_id), "end_reason": segment.end_reason,
                         "start_ms": segment.start_ms, "end_ms": segment.end_ms})
