"""End-of-turn policies: decide, after a turn's last final, when the turn is over.

A policy's :meth:`EotPolicy.decide` is awaited while the seat is silent; the seat cancels it
as soon as speech resumes (the turn then goes on).  :class:`TurnSensePolicy` commits at once
when the end-of-turn model is confident and otherwise waits for silence;
:class:`SilenceTimeoutPolicy` only waits.  The model's prediction was started when the segment
ended (or earlier, when the pause that ended it began), concurrently with the final decode, so
the decision costs max(final, model), not the sum.

Both policies read the turn's words too (:mod:`.turn_text`): a turn whose text ends where no
request can end is *held*: the model needs ``HoldRule.threshold`` instead of the usual threshold,
and the silence fallback waits ``HoldRule.wait_ms``.  When the model says "probably done" but not
"done" (``eager_threshold`` <= p < threshold), the policy tells the turn through
``TurnContext.on_eager`` before it starts waiting, so an agent can start on its answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kitt_stt.config.schema import TurnConfig
from kitt_stt.pipeline.turn_text import TextEnding, text_ending
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
    text_ending: TextEnding | None = None
    # the fused decision's (turn/fused_policy.py); absent from the metadata for other policies
    confidence: float | None = None  # the combiner's probability that the turn is over
    look_ms: int | None = None  # the pause (ms) the deciding look heard; None: not a look (timeout)
    looks_ms: tuple[int, ...] = ()  # the pauses (ms) at which the model's answer was weighed
    evidence: dict[str, float] | None = None  # logit contribution per kind: model, silence, words, prosody
    decided_by: str | None = None  # the kind that pushed hardest towards this decision

    def as_metadata(self) -> dict[str, object]:
        decision: dict[str, object] = {
            "reason": self.reason.value,
            "probability": self.probability,
            "threshold": self.threshold,
            "wait_ms": round(self.wait_ms, 1),
            "model_ms": self.model_ms,
            "text_ending": None if self.text_ending is None else self.text_ending.value,
        }
        if self.confidence is not None:
            decision.update(policy="fused", confidence=self.confidence, look_ms=self.look_ms,
                            looks_ms=list(self.looks_ms), evidence=self.evidence, decided_by=self.decided_by)
        return {"eot": {"decision": decision}}


@dataclass(frozen=True)
class HoldRule:
    """How a turn whose words end mid-phrase is held: the model must reach ``threshold`` (above
    1.0: never), and the silence fallback waits ``wait_ms``. ``enabled`` False: words are ignored."""

    enabled: bool
    threshold: float
    wait_ms: int

    @classmethod
    def from_config(cls, turn: TurnConfig) -> HoldRule:
        return cls(turn.hold_unfinished, turn.unfinished_threshold, turn.unfinished_wait_ms)


NO_HOLD = HoldRule(enabled=False, threshold=1.01, wait_ms=0)


class TurnLook(Protocol):
    """The seat's view of the turn so far, for a policy that looks again after more silence."""

    def audio(self) -> np.ndarray:
        """The turn's audio from its context before the first onset to now (the pause included)."""

    def predict(self) -> asyncio.Future[TurnPrediction] | None:
        """The end-of-turn model again on that audio (None when it cannot run now)."""


@dataclass(frozen=True)
class TurnContext:
    """What a policy may look at: when speech last ended (``time.perf_counter`` seconds) and the
    end-of-turn model's prediction for the turn so far, if a model runs."""

    speech_ended_at: float
    prediction: asyncio.Future[TurnPrediction] | None = None
    text: str = ""  # the turn's words so far (its finals joined)
    on_eager: Callable[[float], None] | None = None  # told p when the turn is probably, not surely, over
    look: TurnLook | None = None  # the turn's audio and a fresh prediction, for second looks

    def waited_ms(self) -> float:
        return (time.perf_counter() - self.speech_ended_at) * 1000.0

    def ending(self, hold: HoldRule) -> TextEnding | None:
        return text_ending(self.text) if hold.enabled else None


async def sleep_until(context: TurnContext, wait_ms: float) -> None:
    remaining = wait_ms - context.waited_ms()
    if remaining > 0:
        await asyncio.sleep(remaining / 1000.0)


async def answer_within(future: asyncio.Future[TurnPrediction] | None, remaining_ms: float) -> TurnPrediction | None:
    """The model's answer if it comes within ``remaining_ms``; None when it fails, is late or was
    never asked for: every policy treats those as "not confident". Shielded: the seat owns the
    prediction (a later decision of the same turn may await it again)."""
    if future is None:
        return None
    try:
        return await asyncio.wait_for(asyncio.shield(future), max(0.0, remaining_ms) / 1000.0)
    except asyncio.TimeoutError:  # not the builtin on 3.10
        log.debug("end-of-turn model did not answer in time; treated as not confident")
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("end-of-turn model failed; treated as not confident")
    return None


class EotPolicy(ABC):
    @abstractmethod
    async def decide(self, context: TurnContext) -> Decision:
        """Wait as long as the policy wants, then say why the turn is over."""


class SilenceTimeoutPolicy(EotPolicy):
    """Commit after ``wait_ms`` of silence counted from the end of speech (``hold.wait_ms`` when
    the words end mid-phrase)."""

    def __init__(self, wait_ms: int, hold: HoldRule | None = None) -> None:
        self.wait_ms = wait_ms
        self.hold = hold or NO_HOLD

    async def decide(self, context: TurnContext) -> Decision:
        ending = context.ending(self.hold)
        wait_ms = self.hold.wait_ms if ending is TextEnding.UNFINISHED else self.wait_ms
        await sleep_until(context, wait_ms)
        return Decision(CommitReason.TIMEOUT, wait_ms=context.waited_ms(), text_ending=ending)


class TurnSensePolicy(EotPolicy):
    """Commit as soon as p >= ``threshold``; otherwise commit after ``wait_ms`` of silence.

    A failed or late prediction counts as "not confident": the turn still commits on the timeout,
    never later than ``wait_ms`` after the end of speech (``hold.wait_ms`` for a held turn).
    """

    def __init__(self, threshold: float, wait_ms: int, hold: HoldRule | None = None,
                 eager_threshold: float | None = None) -> None:
        self.threshold = threshold
        self.wait_ms = wait_ms
        self.hold = hold or NO_HOLD
        self.eager_threshold = eager_threshold

    async def decide(self, context: TurnContext) -> Decision:
        ending = context.ending(self.hold)
        held = ending is TextEnding.UNFINISHED
        threshold = self.hold.threshold if held else self.threshold
        wait_ms = self.hold.wait_ms if held else self.wait_ms
        # wait_ms is a hard upper bound: under load the model may answer late, and a late answer
        # must not hold the turn open past it
        prediction = await answer_within(context.prediction, wait_ms - context.waited_ms())
        probability = None if prediction is None else prediction.probability
        model_ms = None if prediction is None else round(prediction.total_ms, 2)
        if probability is not None and probability >= threshold:
            return Decision(CommitReason.MODEL, context.waited_ms(), probability, threshold, model_ms, ending)
        if (probability is not None and context.on_eager is not None and not held
                and self.eager_threshold is not None and probability >= self.eager_threshold):
            context.on_eager(probability)
        await sleep_until(context, wait_ms)
        return Decision(CommitReason.TIMEOUT, context.waited_ms(), probability, threshold, model_ms, ending)
