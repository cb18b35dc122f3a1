"""When the end-of-turn model runs for one seat, on which audio, and when a run is dropped.

The seat's last 8 s of audio are kept in a ring (silence for audio the rate limit dropped). The
model is asked for a guess when a pause has closed the segment's last chunk (in case the pause
ends the segment, so the commit need not wait for the model), and at the latest when the segment
ends. Rules owned here: one run at a time per seat (the model's one thread serves every session);
a pause guess is dropped when speech goes on, and a turn's older guess when a newer one sees the
whole turn so far; runs not yet started are cancelled when the seat closes, so under load the
model's queue does not keep working (and holding 8 s of audio each) for sessions that are gone.
"""

from __future__ import annotations

import asyncio

import numpy as np

from kitt_stt.audio.ring import SampleRing
from kitt_stt.pipeline.observers import SeatObservers
from kitt_stt.pipeline.segment import Segment
from kitt_stt.pipeline.turn import Turn
from kitt_stt.turnsense.features import WINDOW_SAMPLES
from kitt_stt.turnsense.model import TurnPrediction
from kitt_stt.turnsense.runner import TurnModelRunner


class TurnPredictor:
    def __init__(self, seat: str, runner: TurnModelRunner | None, context_ms: int, observe: SeatObservers) -> None:
        self._seat = seat
        self._runner = runner
        self._context_samples = context_ms * 16
        self._observe = observe
        self._ring = SampleRing(WINDOW_SAMPLES) if runner is not None else None
        self._running: set[asyncio.Future[TurnPrediction]] = set()

    def hear(self, frame: np.ndarray) -> None:
        if self._ring is not None:
            self._ring.append(frame)

    def hear_silence(self, samples: int) -> None:
        if self._ring is not None:
            self._ring.append(np.zeros(samples, dtype=np.int16))

    def speech_went_on(self, segment: Segment) -> None:
        """A voiced frame after the pause: the guess made at the pause is stale."""
        if segment.pause_prediction is not None:
            segment.pause_prediction.cancel()
            segment.pause_prediction = None

    def at_pause(self, segment: Segment, turn: Turn | None) -> None:
        """The pause has closed the last chunk: guess now, unless a run of this seat is under way."""
        if not any(not running.done() for running in self._running):
            segment.pause_prediction = self._predict(turn)

    def at_segment_end(self, segment: Segment, turn: Turn) -> None:
        """The turn's prediction: the pause's guess if no speech came after it (it saw the same
        speech, so it stands), otherwise a new run that sees the whole turn so far."""
        prediction, segment.pause_prediction = segment.pause_prediction, None
        if prediction is None:
            prediction = self._predict(turn)
        if prediction is None:
            return
        if turn.prediction is not None and turn.prediction is not prediction and not turn.prediction.done():
            turn.prediction.cancel()  # superseded: the new prediction sees the whole turn so far
        prediction.add_done_callback(lambda done: self._report(done, segment.segment_id))
        turn.prediction = prediction

    def _predict(self, turn: Turn | None) -> asyncio.Future[TurnPrediction] | None:
        """Start the model on the open turn's audio so far, with ``turn.context_ms`` before it
        (None without a model or a turn)."""
        if self._runner is None or self._ring is None or turn is None:
            return None
        prediction = self._runner.predict(self._ring.since(turn.start_ms * 16 - self._context_samples))
        prediction.add_done_callback(self._running.discard)
        self._running.add(prediction)
        return prediction

    def _report(self, done: asyncio.Future[TurnPrediction], segment_id: int) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        prediction = done.result()
        if self._observe.metrics is not None:
            self._observe.metrics.turn_model.observe(prediction.total_ms / 1000.0)
        tracer = self._observe.tracer
        if tracer is None:
            return
        args = {**self._observe.ids(self._seat, segment_id), "probability": round(prediction.probability, 4)}
        start = tracer.to_us(prediction.started)
        features_us, model_us = int(prediction.features_ms * 1000), int(prediction.model_ms * 1000)
        tracer.add("turnsense.features", "turnsense", start, features_us, self._observe.track, args)
        tracer.add("turnsense.model", "turnsense", start + features_us, model_us, self._observe.track, args)

    @property
    def nbytes(self) -> int:
        return self._ring.nbytes if self._ring is not None else 0

    def close(self) -> None:
        for prediction in list(self._running):
            prediction.cancel()
        if self._ring is not None:
            self._ring.release()
