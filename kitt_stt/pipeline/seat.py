"""One seat's pipeline: audio -> VAD -> segment -> interim/final decodes -> turn commits.

Everything here runs on the event loop and never blocks: decodes go to the shared
:class:`~kitt_stt.scheduler.InferenceScheduler` and come back as awaited futures.

Ordering guarantees of the protocol hold by construction:

* ``speech_start`` is emitted synchronously when VAD opens the segment, before any decode;
* an interim is emitted only while its segment is still open; the segment is closed
  synchronously when it ends, and its final is emitted after that, so no interim can follow
  its final;
* finals are chained: each waits for the previous segment's final before it is emitted;
* a commit is emitted only after the finals of its segments (see :mod:`.turn`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kitt_stt.asr.engine import AsrRequest
from kitt_stt.audio.ring import SampleRing
from kitt_stt.audio.vad import (
    FRAME_MS,
    FRAME_SAMPLES,
    EndReason,
    SpeechAudio,
    SpeechEnded,
    SpeechStarted,
    VadEvent,
    VadSegmenter,
)
from kitt_stt.config.schema import AppConfig
from kitt_stt.observability.logbuffer import seat_id as seat_context
from kitt_stt.observability.metrics import Metrics
from kitt_stt.observability.trace import Tracer, Track
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.chunks import ChunkTracker, ClosedChunk, Cut, CutKind
from kitt_stt.pipeline.eot import CommitReason, EotPolicy
from kitt_stt.pipeline.final_words import final_words, holds_wake, placed_words, wake_refused
from kitt_stt.pipeline.rate_limit import Throttle
from kitt_stt.pipeline.segment import Segment
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.pipeline.tail import TailSnapshot
from kitt_stt.pipeline.turn import Turn, TurnTracker, join_texts
from kitt_stt.protocol.errors import ErrorCode
from kitt_stt.protocol.frames import ErrorFrame, FinalFrame, InterimFrame, ServerFrame, SpeechStartFrame
from kitt_stt.scheduler import DecodeOutcome, InferenceScheduler, Priority
from kitt_stt.scheduler.inference import TraceTag
from kitt_stt.text import StagedText
from kitt_stt.turnsense.features import WINDOW_SAMPLES
from kitt_stt.turnsense.model import TurnPrediction
from kitt_stt.turnsense.runner import TurnModelRunner

log = logging.getLogger(__name__)

_FLUSH_REASONS = {EndReason.FINALIZE: CommitReason.FINALIZE, EndReason.STOP: CommitReason.STOP}


@dataclass(frozen=True)
class SeatObservers:
    """Where this seat reports: its trace track (tracer may be off) and the service metrics."""

    tracer: Tracer | None
    track: Track
    session_id: str
    metrics: Metrics | None = None

    def ids(self, seat: str, segment_id: int) -> dict[str, Any]:
        return {"session": self.session_id, "seat": seat, "segment": segment_id}


class SeatPipeline:
    def __init__(
        self,
        seat: str,
        config: AppConfig,
        settings: Callable[[], SessionSettings],
        scheduler: InferenceScheduler,
        policy: EotPolicy,
        emit: Callable[[ServerFrame], None],
        owner: Hashable,
        turn_model: TurnModelRunner | None = None,
        observe: SeatObservers | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.seat = seat
        self._config = config
        self._settings = settings
        self._scheduler = scheduler
        self._emit = emit
        self._owner = owner
        self._admission = admission
        self._refusals = Throttle()  # one error a second per seat, not one per refused frame
        self._observe = observe or SeatObservers(None, Track(0, 0), "")
        self._vad = VadSegmenter(config.vad)
        self._turns = TurnTracker(seat, policy, emit, finals_done=lambda: self._final_chain,
                                  max_duration_ms=config.turn.max_duration_ms,
                                  commit_empty=config.turn.commit_empty, eager=lambda: settings().eager)
        self._turn_model = turn_model
        self._turn_audio = SampleRing(WINDOW_SAMPLES) if turn_model is not None else None
        # Predictions not yet run are cancelled when the seat closes: under load the model's queue
        # must not keep working (and holding 8 s of audio each) for sessions that are gone.
        self._predictions: set[asyncio.Future[TurnPrediction]] = set()
        self._carry = np.zeros(0, dtype=np.int16)
        self._segment: Segment | None = None
        self._segment_turn: Turn | None = None
        self._next_segment_id = 1
        self._final_chain: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.last_seq: int | None = None

    @property
    def track(self) -> Track:
        return self._observe.track

    # ----- input -------------------------------------------------------------------------------

    def push_audio(self, samples: np.ndarray) -> None:
        """Accept any whole number of 10 ms blocks; VAD runs on 20 ms frames."""
        if self._carry.size:
            samples = np.concatenate([self._carry, samples])
        whole = samples.shape[0] - samples.shape[0] % FRAME_SAMPLES
        for offset in range(0, whole, FRAME_SAMPLES):
            frame = samples[offset : offset + FRAME_SAMPLES]
            if self._turn_audio is not None:
                self._turn_audio.append(frame)
            self._handle(self._vad.process(frame))
        self._carry = samples[whole:].copy()

    def skip_audio(self, samples: int) -> None:
        """Audio that arrived but was dropped (rate limit): it keeps the seat's clock on the
        client's, and the end-of-turn ring hears it as silence, but no segment contains it."""
        self._vad.skip(samples)
        if self._turn_audio is not None:
            self._turn_audio.append(np.zeros(samples, dtype=np.int16))

    def client_vad(self, event: str) -> None:
        if event == "start":
            self._handle(self._vad.client_start())
        else:
            self._handle(self._vad.force_end(EndReason.CLIENT))

    def flush(self, reason: EndReason) -> asyncio.Task[None] | None:
        """End any open segment and commit the turn as soon as its finals are out."""
        self._handle(self._vad.force_end(reason))
        return self._turns.flush(_FLUSH_REASONS[reason])

    # ----- VAD events --------------------------------------------------------------------------

    def _handle(self, events: list[VadEvent]) -> None:
        for event in events:
            if isinstance(event, SpeechAudio):
                self._on_audio(event.samples, event.voiced)
            elif isinstance(event, SpeechStarted):
                self._on_start(event)
            elif isinstance(event, SpeechEnded):
                self._on_end(event)

    def _on_start(self, event: SpeechStarted) -> None:
        # a continuation after a forced split is the same speech going on, not a new start
        admission = None if event.continued else self._admission
        refusal = admission.open_segment(self.seat) if admission is not None else None
        if refusal is not None:
            self._vad.refuse_start()
            if self._refusals.ready():
                self._emit(ErrorFrame(code=refusal.code.value, message=refusal.message, seat=self.seat))
            return
        settings = self._settings()
        segment = Segment(
            segment_id=self._next_segment_id,
            start_ms=event.audio_ms,
            options=settings.decode_options(),
            interim_enabled=settings.interim,
            chunks=self._new_chunk_tracker(),
            origin_ms=self._vad.audio_ms - event.preroll.shape[0] // 16,
        )
        self._next_segment_id += 1
        segment.buffer.append(event.preroll)
        self._segment = segment
        # the turn keeps the text stage it began with: `text`/`wake` set mid-turn apply from the next turn
        self._segment_turn = self._turns.begin_segment(
            segment.segment_id, event.audio_ms, settings.stage,
            engine_itn=settings.use_itn and self._scheduler.engine.info.kind == "sense_voice")
        segment.options = settings.decode_options(self._segment_turn.language, segment.buffer.view)  # "auto": once
        self._emit(SpeechStartFrame(seat=self.seat, segment_id=segment.segment_id, audio_ms=event.audio_ms))

    def _new_chunk_tracker(self) -> ChunkTracker:
        asr = self._config.asr
        if asr.naive:  # the old behaviour, kept as the benchmark baseline: re-decode everything
            return ChunkTracker(pause_frames=0, max_chunk_samples=1 << 62)
        return ChunkTracker(pause_frames=asr.chunk_pause_ms // FRAME_MS, max_chunk_samples=asr.max_chunk_ms * 16,
                            lag_samples=self._vad.decision_lag_samples,
                            features=self._scheduler.engine.new_feature_stream())

    def _on_audio(self, samples: np.ndarray, voiced: bool = True) -> None:
        segment = self._segment
        if segment is None:
            return
        segment.buffer.append(samples)
        if voiced and segment.pause_prediction is not None:  # speech went on: that guess is stale
            segment.pause_prediction.cancel()
            segment.pause_prediction = None
        cut = segment.chunks.boundary_after(voiced, segment.buffer.view())
        if segment.chunks.pause_reached and not any(not p.done() for p in self._predictions):
            # the end-of-turn model's guess, in case the pause ends the segment; one at a time per
            # seat (the model's one thread serves every session)
            segment.pause_prediction = self._predict_turn()
        if cut is not None and self._chunk_admitted(cut):
            self._close_chunk(segment, cut.position)
        audio_ms = self._vad.audio_ms
        if segment.wants_interim(audio_ms, self._config.interim) and (
                self._admission is None or self._admission.optional_decode()):
            segment.mark_interim_requested(audio_ms)
            self._spawn(self._run_interim(segment, self._segment_turn, TailSnapshot.take(segment, audio_ms)))

    def _chunk_admitted(self, cut: Cut) -> bool:
        """A chunk at a pause is an optimisation: at a decode cap it is skipped (the final decodes
        the longer tail). One that reached ``asr.max_chunk_ms`` is always cut, so no decode is ever
        asked to read more than ``max_chunk_ms`` (Whisper reads at most 30 s)."""
        return cut.kind is CutKind.LIMIT or self._admission is None or self._admission.optional_decode()

    def _on_end(self, event: SpeechEnded) -> None:
        segment, turn = self._segment, self._segment_turn
        if segment is None or turn is None:
            return
        segment.closed = True
        segment.end_ms = event.end_ms
        segment.end_reason = event.reason.value
        segment.ended_at = time.perf_counter()
        self._segment = None
        self._segment_turn = None
        self._scheduler.promote([chunk.decode for chunk in segment.chunks.closed])
        # submitted now, not in the task: the connection's outstanding count must include it
        # before the next frame is handled. A tail without a voiced frame (the pause already
        # closed the last chunk) has nothing to decode: the final is the chunks' text.
        snapshot, decode = TailSnapshot.take(segment, segment.end_ms), None
        if snapshot.request is not None:
            decode = self._scheduler.submit(snapshot.request, Priority.FINAL, self._owner,
                                            trace=self._trace_tag(segment))
        self._final_chain = self._spawn(self._run_final(segment, turn, self._final_chain, snapshot, decode))
        prediction, segment.pause_prediction = segment.pause_prediction, None
        if prediction is None:  # the guess made at the pause saw the same speech, so it stands
            prediction = self._predict_turn()
        if prediction is not None:
            if turn.prediction is not None and turn.prediction is not prediction and not turn.prediction.done():
                turn.prediction.cancel()  # superseded: the new prediction sees the whole turn so far
            prediction.add_done_callback(lambda done: self._observe_prediction(done, segment.segment_id))
            turn.prediction = prediction
        tracer = self._observe.tracer
        if tracer is not None:
            tracer.add("vad.segment", "vad", tracer.to_us(segment.started_at),
                       int((segment.ended_at - segment.started_at) * 1e6), self.track,
                       {**self._observe.ids(self.seat, segment.segment_id), "end_reason": segment.end_reason,
                        "start_ms": segment.start_ms, "end_ms": segment.end_ms})

    def _predict_turn(self) -> asyncio.Future[TurnPrediction] | None:
        """Start the end-of-turn model on the open turn's audio so far (None without a model)."""
        turn = self._segment_turn
        if self._turn_model is None or self._turn_audio is None or turn is None:
            return None
        context_samples = self._config.turn.context_ms * 16
        prediction = self._turn_model.predict(self._turn_audio.since(turn.start_ms * 16 - context_samples))
        prediction.add_done_callback(self._predictions.discard)
        self._predictions.add(prediction)
        return prediction

    def _observe_prediction(self, done: asyncio.Future[TurnPrediction], segment_id: int) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        prediction = done.result()
        if self._observe.metrics is not None:
            self._observe.metrics.turn_model.observe(prediction.total_ms / 1000.0)
        tracer = self._observe.tracer
        if tracer is None:
            return
        args = {**self._observe.ids(self.seat, segment_id), "probability": round(prediction.probability, 4)}
        start = tracer.to_us(prediction.started)
        features_us, model_us = int(prediction.features_ms * 1000), int(prediction.model_ms * 1000)
        tracer.add("turnsense.features", "turnsense", start, features_us, self.track, args)
        tracer.add("turnsense.model", "turnsense", start + features_us, model_us, self.track, args)

    # ----- decodes -----------------------------------------------------------------------------

    def _close_chunk(self, segment: Segment, cut: int) -> None:
        """Decode [open_start, cut) once, in the background; the open chunk starts at ``cut``."""
        chunks = segment.chunks
        request = AsrRequest(segment.buffer.view()[chunks.open_start : cut], segment.options)
        decode = self._scheduler.submit(request, Priority.CHUNK, self._owner, trace=self._trace_tag(segment))
        start, end = chunks.cut(cut, self._scheduler.engine.new_feature_stream())
        chunks.closed.append(ClosedChunk(start, end, decode))

    async def _run_interim(self, segment: Segment, turn: Turn | None, snapshot: TailSnapshot) -> None:
        """The tail as of ``snapshot``, joined with the chunks closed before it (:mod:`.tail`)."""
        tail_text, lang = "", None
        if snapshot.request is not None:  # a tail of pause only adds nothing to the chunks' text
            try:
                outcome = await self._scheduler.submit(snapshot.request, Priority.INTERIM, self._owner,
                                                       coalesce_key=(self._owner, self.seat),
                                                       trace=self._trace_tag(segment))
            except Exception:
                log.exception("interim decode failed (seat %s, segment %d)", self.seat, segment.segment_id,
                              extra={"segment": segment.segment_id})
                return
            if outcome is None or segment.closed:  # superseded, cancelled, or the final owns it now
                return
            tail_text, lang = outcome.result.text, outcome.result.lang
        earlier = await snapshot.chunk_outcomes()
        if earlier is None or segment.closed or turn is None:
            return
        if lang is None and earlier:
            lang = earlier[-1].result.lang
        staged = turn.stage.interim(join_texts([*(chunk.result.text for chunk in earlier), tail_text]), lang,
                                       detect_wake=turn.at_start(segment.segment_id))
        if staged.wake is not None and not holds_wake(segment.options, turn.stage):  # duck the radio early
            self._turns.announce_wake(turn, segment.segment_id, staged.wake, snapshot.audio_ms)
        if segment.show_interim(staged.text, snapshot.audio_ms):  # not the wake phrase alone, nor stale
            self._emit(InterimFrame(seat=self.seat, segment_id=segment.segment_id, text=staged.text,
                                    audio_ms=snapshot.audio_ms))

    async def _run_final(self, segment: Segment, turn: Turn, previous: asyncio.Task[None] | None,
                         snapshot: TailSnapshot, decode: asyncio.Future[DecodeOutcome | None] | None) -> None:
        """Emit the segment's final: the closed chunks' texts and, unless the tail held no speech,
        the tail's decode (``decode`` None: the chunks say everything; the last one's tags count)."""
        text, lang, emotion, event, timing, placed = "", None, None, None, {}, None
        chunks_ready = segment.ended_at
        try:
            earlier = await snapshot.chunk_outcomes()
            chunks_ready = time.perf_counter()
            outcome = await decode if decode is not None else None
        except Exception as exc:
            log.exception("final decode failed (seat %s, segment %d)", self.seat, segment.segment_id,
                          extra={"segment": segment.segment_id})
            self._emit(ErrorFrame(code=ErrorCode.INTERNAL.value, seat=self.seat,
                                  message=f"recognition failed for segment {segment.segment_id}: {exc}"))
        else:
            if earlier is None or (decode is not None and outcome is None):
                return  # connection closing: nobody is waiting for this final
            pieces = [*earlier, outcome] if outcome is not None else earlier  # never empty: see _on_end
            text = join_texts(piece.result.text for piece in pieces)
            if segment.options.words and self._scheduler.engine.info.words:
                placed = placed_words([(piece.result, start) for piece, start in zip(
                    pieces, snapshot.piece_starts(), strict=False)], segment.origin_ms)
            last = pieces[-1].result
            lang, emotion, event = last.lang, last.emotion, last.event
            timing = {"queue_ms": 0.0, "decode_ms": 0.0, "batch": 0, "tail_audio_ms": 0}
            if outcome is not None and snapshot.request is not None:
                timing = {"queue_ms": round(outcome.queue_ms, 2), "decode_ms": round(outcome.decode_ms, 2),
                          "batch": outcome.batch_size, "tail_audio_ms": snapshot.request.samples.shape[0] // 16}
            timing |= {"chunks": len(pieces),
                       "chunk_wait_ms": round(max(0.0, chunks_ready - segment.ended_at) * 1000.0, 2)}
        if previous is not None:
            await asyncio.wait({previous})  # in order; a failure there (logged) must not lose this final
        staged = await self._staged_final(segment, turn, text, lang)
        words = None if placed is None else final_words(placed, staged)
        if words is not None and wake_refused(words, turn.stage):  # heard too unsure to wake
            staged = await self._staged_final(segment, turn, text, lang, wake=False)
            words = final_words(placed or [], staged)
        if staged.wake is not None:
            self._turns.announce_wake(turn, segment.segment_id, staged.wake, segment.end_ms)
        latency_ms = (time.perf_counter() - segment.ended_at) * 1000.0
        timing["audio_ms"] = segment.buffer.duration_ms
        prediction = turn.prediction
        if prediction is not None and prediction.done() and not prediction.cancelled() and not prediction.exception():
            timing["turnsense_ms"] = round(prediction.result().total_ms, 2)
        self._emit(FinalFrame(
            seat=self.seat, segment_id=segment.segment_id, text=staged.text, start_ms=segment.start_ms,
            end_ms=segment.end_ms, lang=lang, emotion=emotion, event=event, server_latency_ms=round(latency_ms, 2),
            lang_probability=segment.options.language_probability(),
            timing=timing, end_reason=segment.end_reason,
            wake=None if staged.wake is None else {"phrase": staged.wake.phrase, "text": staged.wake.heard},
            **({} if words is None else words.frame_fields()),
        ))
        if words is not None and words.confidence is not None:
            turn.confidences[segment.segment_id] = words.confidence
        self._turns.segment_final(turn, segment.segment_id, text, segment.end_ms, segment.ended_at, lang, staged)

    async def _staged_final(self, segment: Segment, turn: Turn, text: str, lang: str | None,
                            wake: bool = True) -> StagedText:
        """The final through the text stage, after the previous final (whether a wake phrase counts
        depends on what the turn said before), ITN in the worker process (a thread would not free
        the loop: the grammars hold the GIL). A fault there sends the text as recognised."""
        try:
            return await turn.stage.final_off_loop(text, lang, turn.engine_itn,
                                                   detect_wake=wake and turn.at_start(segment.segment_id))
        except Exception:
            log.exception("text stage failed on a final (seat %s, segment %d); sending it as recognised",
                          self.seat, segment.segment_id, extra={"segment": segment.segment_id})
            return StagedText(text)

    def _trace_tag(self, segment: Segment) -> TraceTag | None:
        if self._observe.tracer is None:
            return None
        return TraceTag(self.track, self._observe.ids(self.seat, segment.segment_id))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        context = contextvars.copy_context()
        context.run(seat_context.set, self.seat)  # log records of this task name the seat
        # a task copies the context it is created in (create_task(context=) is 3.11+)
        task: asyncio.Task[None] = context.run(asyncio.create_task, coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ----- lifecycle ---------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        open_bytes = self._segment.buffer.nbytes if self._segment is not None else 0
        ring_bytes = self._turn_audio.nbytes if self._turn_audio is not None else 0
        return open_bytes + ring_bytes + self._vad.buffered_bytes + self._carry.nbytes

    def close(self) -> None:
        """Release everything this seat holds; pending decodes are cancelled by the connection."""
        for task in list(self._tasks):
            task.cancel()
        for prediction in list(self._predictions):
            prediction.cancel()
        self._turns.close()
        self._vad.reset()
        if self._turn_audio is not None:
            self._turn_audio.release()
        self._segment = None
        self._segment_turn = None
        self._carry = np.zeros(0, dtype=np.int16)
