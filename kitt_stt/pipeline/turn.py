"""Turns of one seat: which segments belong together, and when the turn is committed.

States (:class:`TurnState`, diagram in ``docs/turns.md``): ``IDLE`` (no turn), ``SPEAKING``
(a segment is open or its final is pending), ``WAITING`` (all finals are out; the end-of-turn
policy is deciding).  Speech resuming in ``WAITING`` cancels the decision and the turn goes
on.  ``flush`` (finalize, close, shutdown) detaches the turn and commits it as soon as its
finals are out, while new speech starts a new turn.  A turn whose speech spans more than
``max_duration_ms`` is committed with reason ``max_duration`` at its next final, or when its
next segment starts (that segment then opens a new turn).
"""

from __future__ import annotations

import asyncio
import logging
import time
import unicodedata
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from kitt_stt.pipeline.eot import CommitReason, Decision, EotPolicy, TurnContext
from kitt_stt.protocol.frames import CommitFrame, ServerFrame
from kitt_stt.turnsense.model import TurnPrediction

log = logging.getLogger(__name__)


class TurnState(StrEnum):
    IDLE = "idle"
    SPEAKING = "speaking"
    WAITING = "waiting"


@dataclass
class Turn:
    start_ms: int
    segment_ids: list[int] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    pending_finals: int = 0
    end_ms: int = 0
    speech_ended_at: float = 0.0
    prediction: asyncio.Future[TurnPrediction] | None = None

    def text(self) -> str:
        return join_texts(self.texts[segment_id] for segment_id in self.segment_ids if segment_id in self.texts)


def join_texts(parts: Iterable[str]) -> str:
    """Join segment or chunk texts: a space between words of spaced scripts ("please." + "Open"),
    nothing next to CJK text (wide characters) or before closing punctuation."""
    joined = ""
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if joined and not _is_wide(joined[-1]) and not _is_wide(part[0]) and part[0] not in _NO_SPACE_BEFORE:
            joined += " "
        joined += part
    return joined


_NO_SPACE_BEFORE = frozenset(".,!?;:)]}'\"…%")


def _is_wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


class TurnTracker:
    def __init__(self, seat: str, policy: EotPolicy, emit: Callable[[ServerFrame], None],
                 finals_done: Callable[[], Awaitable[None] | None], max_duration_ms: int,
                 commit_empty: bool = False) -> None:
        self._seat = seat
        self._policy = policy
        self._emit = emit
        self._finals_done = finals_done
        self._max_duration_ms = max_duration_ms
        self._commit_empty = commit_empty
        self._current: Turn | None = None
        self._waiting: asyncio.Task[None] | None = None
        self._commit_chain: asyncio.Task[None] | None = None
        self._next_turn_id = 1

    @property
    def state(self) -> TurnState:
        if self._current is None:
            return TurnState.IDLE
        return TurnState.WAITING if self._waiting is not None else TurnState.SPEAKING

    @property
    def current(self) -> Turn | None:
        return self._current

    def begin_segment(self, segment_id: int, start_ms: int) -> Turn:
        """A segment started: it joins the current turn (cancelling any pending decision)."""
        self._cancel_waiting()
        if self._current is not None and self._too_long(self._current):
            self.flush(CommitReason.MAX_DURATION)
        if self._current is None:
            self._current = Turn(start_ms=start_ms)
        self._current.segment_ids.append(segment_id)
        self._current.pending_finals += 1
        return self._current

    def segment_final(self, turn: Turn, segment_id: int, text: str, end_ms: int, speech_ended_at: float) -> None:
        """A segment's final went out; when the turn has no open segment left, start deciding."""
        turn.texts[segment_id] = text
        turn.pending_finals -= 1
        turn.end_ms = max(turn.end_ms, end_ms)
        turn.speech_ended_at = max(turn.speech_ended_at, speech_ended_at)
        if turn is not self._current or turn.pending_finals:
            return
        if self._too_long(turn):
            self.flush(CommitReason.MAX_DURATION)
            return
        context = TurnContext(speech_ended_at=turn.speech_ended_at, prediction=turn.prediction)
        self._waiting = asyncio.create_task(self._decide(turn, context))

    def _too_long(self, turn: Turn) -> bool:
        return turn.end_ms - turn.start_ms >= self._max_duration_ms

    async def _decide(self, turn: Turn, context: TurnContext) -> None:
        try:
            decision = await self._policy.decide(context)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("end-of-turn policy failed; committing on timeout")
            decision = Decision(CommitReason.TIMEOUT, context.waited_ms())
        if turn is not self._current:
            return
        self._current = None
        self._waiting = None
        previous = self._commit_chain
        if previous is not None and not previous.done():
            await asyncio.shield(previous)  # an earlier flushed turn commits first
        self._commit(turn, decision)

    def flush(self, reason: CommitReason) -> asyncio.Task[None] | None:
        """Commit the current turn with ``reason`` once its finals are out; returns the commit task."""
        self._cancel_waiting()
        turn, self._current = self._current, None
        if turn is None:
            return self._commit_chain
        previous = self._commit_chain
        finals_done = self._finals_done()

        async def commit_when_ready() -> None:
            if finals_done is not None:
                await finals_done
            if previous is not None:
                await asyncio.shield(previous)
            ended = turn.speech_ended_at or time.perf_counter()
            self._commit(turn, Decision(reason, wait_ms=(time.perf_counter() - ended) * 1000.0))

        self._commit_chain = asyncio.create_task(commit_when_ready())
        return self._commit_chain

    def _commit(self, turn: Turn, decision: Decision) -> None:
        text = turn.text()
        if not text and not self._commit_empty:  # only noise: the client saw its empty finals
            return
        frame = CommitFrame(seat=self._seat, turn_id=self._next_turn_id, text=text,
                            segment_ids=list(turn.segment_ids), metadata=decision.as_metadata())
        log.debug("turn committed: %s after %.0f ms", decision.reason.value, decision.wait_ms,
                  extra={"turn": frame.turn_id, "segment": turn.segment_ids[-1]})
        self._next_turn_id += 1
        self._emit(frame)

    def _cancel_waiting(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None

    def close(self) -> None:
        self._cancel_waiting()
        if self._commit_chain is not None and not self._commit_chain.done():
            self._commit_chain.cancel()
        self._current = None
