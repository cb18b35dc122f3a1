"""Turns of one seat: which segments belong together, and when the turn is committed.

States (:class:`TurnState`, diagram in ``docs/turns.md``): ``IDLE`` (no turn), ``SPEAKING``
(a segment is open or its final is pending), ``WAITING`` (all finals are out; the end-of-turn
policy is deciding).  Segments end on a short silence (``vad.silence_ms``); the turn is held
open across pauses by the policy, not by the VAD: speech resuming in ``WAITING`` cancels the
decision and the turn goes on.  ``flush`` (finalize, close, shutdown) detaches the turn and
commits it as soon as its finals are out, while new speech starts a new turn.  A turn whose
speech spans more than ``max_duration_ms`` is committed with reason ``max_duration`` at its
next final, or when its next segment starts (that segment then opens a new turn).

Sessions that ask for it (``eager``) hear about a decision before it is made: ``turn_eager``
when the policy finds the turn probably over but waits, ``turn_resumed`` when speech then comes
back.  A turn's ``turn_id`` is given when it is first announced (eager, commit or filtered), so
ids of committed turns stay consecutive and noise turns that are never committed take none,
except in sessions that ask (``turn_ends``) to hear every turn end: there a turn with nothing to
commit (noise, the wake phrase alone) ends in ``filtered`` and takes its id like any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from kitt_stt.pipeline.eot import CommitReason, Decision, EotPolicy, TurnContext, TurnLook, sleep_until
from kitt_stt.pipeline.turn import Turn
from kitt_stt.protocol.frames import (
    CommitFrame,
    FilteredFrame,
    ServerFrame,
    TurnEagerFrame,
    TurnResumedFrame,
    WakeFrame,
)
from kitt_stt.str_enum import StrEnum
from kitt_stt.text import StagedText, TextStage, TurnAction, WakeGate, WakeMatch

log = logging.getLogger(__name__)


class TurnState(StrEnum):
    IDLE = "idle"
    SPEAKING = "speaking"
    WAITING = "waiting"


class TurnTracker:
    def __init__(self, seat: str, policy: EotPolicy, emit: Callable[[ServerFrame], None],
                 finals_done: Callable[[], Awaitable[None] | None], max_duration_ms: int,
                 commit_empty: bool = False, eager: Callable[[], bool] = lambda: False,
                 look_for: Callable[[Turn], TurnLook | None] = lambda turn: None,
                 fallback_wait_ms: int = 0, turn_ends: Callable[[], bool] = lambda: False) -> None:
        self._seat = seat
        self._turn_ends = turn_ends  # the session asked to hear how every turn ends (filtered below)
        self._fallback_wait_ms = fallback_wait_ms  # a policy that fails still waits this long (turn.wait_ms)
        self._look_for = look_for  # the turn's audio and a fresh prediction, for a policy's second looks
        self._eager = eager
        self._policy = policy
        self._emit = emit
        self._finals_done = finals_done
        self._max_duration_ms = max_duration_ms
        self._commit_empty = commit_empty
        self._current: Turn | None = None
        self._waiting: asyncio.Task[None] | None = None
        self._commit_chain: asyncio.Task[None] | None = None
        self._next_turn_id = 1
        self._wake_gate = WakeGate()

    @property
    def state(self) -> TurnState:
        if self._current is None:
            return TurnState.IDLE
        return TurnState.WAITING if self._waiting is not None else TurnState.SPEAKING

    @property
    def current(self) -> Turn | None:
        return self._current

    def begin_segment(self, segment_id: int, start_ms: int, stage: TextStage | None = None,
                      engine_itn: bool = False) -> Turn:
        """A segment started: it joins the current turn (cancelling any pending decision)."""
        self._cancel_waiting()
        if self._current is not None and self._too_long(self._current):
            self.flush(CommitReason.MAX_DURATION)
        if self._current is None:
            self._current = Turn(start_ms=start_ms, stage=stage or TextStage(), engine_itn=engine_itn)
        elif self._current.eager_sent and self._current.turn_id is not None:
            self._current.eager_sent = False
            self._emit(TurnResumedFrame(seat=self._seat, turn_id=self._current.turn_id))
        self._current.segment_ids.append(segment_id)
        self._current.pending_finals += 1
        return self._current

    def segment_final(self, turn: Turn, segment_id: int, text: str, end_ms: int, speech_ended_at: float,
                      lang: str | None = None, staged: StagedText | None = None) -> None:
        """A segment's final went out (``text`` as recognised, ``staged`` as sent); when the turn
        has no open segment left, start deciding."""
        turn.texts[segment_id] = text
        turn.staged_finals[segment_id] = staged or StagedText(text)
        turn.langs.add(lang)
        turn.pending_finals -= 1
        turn.end_ms = max(turn.end_ms, end_ms)
        turn.speech_ended_at = max(turn.speech_ended_at, speech_ended_at)
        if turn is not self._current or turn.pending_finals:
            return
        if self._too_long(turn):
            self.flush(CommitReason.MAX_DURATION)
            return
        on_eager = (lambda probability: self._announce_eager(turn, probability)) if self._eager() else None
        context = TurnContext(speech_ended_at=turn.speech_ended_at, prediction=turn.prediction, text=turn.text(),
                              on_eager=on_eager, look=self._look_for(turn))
        self._waiting = asyncio.create_task(self._decide(turn, context))

    def _announce_eager(self, turn: Turn, probability: float) -> None:
        """Tell the client the turn is probably over, once per decision point, with the text its
        commit would have. Not for a turn that would not be committed (wake phrase alone, or
        filtered), nor while an earlier flushed turn still waits to commit (its commit must take
        the lower turn_id), nor for a decision that speech has already overtaken."""
        if not self._deciding(turn) or turn.eager_sent:
            return
        staged = turn.staged()
        wake = self._wake_gate.peek(turn.stage.wake_settings, staged, turn.start_ms)
        if not staged.text or (wake is not None and wake.action is not TurnAction.COMMIT):
            return
        if self._commit_chain is not None and not self._commit_chain.done():
            return
        text = staged.text
        turn.eager_sent = True
        self._emit(TurnEagerFrame(seat=self._seat, turn_id=self._announce(turn), text=text,
                                  probability=round(probability, 4)))

    def _announce(self, turn: Turn) -> int:
        if turn.turn_id is None:
            turn.turn_id = self._next_turn_id
            self._next_turn_id += 1
        return turn.turn_id

    def _too_long(self, turn: Turn) -> bool:
        return turn.end_ms - turn.start_ms >= self._max_duration_ms

    def _deciding(self, turn: Turn) -> bool:
        """Whether the running task is still the turn's live decision. A cancel that reaches a
        decision just as an awaited future completes can be lost (``asyncio.wait_for`` before
        3.12 swallows it), so the decision checks that speech has not resumed before it acts."""
        return (turn is self._current and self._waiting is not None and self._waiting is asyncio.current_task()
                and not turn.pending_finals)

    async def _decide(self, turn: Turn, context: TurnContext) -> None:
        try:
            await turn.stage_off_loop()  # before the policy: turn_eager and the commit read it
            decision = await self._policy.decide(context)
        except asyncio.CancelledError:
            raise
        except Exception:
            # as a late model does: the turn commits on the timeout, not at once (a fault must not
            # cut the speaker off), and speech resuming meanwhile still cancels this
            log.exception("end-of-turn policy failed; committing on the timeout")
            await sleep_until(context, self._fallback_wait_ms)
            decision = Decision(CommitReason.TIMEOUT, context.waited_ms())
        if not self._deciding(turn):
            return
        self._current = None
        self._waiting = None
        previous = self._commit_chain
        if previous is None or previous.done():
            self._commit(turn, decision)
            return
        # an earlier flushed turn commits first; chained, so a flush (drain, close) waits for this one too
        self._commit_chain = asyncio.create_task(self._commit_after(previous, turn, decision))

    async def _commit_after(self, previous: asyncio.Task[None], turn: Turn, decision: Decision) -> None:
        await asyncio.wait({previous})  # its failure (logged there) must not cost this turn its commit
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
                await asyncio.wait({asyncio.ensure_future(finals_done)})
            if previous is not None:
                await asyncio.wait({previous})
            await turn.stage_off_loop()
            ended = turn.speech_ended_at or time.perf_counter()
            self._commit(turn, Decision(reason, wait_ms=(time.perf_counter() - ended) * 1000.0))

        self._commit_chain = asyncio.create_task(commit_when_ready())
        return self._commit_chain

    def announce_wake(self, turn: Turn, segment_id: int, wake: WakeMatch, audio_ms: int) -> None:
        """The ``wake`` frame, once per turn, as soon as an interim, final or commit shows it."""
        if turn.wake_sent:
            return
        turn.wake_sent = True
        self._emit(WakeFrame(seat=self._seat, segment_id=segment_id, phrase=wake.phrase, text=wake.heard,
                             audio_ms=audio_ms))

    def _commit(self, turn: Turn, decision: Decision) -> None:
        staged = turn.staged()
        if not staged.text and staged.wake is None:  # only noise: the client saw its empty finals
            if self._commit_empty:
                self._emit_commit(turn, decision, staged.text, None)
            else:
                self._end_uncommitted(turn, "empty")
            return
        wake = self._wake_gate.decide(turn.stage.wake_settings, staged, turn.start_ms, turn.end_ms)
        if staged.wake is not None:
            self.announce_wake(turn, turn.segment_ids[0], staged.wake, turn.end_ms)
        if wake is not None and wake.action is TurnAction.WAKE_ONLY:
            self._end_uncommitted(turn, "wake_only")  # the next turn within follow_up_ms counts as woken
            return
        text = staged.text
        if wake is not None and wake.action is TurnAction.FILTER:
            self._emit(FilteredFrame(seat=self._seat, turn_id=self._announce(turn), text=text,
                                     segment_ids=list(turn.segment_ids)))
            return
        self._emit_commit(turn, decision, text, None if wake is None else wake.metadata())

    def _end_uncommitted(self, turn: Turn, reason: Literal["empty", "wake_only"]) -> None:
        """A turn with nothing to commit ends silently for older clients; sessions that asked
        (``turn_ends``) get ``filtered`` with ``reason``, since a client that opened a turn at its
        ``speech_start`` (a framework's "user speaking") must hear that it is over."""
        if self._turn_ends():
            self._emit(FilteredFrame(seat=self._seat, turn_id=self._announce(turn), text="",
                                     segment_ids=list(turn.segment_ids), reason=reason))

    def _emit_commit(self, turn: Turn, decision: Decision, text: str, wake: dict[str, object] | None) -> None:
        metadata = decision.as_metadata()
        if wake is not None:
            metadata["wake"] = wake
        frame = CommitFrame(seat=self._seat, turn_id=self._announce(turn), text=text,
                            segment_ids=list(turn.segment_ids), metadata=metadata,
                            confidence=min(turn.confidences.values(), default=None))
        log.debug("turn committed: %s after %.0f ms", decision.reason.value, decision.wait_ms,
                  extra={"turn": frame.turn_id, "segment": turn.segment_ids[-1]})
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
