"""The text of one segment: its chunk decodes, its interims and its final.

Rules owned here (``docs/architecture.md`` steps 5 and 6):

* a closed chunk is decoded once, in the background, at ``Priority.CHUNK``; a chunk at a pause is
  optional work (skipped at a decode cap), one at ``asr.max_chunk_ms`` never is;
* an interim decodes only the open tail and joins exactly the chunks closed before its tail was
  taken (:mod:`.tail`); it is emitted only while its segment is open, and never older than one sent;
* the final is submitted synchronously when the segment ends (the connection counts it before the
  next frame), joins every chunk and the tail, goes through the whole text stage off the loop, and
  waits for the seat's previous final, so finals leave in segment order;
* a final or interim is in one language: a chunk decoded before its segment's language was decided (in
  the early guess, on less audio) and in another language than the text it joins is decoded again in
  that one (once: the interims and the final share the re-decode); an interim whose re-decode did not
  come back is not sent rather than sent in two languages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from kitt_stt.asr.engine import AsrRequest
from kitt_stt.audio.vad import FRAME_MS
from kitt_stt.config.schema import AppConfig
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.chunks import ChunkTracker, ClosedChunk, Cut, CutKind
from kitt_stt.pipeline.final_words import final_words, holds_wake, placed_words, wake_refused
from kitt_stt.pipeline.observers import SeatObservers
from kitt_stt.pipeline.seat_tasks import SeatTasks
from kitt_stt.pipeline.segment import Segment
from kitt_stt.pipeline.tail import TailSnapshot
from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.pipeline.turn import Turn
from kitt_stt.pipeline.turn_tracker import TurnTracker
from kitt_stt.protocol.errors import ErrorCode
from kitt_stt.protocol.frames import ErrorFrame, FinalFrame, InterimFrame, ServerFrame
from kitt_stt.scheduler import DecodeOutcome, InferenceScheduler, Priority
from kitt_stt.scheduler.jobs import TraceTag
from kitt_stt.text import StagedText

log = logging.getLogger(__name__)


class SegmentDecoder:
    def __init__(self, seat: str, config: AppConfig, scheduler: InferenceScheduler, owner: Hashable,
                 emit: Callable[[ServerFrame], None], turns: TurnTracker, tasks: SeatTasks,
                 observe: SeatObservers, admission: Admission | None) -> None:
        self._seat = seat
        self._config = config
        self._scheduler = scheduler
        self._owner = owner
        self._emit = emit
        self._turns = turns
        self._tasks = tasks
        self._observe = observe
        self._admission = admission
        self._final_chain: asyncio.Task[None] | None = None

    @property
    def final_chain(self) -> asyncio.Task[None] | None:
        """The seat's last final still being assembled (the turn's commit waits for it)."""
        return self._final_chain

    def new_chunks(self, lag_samples: int) -> ChunkTracker:
        asr = self._config.asr
        if asr.naive:  # the old behaviour, kept as the benchmark baseline: re-decode everything
            return ChunkTracker(pause_frames=0, max_chunk_samples=1 << 62)
        return ChunkTracker(pause_frames=asr.chunk_pause_ms // FRAME_MS, max_chunk_samples=asr.max_chunk_ms * 16,
                            lag_samples=lag_samples, features=self._scheduler.engine.new_feature_stream())

    # ----- while the segment is open -----------------------------------------------------------

    def after_audio(self, segment: Segment, turn: Turn | None, cut: Cut | None, audio_ms: int) -> None:
        """A frame was appended: close a chunk where the tracker cut, then ask for an interim if
        the cadence and the decode caps allow one."""
        if cut is not None and self._chunk_admitted(cut):
            self._close_chunk(segment, cut.position)
        if segment.wants_interim(audio_ms, self._config.interim) and (
                self._admission is None or self._admission.optional_decode()):
            segment.mark_interim_requested(audio_ms)
            self._tasks.spawn(self._run_interim(segment, turn, TailSnapshot.take(segment, audio_ms, interim=True)))

    def _chunk_admitted(self, cut: Cut) -> bool:
        """A chunk at a pause is an optimisation: at a decode cap it is skipped (the final decodes
        the longer tail). One that reached ``asr.max_chunk_ms`` is always cut, so no decode is ever
        asked to read more than ``max_chunk_ms`` (Whisper reads at most 30 s)."""
        return cut.kind is CutKind.LIMIT or self._admission is None or self._admission.optional_decode()

    def _close_chunk(self, segment: Segment, cut: int) -> None:
        """Decode [open_start, cut) once, in the background; the open chunk starts at ``cut``."""
        chunks = segment.chunks
        request = AsrRequest(segment.buffer.view()[chunks.open_start : cut], segment.options)
        decode = self._scheduler.submit(request, Priority.CHUNK, self._owner, trace=self._trace_tag(segment))
        start, end = chunks.cut(cut, self._scheduler.engine.new_feature_stream())
        chunks.closed.append(ClosedChunk(start, end, decode))

    async def _run_interim(self, segment: Segment, turn: Turn | None, snapshot: TailSnapshot) -> None:
        """The tail as of ``snapshot``, joined with the chunks closed before it (:mod:`.tail`)."""
        tail: DecodeOutcome | None = None
        if snapshot.request is not None:  # a tail of pause only adds nothing to the chunks' text
            try:
                outcome = await self._scheduler.submit(snapshot.request, Priority.INTERIM, self._owner,
                                                       coalesce_key=(self._owner, self._seat),
                                                       trace=self._trace_tag(segment))
            except Exception:
                log.exception("interim decode failed (seat %s, segment %d)", self._seat, segment.segment_id,
                              extra={"segment": segment.segment_id})
                return
            if outcome is None or segment.closed:  # superseded, cancelled, or the final owns it now
                return
            tail = outcome
        earlier = await snapshot.chunk_outcomes()
        if earlier is None or segment.closed or turn is None:
            return
        pieces = [*earlier, tail] if tail is not None else earlier
        if not pieces:
            return
        pieces = await self._in_one_language(segment, snapshot, pieces, Priority.CHUNK)
        lang = next((piece.result.lang for piece in reversed(pieces) if piece.result.lang is not None), None)
        if segment.closed or self._mixed(segment, pieces):
            return
        staged = turn.stage.interim(join_texts(piece.result.text for piece in pieces), lang,
                                    detect_wake=turn.at_start(segment.segment_id))
        if staged.wake is not None and not holds_wake(segment.options, turn.stage):  # duck the radio early
            self._turns.announce_wake(turn, segment.segment_id, staged.wake, snapshot.audio_ms)
        if segment.show_interim(staged.text, snapshot.audio_ms):  # not the wake phrase alone, nor stale
            self._emit(InterimFrame(seat=self._seat, segment_id=segment.segment_id, text=staged.text,
                                    audio_ms=snapshot.audio_ms))

    # ----- when the segment has ended ----------------------------------------------------------

    def finish(self, segment: Segment, turn: Turn) -> None:
        """The segment is closed: its queued chunks become finals' work, its tail is submitted
        now (not in the task: the connection's outstanding count must include it before the next
        frame is handled), and its final is chained after the seat's previous one. A tail without
        a voiced frame (the pause already closed the last chunk) has nothing to decode: the final
        is the chunks' text."""
        self._scheduler.promote([decode for chunk in segment.chunks.closed for decode in chunk.decodes()])
        snapshot, decode = TailSnapshot.take(segment, segment.end_ms), None
        if snapshot.request is not None:
            decode = self._scheduler.submit(snapshot.request, Priority.FINAL, self._owner,
                                            trace=self._trace_tag(segment))
        self._final_chain = self._tasks.spawn(self._run_final(segment, turn, self._final_chain, snapshot, decode))

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
            log.exception("final decode failed (seat %s, segment %d)", self._seat, segment.segment_id,
                          extra={"segment": segment.segment_id})
            self._emit(ErrorFrame(code=ErrorCode.INTERNAL.value, seat=self._seat,
                                  message=f"recognition failed for segment {segment.segment_id}: {exc}"))
        else:
            if earlier is None or (decode is not None and outcome is None):
                return  # connection closing: nobody is waiting for this final
            pieces = [*earlier, outcome] if outcome is not None else earlier  # never empty: see finish
            pieces = await self._in_one_language(segment, snapshot, pieces, Priority.FINAL)
            text = join_texts(piece.result.text for piece in pieces)
            if segment.options.words:  # on only where the engine times words (session_updates)
                placed = placed_words([(piece.result, start) for piece, start in zip(
                    pieces, snapshot.piece_starts(), strict=False)], segment.origin_ms)
            last = pieces[-1].result
            lang, emotion, event = last.lang, last.emotion, last.event
            timing = self._timing(segment, snapshot, outcome, len(pieces), chunks_ready)
        if previous is not None:
            await asyncio.wait({previous})  # in order; a failure there (logged) must not lose this final
        staged = await self._staged_final(segment, turn, text, lang)
        words = None if placed is None else final_words(placed, staged)
        if words is not None and wake_refused(words, turn.stage):  # heard too unsure to wake
            turn.wake_refused = True
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
            seat=self._seat, segment_id=segment.segment_id, text=staged.text, start_ms=segment.start_ms,
            end_ms=segment.end_ms, lang=lang, emotion=emotion, event=event, server_latency_ms=round(latency_ms, 2),
            lang_probability=segment.options.language_probability(),
            timing=timing, end_reason=segment.end_reason,
            wake=None if staged.wake is None else {"phrase": staged.wake.phrase, "text": staged.wake.heard},
            **({} if words is None else words.frame_fields()),
        ))
        if words is not None and words.confidence is not None:
            turn.confidences[segment.segment_id] = words.confidence
        self._turns.segment_final(turn, segment.segment_id, text, segment.end_ms, segment.ended_at, lang, staged)

    async def _in_one_language(self, segment: Segment, snapshot: TailSnapshot, pieces: list[DecodeOutcome],
                               priority: Priority) -> list[DecodeOutcome]:
        """The pieces of a final or interim, each in the language of the last. A segment's first chunk
        can close before the segment has the audio to decide its language (1.8 s), so it decodes in
        the early guess; when the decision (or the tail's) says otherwise, joining as decoded labelled
        Mandarin text `en` (whisper-base read "Turn on the air" as 生命的天 in zh). Those chunks are
        decoded again, now that the segment's language is known, once per chunk and language (the
        interims and the final share it; the final promotes it to its priority); a decode that fails
        or is cancelled keeps the piece as it was. Only where the segment decided its language and
        the chunk was decoded in another (an engine that reads the language per piece, as SenseVoice
        without an allowed set does, would only decode the same piece the same way again)."""
        stale = self._stale(segment, pieces[:len(snapshot.chunks)], pieces[-1].result.lang)
        if not stale:
            return pieces
        lang = pieces[-1].result.lang or ""
        view = segment.buffer.view()
        for index in stale:
            chunk = snapshot.chunks[index]
            if lang not in chunk.redecodes or _failed(chunk.redecodes[lang]):  # a failed one is asked again
                chunk.redecodes[lang] = self._scheduler.submit(AsrRequest(view[chunk.start : chunk.end],
                                                                          segment.options), priority, self._owner,
                                                               trace=self._trace_tag(segment))
        redecodes = [asyncio.shield(snapshot.chunks[index].redecodes[lang]) for index in stale]
        fresh = list(pieces)
        for index, outcome in zip(stale, await asyncio.gather(*redecodes, return_exceptions=True), strict=True):
            if isinstance(outcome, DecodeOutcome) and outcome.result.lang == lang:
                fresh[index] = outcome
            elif isinstance(outcome, BaseException):
                log.warning("re-decoding chunk %d of segment %d in %s failed: %s", index, segment.segment_id, lang,
                            outcome, extra={"segment": segment.segment_id})
        return fresh

    @staticmethod
    def _stale(segment: Segment, chunks: list[DecodeOutcome], lang: str | None) -> list[int]:
        """The chunks decoded in another language than ``lang``, where the segment decided on ``lang``."""
        language = segment.options.segment_language
        decided = language.decided if language is not None else None
        if decided is None or decided.lang != lang:
            return []
        return [index for index, piece in enumerate(chunks) if piece.result.lang not in (None, lang)]

    @classmethod
    def _mixed(cls, segment: Segment, pieces: list[DecodeOutcome]) -> bool:
        """Pieces still in two languages after ``_in_one_language`` (a re-decode failed)."""
        return bool(cls._stale(segment, pieces[:-1], pieces[-1].result.lang))

    @staticmethod
    def _timing(segment: Segment, snapshot: TailSnapshot, outcome: DecodeOutcome | None, pieces: int,
                chunks_ready: float) -> dict[str, Any]:
        """The final's ``timing``: the tail decode's queue and decode time (zeros when the chunks
        said everything), how many pieces were joined, and how long the chunks kept it waiting."""
        timing: dict[str, Any] = {"queue_ms": 0.0, "decode_ms": 0.0, "batch": 0, "tail_audio_ms": 0}
        if outcome is not None and snapshot.request is not None:
            timing = {"queue_ms": round(outcome.queue_ms, 2), "decode_ms": round(outcome.decode_ms, 2),
                      "batch": outcome.batch_size, "tail_audio_ms": snapshot.request.samples.shape[0] // 16}
        return timing | {"chunks": pieces,
                         "chunk_wait_ms": round(max(0.0, chunks_ready - segment.ended_at) * 1000.0, 2)}

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
                          self._seat, segment.segment_id, extra={"segment": segment.segment_id})
            return StagedText(text)

    def _trace_tag(self, segment: Segment) -> TraceTag | None:
        return self._observe.trace_tag(self._seat, segment.segment_id)


def _failed(decode: asyncio.Future[DecodeOutcome | None]) -> bool:
    """A re-decode that ended without a text: cancelled, raised or refused (None)."""
    return decode.done() and (decode.cancelled() or decode.exception() is not None or decode.result() is None)
