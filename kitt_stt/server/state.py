"""Process-wide service state: config, engine, scheduler, live connections, readiness."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from kitt_stt.asr.engine import AsrEngine, DecodeOptions
from kitt_stt.audio.silero_batch import SileroBatcher
from kitt_stt.config.schema import AppConfig
from kitt_stt.hotwords import parse_hotwords
from kitt_stt.observability.logbuffer import RecentLogBuffer
from kitt_stt.observability.metrics import Metrics
from kitt_stt.observability.trace import Tracer
from kitt_stt.pipeline.settings import auto_languages
from kitt_stt.scheduler import InferenceScheduler
from kitt_stt.server.board import WorkerBoard
from kitt_stt.text import load as load_text_stage
from kitt_stt.text import wake_hotwords
from kitt_stt.turn.text_model import TurnTextModel
from kitt_stt.turnsense.runner import TurnModelRunner

log = logging.getLogger(__name__)


class LiveSession(Protocol):
    """What the service needs of an open session (a :class:`~kitt_stt.server.connection.Connection`).
    A protocol rather than the class, so the state does not import the connection that imports it."""

    async def shutdown(self) -> None: ...

    @property
    def buffered_bytes(self) -> int: ...

    @property
    def seat_count(self) -> int: ...


@dataclass
class ServiceState:
    config: AppConfig
    engine: AsrEngine
    scheduler: InferenceScheduler
    turn_model: TurnModelRunner | None = None
    text_model: TurnTextModel | None = None  # the end-of-turn text view every seat's policy shares
    vad_batch: SileroBatcher | None = None  # Silero's batch thread (vad.batch), shared by every seat
    metrics: Metrics = field(default_factory=Metrics)
    tracer: Tracer | None = None
    log_buffer: RecentLogBuffer | None = None
    connections: set[LiveSession] = field(default_factory=set)
    connections_per_ip: Counter[str] = field(default_factory=Counter)
    ready: bool = False
    draining: bool = False
    load_error: str | None = None
    warm_up_ms: float = 0.0
    freeze_gc_when_ready: bool = False  # gc.freeze() after the warm-up (server/app.py says why)
    # this worker's row on the board all workers share (server.workers; a board of one row otherwise)
    board: WorkerBoard = field(default_factory=lambda: WorkerBoard(1))
    worker: int = 0
    _drain: asyncio.Task[None] | None = None

    @property
    def failure(self) -> str | None:
        """Why this process cannot serve and should be restarted: a dead decode worker, a failed
        engine build or a failed VAD batch run."""
        vad_failure = self.vad_batch.failure if self.vad_batch is not None else None
        return self.scheduler.failure or self.load_error or vad_failure

    @property
    def serving(self) -> bool:
        """Ready, and nothing has failed (a dead decode worker means decodes would hang; a failed VAD
        batch thread would answer every frame with silence)."""
        return self.ready and self.failure is None

    @property
    def seats_full(self) -> bool:
        """All workers together hold ``server.max_server_seats`` seats: open no more. (Each worker
        reads the others' counts as last published, so they may overshoot by one seat each at most.)"""
        cap = self.config.server.max_server_seats
        return cap is not None and self.board.total_seats() >= cap

    def seats_changed(self) -> None:
        """A seat opened or closed: publish this worker's count before the next admission reads it."""
        self.board.set_seats(self.worker, self.seat_count)

    def publish(self) -> None:
        """This worker's heartbeat and state, for the other workers and the liveness listener."""
        self.board.publish(self.worker, seats=self.seat_count, serving=self.serving, failed=self.failure is not None)

    def warm_up(self) -> None:
        """Blocking: one decode so that the first client does not pay for lazy initialisation."""
        started = time.perf_counter()
        asr = self.config.asr
        hotwords = wake_hotwords(self.config.wake, parse_hotwords(asr.hotwords))
        if hotwords and self.engine.info.hotwords:
            self.engine.prepare_hotwords(hotwords)  # the sessions' default list, ready before the first
        self.engine.warm_up(DecodeOptions(language=asr.language, use_itn=asr.use_itn, hotwords=hotwords,
                                          languages=auto_languages(asr.auto_languages, self.engine.info.languages)))
        if self.turn_model is not None:
            self.turn_model.warm_up()
        load_text_stage(itn_worker=True)  # pinyin, OpenCC; the ITN worker process and its grammars
        self.warm_up_ms = (time.perf_counter() - started) * 1000.0
        self.metrics.warm_up.set(self.warm_up_ms / 1000.0)
        log.info("engine %s warmed up in %.0f ms", self.engine.info.name, self.warm_up_ms)

    @property
    def buffered_bytes(self) -> int:
        return sum(connection.buffered_bytes for connection in self.connections)

    @property
    def seat_count(self) -> int:
        return sum(connection.seat_count for connection in self.connections)

    async def drain(self, timeout_s: float) -> None:
        """Refuse new sessions, flush every open one (finals + commits, reason ``stop``), close them.

        One drain per process: the signal handler starts it and the app's shutdown hook awaits
        the same one (a second drain would flush sessions the first is already closing)."""
        if self._drain is None:
            self.draining = True
            self.ready = False
            self._drain = asyncio.create_task(self._drain_sessions(timeout_s))
        await asyncio.shield(self._drain)

    async def _drain_sessions(self, timeout_s: float) -> None:
        sessions = list(self.connections)
        if not sessions:
            return
        log.info("draining %d session(s)", len(sessions))
        tasks = {asyncio.create_task(session.shutdown()): session for session in sessions}
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("%d session(s) did not flush within %.1f s", len(pending), timeout_s)
        for task in done:  # a failed drain of one session must leave a trace, not vanish with its task
            if not task.cancelled() and (failure := task.exception()) is not None:
                log.error("session %s: drain failed", getattr(tasks[task], "session_id", "?"), exc_info=failure)
