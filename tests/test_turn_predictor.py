"""When the end-of-turn model runs for a seat (``pipeline/turn_predictor.py``), driven by a fake
runner so each rule is seen alone."""

from __future__ import annotations

import asyncio

import numpy as np

from kitt_stt.asr.engine import DecodeOptions
from kitt_stt.observability.trace import Track
from kitt_stt.pipeline.observers import SeatObservers
from kitt_stt.pipeline.segment import Segment
from kitt_stt.pipeline.turn import Turn
from kitt_stt.pipeline.turn_predictor import TurnPredictor
from kitt_stt.turnsense.model import TurnPrediction


class CountingRunner:
    """Answers every prediction after ``delay_s`` with p 0.5, counting the runs asked for."""

    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        self.heard: list[int] = []

    def predict(self, samples: np.ndarray) -> asyncio.Future[TurnPrediction]:
        self.heard.append(samples.shape[0])
        future: asyncio.Future[TurnPrediction] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(
            self.delay_s, lambda: future.done() or future.set_result(TurnPrediction(0.5, 1.0, 1.0)))
        return future


def predictor(runner: CountingRunner) -> TurnPredictor:
    seat = TurnPredictor("driver", runner, 0, SeatObservers(None, Track(0, 0), ""))  # type: ignore[arg-type]
    seat.hear(np.ones(16000, dtype=np.int16))
    return seat


async def test_a_segment_that_ended_without_a_pause_guess_gets_a_prediction_of_its_own() -> None:
    """A client ``vad stop`` (or a length cut) ends a segment with no pause before it: the turn
    still gets the model's answer. (Before the seat split, ``_predict_turn`` read the seat's turn
    after it had been cleared for the ending segment, so no run started here.)"""
    runner = CountingRunner()
    seat = predictor(runner)
    segment, turn = Segment(1, 0, DecodeOptions(), False), Turn(start_ms=0)
    seat.at_segment_end(segment, turn)
    assert turn.prediction is not None and runner.heard == [16000]
    assert (await turn.prediction).probability == 0.5
    seat.close()


async def test_the_pause_guess_stands_at_the_end_and_one_run_at_a_time() -> None:
    runner = CountingRunner()
    seat = predictor(runner)
    segment, turn = Segment(1, 0, DecodeOptions(), False), Turn(start_ms=0)
    seat.at_pause(segment, turn)
    guess = segment.pause_prediction
    seat.at_pause(Segment(2, 0, DecodeOptions(), False), turn)  # still running: no second run
    assert guess is not None and len(runner.heard) == 1
    seat.at_segment_end(segment, turn)
    assert turn.prediction is guess and len(runner.heard) == 1  # it heard the same speech
    seat.close()


async def test_speech_going_on_cancels_the_pause_guess() -> None:
    runner = CountingRunner(delay_s=1.0)
    seat = predictor(runner)
    segment, turn = Segment(1, 0, DecodeOptions(), False), Turn(start_ms=0)
    seat.at_pause(segment, turn)
    guess = segment.pause_prediction
    seat.speech_went_on(segment)
    await asyncio.sleep(0)
    assert guess is not None and guess.cancelled() and segment.pause_prediction is None
    seat.close()
