"""The seats of one connection: created on first use (at most ``server.max_seats``), each with
its own pipeline, trace track and audio rate budget; audio frames are checked here (length,
``seq``, rate) before they reach a seat.

Audio over the seat's rate budget is dropped with one ``rate_limited`` error now and then, and
its length is still told to the seat, so the seat's clock stays on the client's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator

import numpy as np

from kitt_stt.observability.metrics import Metrics
from kitt_stt.observability.trace import Tracer, Track
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.arbitration import Arbiter, Dropped
from kitt_stt.pipeline.eot import EotPolicy
from kitt_stt.pipeline.observers import SeatObservers
from kitt_stt.pipeline.rate_limit import AudioRateLimiter
from kitt_stt.pipeline.seat import SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import AudioFrame, BleedFrame, ErrorFrame, ServerFrame
from kitt_stt.quote import quoted
from kitt_stt.server.audio_checks import checked_pcm_bytes
from kitt_stt.server.state import ServiceState
from kitt_stt.turn.policy_factory import build_policy


class Seats:
    def __init__(self, state: ServiceState, session_id: str, pid: int, owner: Hashable,
                 settings: Callable[[], SessionSettings], emit: Callable[[ServerFrame], None],
                 admission: Admission) -> None:
        self._state = state
        self._config = state.config
        self._session_id = session_id
        self._pid = pid
        self._owner = owner
        self._settings = settings
        self._emit = emit
        self._admission = admission
        self._tracer: Tracer | None = state.tracer
        self._metrics: Metrics = state.metrics
        self._pipelines: dict[str, SeatPipeline] = {}
        self._limiters: dict[str, AudioRateLimiter] = {}
        self._arbiter = Arbiter(self._config.vad, self._on_arbitration, enabled=lambda: self._settings().arbitration)

    def __iter__(self) -> Iterator[SeatPipeline]:
        return iter(list(self._pipelines.values()))

    def __len__(self) -> int:
        return len(self._pipelines)

    def find(self, name: str | None) -> SeatPipeline | None:
        return self._pipelines.get(name) if name is not None else None

    def get(self, name: str) -> SeatPipeline:
        """The seat called ``name``, created on first use; ``too_many_seats`` past the limit."""
        seat = self._pipelines.get(name)
        if seat is not None:
            return seat
        limit = self._config.server.max_seats
        if len(self._pipelines) >= limit:
            raise ProtocolError(ErrorCode.TOO_MANY_SEATS,
                                f"this connection already has {limit} seats; seat {quoted(name)} refused", name)
        if self._state.seats_full:
            # a connection holding no seat yet is told to go elsewhere (fatal: close 1013); one that holds
            # seats keeps them, only this one is refused
            cap = self._config.server.max_server_seats
            raise ProtocolError(ErrorCode.OVERLOADED, f"the server is at its limit of {cap} seats "
                                f"(server.max_server_seats); seat {quoted(name)} refused", name,
                                fatal=not self._pipelines)
        track = Track(self._pid, len(self._pipelines) + 1)
        if self._tracer:
            self._tracer.name_track(track, f"seat {name}")
        seat = SeatPipeline(
            seat=name, config=self._config, settings=self._settings,
            scheduler=self._state.scheduler, policy=self._policy(), emit=self._emit, owner=self._owner,
            turn_model=self._state.turn_model,
            observe=SeatObservers(self._tracer, track, self._session_id, self._metrics),
            admission=self._admission, vad_batch=self._state.vad_batch, gate=self._arbiter.gate(name),
        )
        self._pipelines[name] = seat
        self._limiters[name] = AudioRateLimiter(self._config.server.rate_limit)
        self._state.seats_changed()
        return seat

    def on_audio(self, frame: AudioFrame) -> None:
        """Check the frame (length, ``seq``, the seat's rate budget) and hand its samples on."""
        size = checked_pcm_bytes(frame, self._config.server.max_frame_ms)
        seat = self.get(frame.seat)
        if frame.seq is not None:
            if seat.last_seq is not None and frame.seq <= seat.last_seq:
                raise ProtocolError(ErrorCode.BAD_FIELD,
                                    f"seq {frame.seq} is not greater than the previous {seat.last_seq}; "
                                    "frame dropped as a duplicate", frame.seat)
            seat.last_seq = frame.seq
        if size == 0:
            return
        limiter = self._limiters[frame.seat]
        if not limiter.allow(size / 32.0):
            if limiter.should_complain():
                self._emit_error(ProtocolError(ErrorCode.RATE_LIMITED,
                                               "audio is arriving faster than the allowed rate; frames are being "
                                               "dropped", frame.seat))
            seat.skip_audio(size // 2)
            return
        self._metrics.audio_seconds.inc(size / 32000.0)
        seat.push_audio(np.frombuffer(frame.pcm, dtype="<i2"))

    def _on_arbitration(self, dropped: Dropped | None) -> None:
        """Count each verdict; tell a session that asked which segment was dropped, and why."""
        self._metrics.arbitration.labels("kept" if dropped is None else "dropped").inc()
        if dropped is None or not self._settings().bleed:
            return
        comparison = dropped.comparison
        self._emit(BleedFrame(seat=dropped.seat, source=dropped.source, start_ms=dropped.start_ms,
                              audio_ms=dropped.decided_ms, correlation=round(comparison.correlation, 4),
                              level_db=round(-comparison.level_db, 2), delay_ms=round(comparison.delay_ms, 2)))

    def _emit_error(self, error: ProtocolError) -> None:
        self._emit(ErrorFrame(code=error.code.value, message=error.message, fatal=error.fatal, seat=error.seat))

    def _policy(self) -> EotPolicy:
        return build_policy(self._config, self._state.turn_model is not None, self._state.text_model)

    def close(self) -> None:
        for seat in self._pipelines.values():
            seat.close()
        self._pipelines.clear()
        self._limiters.clear()
        self._state.seats_changed()
