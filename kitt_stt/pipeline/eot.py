"""End-of-turn policies: decide, after a turn's last final, when the turn is over.

A policy's :meth:`EotPolicy.decide` is awaited while the seat is silent; the seat cancels it
as soon as speech resumes (the turn then goes on).  The end-of-turn model plugs in here as
another policy; until then :class:`SilenceTimeoutPolicy` commits after ``turn.wait_ms``.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum


class CommitReason(str, Enum):
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
    """What a policy may look at: when speech last ended (``time.perf_counter`` seconds)."""

    speech_ended_at: float


class EotPolicy(ABC):
    @abstractmethod
    async def decide(self, context: TurnContext) -> Decision:
        """Wait as long as the policy wants, then say why the turn is over."""


class SilenceTimeoutPolicy(EotPolicy):
    """Commit after ``wait_ms`` of silence counted from the end of speech."""

    def __init__(self, wait_ms: int) -> None:
        self.wait_ms = wait_ms

    async def decide(self, context: TurnContext) -> Decision:
        remaining = self.wait_ms / 1000.0 - (time.perf_counter() - context.speech_ended_at)
        if remaining > 0:
            await asyncio.sleep(remaining)
        return Decision(CommitReason.TIMEOUT, wait_ms=(time.perf_counter() - context.speech_ended_at) * 1000.0)
