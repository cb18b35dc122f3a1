"""A turn's second look: its audio from the seat's ring, pause included, and the end-of-turn
model run again on it. Handed to the policy through ``TurnContext.look``; predictions go into
the seat's set, so closing the seat cancels the ones not yet run."""

from __future__ import annotations

import asyncio

import numpy as np

from kitt_stt.audio.ring import SampleRing
from kitt_stt.turnsense.model import TurnPrediction
from kitt_stt.turnsense.runner import TurnModelRunner


class RingLook:
    def __init__(self, ring: SampleRing, runner: TurnModelRunner, start_sample: int,
                 predictions: set[asyncio.Future[TurnPrediction]]) -> None:
        self._ring = ring
        self._runner = runner
        self._start = start_sample
        self._predictions = predictions

    @classmethod
    def of(cls, ring: SampleRing | None, runner: TurnModelRunner | None, start_ms: int, context_ms: int,
           predictions: set[asyncio.Future[TurnPrediction]]) -> RingLook | None:
        """The look for a turn starting at ``start_ms``; None when the seat runs no model."""
        if ring is None or runner is None:
            return None
        return cls(ring, runner, (start_ms - context_ms) * 16, predictions)

    def audio(self) -> np.ndarray:
        return self._ring.since(self._start)

    def predict(self) -> asyncio.Future[TurnPrediction] | None:
        prediction = self._runner.predict(self.audio())
        prediction.add_done_callback(self._predictions.discard)
        self._predictions.add(prediction)
        return prediction
