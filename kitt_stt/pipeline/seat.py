"""One seat's pipeline: thin wiring from its audio and VAD events to the rooms that act on them.

A frame's walk (``docs/architecture.md``): :meth:`SeatPipeline.push_audio` cuts 20 ms frames for
the VAD (:mod:`.vad_feed`: on the loop or Silero's batch thread, in order with client calls); its
events open a :class:`.Segment` (and join it to a turn, :mod:`.turn_tracker`), feed the
:class:`.SegmentDecoder` (chunks, interims, the final) and tell the :class:`.TurnPredictor` when the
end-of-turn model should run. Everything here runs on the event loop and never blocks.

Ordering guarantees of the protocol hold by construction:

* ``speech_start`` is emitted synchronously when VAD opens the segment, before any decode;
* an interim is emitted only while its segment is open; the segment closes synchronously when it
  ends and its final comes after that, so no interim can follow its final;
* finals are chained: each waits for the previous segment's final before it is emitted;
* a commit is emitted only after the finals of its segments (see :mod:`.turn_tracker`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

import numpy as np

from kitt_stt.audio.silero_batch import SileroBatcher
from kitt_stt.audio.vad import FRAME_SAMPLES, EndReason, SpeechAudio, SpeechEnded, SpeechStarted, VadEvent
from kitt_stt.config.schema import AppConfig
from kitt_stt.observability.trace import Track
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.arbitration import SeatGate
from kitt_stt.pipeline.eot import CommitReason, EotPolicy
from kitt_stt.pipeline.observers import SeatObservers
from kitt_stt.pipeline.rate_limit import Throttle
from kitt_stt.pipeline.seat_tasks import SeatTasks
from kitt_stt.pipeline.segment import Segment
from kitt_stt.pipeline.segment_decoder import SegmentDecoder
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.pipeline.turn import Turn
from kitt_stt.pipeline.turn_predictor import TurnPredictor
from kitt_stt.pipeline.turn_tracker import TurnTracker
from kitt_stt.pipeline.vad_feed import VadFeed
from kitt_stt.protocol.frames import ErrorFrame, ServerFrame, SpeechStartFrame
from kitt_stt.scheduler import InferenceScheduler
from kitt_stt.turnsense.runner import TurnModelRunner

_FLUSH_REASONS = {EndReason.FINALIZE: CommitReason.FINALIZE, EndReason.STOP: CommitReason.STOP}


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
        vad_batch: SileroBatcher | None = None,
        gate: SeatGate | None = None,
    ) -> None:
        self.seat = seat
        self._settings = settings
        self._engine_kind = scheduler.engine.info.kind
        self._emit = emit
        self._admission = admission
        self._refusals = Throttle()  # one error a second per seat, not one per refused frame
        self._observe = observe or SeatObservers(None, Track(0, 0), "")
        self._feed = VadFeed(config.vad, self._on_frame, vad_batch)
        self._vad = self._feed.segmenter
        self._gate = gate or SeatGate(seat)  # seat arbitration holds or drops its segments (arbitration.py)
        self._clock_ms = 0  # the audio clock of the event being handled (a held event's, when released)
        self._tasks = SeatTasks(seat)
        self._turns = TurnTracker(seat, policy, emit, finals_done=lambda: self._decoder.final_chain,
                                  max_duration_ms=config.turn.max_duration_ms, fallback_wait_ms=config.turn.wait_ms,
                                  commit_empty=config.turn.commit_empty, eager=lambda: settings().eager,
                                  turn_ends=lambda: settings().turn_ends,
                                  look_for=lambda turn: self._predictor.look(turn))
        self._decoder = SegmentDecoder(seat, config, scheduler, owner, emit, self._turns, self._tasks,
                                       self._observe, admission)
        self._predictor = TurnPredictor(seat, turn_model, config.turn.context_ms, self._observe)
        self._carry = np.zeros(0, dtype=np.int16)
        self._segment: Segment | None = None
        self._segment_turn: Turn | None = None
        self._next_segment_id = 1
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
            self._feed.frame(samples[offset : offset + FRAME_SAMPLES])
        self._carry = samples[whole:].copy()

    def _on_frame(self, frame: np.ndarray, events: list[VadEvent]) -> None:
        self._predictor.hear(frame)
        self._gate.hear(frame)  # on the VAD's clock: the gate admits its events at the frame they came at
        self._handle(events)

    def skip_audio(self, samples: int) -> None:
        """Audio that arrived but was dropped (rate limit): it keeps the seat's clock on the
        client's, and the end-of-turn ring hears it as silence, but no segment contains it."""
        self._feed.after(lambda: self._skip_now(samples))

    def _skip_now(self, samples: int) -> None:
        self._vad.skip(samples)
        self._gate.skip(samples)
        self._predictor.hear_silence(samples)

    def client_vad(self, event: str) -> None:
        act = self._vad.client_start if event == "start" else lambda: self._vad.force_end(EndReason.CLIENT)
        self._feed.after(lambda: self._handle(act()))

    def flush(self, reason: EndReason) -> asyncio.Task[None] | None:
        """End any open segment (after the frames handed over) and commit the turn once its finals are out."""
        return self._feed.task_after(lambda: self._flush_now(reason))

    def _flush_now(self, reason: EndReason) -> asyncio.Task[None] | None:
        self._handle(self._vad.force_end(reason))
        return self._turns.flush(_FLUSH_REASONS[reason])

    # ----- VAD events --------------------------------------------------------------------------

    def _handle(self, events: list[VadEvent]) -> None:
        for event, clock_ms in self._gate.admit(events, self._vad.audio_ms):
            self._clock_ms = clock_ms
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
        segment = Segment(segment_id=self._next_segment_id, start_ms=event.audio_ms,
                          options=settings.decode_options(), interim_enabled=settings.interim,
                          chunks=self._decoder.new_chunks(self._vad.decision_lag_samples),
                          origin_ms=self._clock_ms - event.preroll.shape[0] // 16)
        self._next_segment_id += 1
        segment.buffer.append(event.preroll)
        self._segment = segment
        # the turn keeps the text stage it began with: `text`/`wake` set mid-turn apply from the next turn
        self._segment_turn = self._turns.begin_segment(
            segment.segment_id, event.audio_ms, settings.stage,
            engine_itn=settings.use_itn and self._engine_kind == "sense_voice")
        segment.options = settings.decode_options(self._segment_turn.language, segment.buffer.view)  # "auto": once
        self._emit(SpeechStartFrame(seat=self.seat, segment_id=segment.segment_id, audio_ms=event.audio_ms))

    def _on_audio(self, samples: np.ndarray, voiced: bool = True) -> None:
        segment = self._segment
        if segment is None:
            return
        segment.buffer.append(samples)
        if voiced:
            self._predictor.speech_went_on(segment)
        cut = segment.chunks.boundary_after(voiced, segment.buffer.view())
        if segment.chunks.pause_reached:  # in case the pause ends the segment
            self._predictor.at_pause(segment, self._segment_turn)
        self._decoder.after_audio(segment, self._segment_turn, cut, self._clock_ms)

    def _on_end(self, event: SpeechEnded) -> None:
        segment, turn = self._segment, self._segment_turn
        if segment is None or turn is None:
            return
        segment.closed = True
        segment.end_ms = event.end_ms
        segment.end_reason = event.reason.value
        segment.ended_at = time.perf_counter()
        self._segment = self._segment_turn = None
        self._decoder.finish(segment, turn)
        self._predictor.at_segment_end(segment, turn)
        self._observe.segment_span(self.seat, segment)

    # ----- lifecycle ---------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        open_bytes = self._segment.buffer.nbytes if self._segment is not None else 0
        return open_bytes + self._predictor.nbytes + self._feed.nbytes + self._carry.nbytes + self._gate.nbytes

    def close(self) -> None:
        """Release everything this seat holds; pending decodes are cancelled by the connection."""
        self._tasks.cancel_all()
        self._predictor.close()
        self._turns.close()
        self._feed.close()
        self._gate.reset()
        self._segment = self._segment_turn = None
        self._carry = np.zeros(0, dtype=np.int16)
