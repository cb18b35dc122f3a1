"""End-of-turn policies: decide, after a turn's last final, when the turn is over.

A policy's :meth:`EotPolicy.decide` is awaited while the seat is silent; the seat cancels it
as soon as speech resumes (the turn then goes on).  :class:`TurnSensePolicy` commits at once
when the end-of-turn model is confident and otherwise waits for silence;
:class:`SilenceTimeoutPolicy` only waits.  The model's prediction was started when the segment
ended, concurrently with the final decode, so the decision costs max(final, model), not the sum.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from kitt_stt.str_enum import StrEnum
from kitt_stt.turnsense.model import TurnPrediction

log = logging.getLogger(__name__)


class CommitReason(StrEnum):
    MODEL = "model"
    TIMEOUT = "timeout"
    STOP = "stop"
    FINALIZE = "finalize"
    MAX_DURATION = "max_duration"


@dataclass(frozen=True)
class Decision:
    reason: CommitReason
    wait_ms: float
    probability: float | None = None
    threshold: float | None = None
    model_ms: float | None = None

    def as_metadata(self) -> dict[str, object]:
        return {
            "eot": {
                "decision": {
                    "reason": self.reason.value,
                    "probability": self.probability,
                    "threshold": self.threshold,
                    "wait_ms": round(self.wait_ms, 1),
                    "model_ms": self.model_ms,
                }
            }
        }


@dataclass(frozen=True)
class TurnContext:
    """What a policy may look at: when speech last ended (``time.perf_counter`` seconds) and the
    end-of-turn model's prediction for the turn so far, if a model runs."""

    speech_ended_at: float
    prediction: asyncio.Future[TurnPrediction] | None = None

    def waited_ms(self) -> float:
        return (time.perf_counter() - self.speech_ended_at) * 1000.0


async def sleep_until(context: TurnContext, wait_ms: float) -> None:
    remaining = wait_ms - context.waited_ms()
    if remaining > 0:
        await asyncio.sleep(remaining / 1000.0)


class EotPolicy(ABC):
    @abstractmethod
    async def decide(self, context: TurnContext) -> Decision:
        """Wait as long as the policy wants, then say why the turn is over."""


class SilenceTimeoutPolicy(EotPolicy):
    """Commit after ``wait_ms`` of silence counted from the end of speech."""

    def __init__(self, wait_ms: int) -> None:
        self.wait_ms = wait_ms

    async def decide(self, context: TurnContext) -> Decision:
        await sleep_until(context, self.wait_ms)
        return Decision(CommitReason.TIMEOUT, wait_ms=context.waited_ms())


class TurnSensePolicy(EotPolicy):
    """Commit as soon as p >= ``threshold``; otherwise commit after ``wait_ms`` of silence.

    A failed or late prediction counts as "not confident": the turn still commits on the timeout,
    never later than ``wait_ms`` after the end of speech.
    """

    def __init__(self, threshold: float, wait_ms: int) -> None:
        self.threshold = threshold
        self.wait_ms = wait_ms

    async def decide(self, context: TurnContext) -> Decision:
        prediction = None
        if context.prediction is not None:
            # wait_ms is a hard upper bound: under load the model may answer late, and a late
            # answer must not hold the turn open past it
            remaining_s = max(0.0, self.wait_ms - context.waited_ms()) / 1000.0
            try:
                prediction = await asyncio.wait_for(asyncio.shield(context.prediction), remaining_s)
            except asyncio.TimeoutError:  # not the builtin on 3.10
                log.debug("end-of-turn model did not answer within turn.wait_ms; committing on timeout")
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("end-of-turn model failed; waiting for silence instead")
        probability = None if prediction is None else prediction.probability
        model_ms = None if prediction is None else round(prediction.total_ms, 2)
        if probability is not None and probability >= self.threshold:
            return Decision(CommitReason.MODEL, context.waited_ms(), probability, self.threshold, model_ms)
        await sleep_until(context, self.wait_ms)
        return Decision(CommitReason.TIMEOUT, context.waited_ms(), probability, self.threshold, model_ms)
