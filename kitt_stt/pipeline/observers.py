"""Where a seat reports what it does: its trace track (the tracer may be off) and the metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kitt_stt.observability.metrics import Metrics
from kitt_stt.observability.trace import Tracer, Track
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
