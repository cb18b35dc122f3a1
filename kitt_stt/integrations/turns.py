"""One seat's turn, followed through the server's frames, as framework-neutral events.

Both adapters map these events onto their framework (docs/integrations.md has the table):

* ``TurnStarted`` once per turn, at its first ``speech_start`` (a turn has several segments,
  and a replay after a reconnect repeats the turn's ``speech_start``: neither starts it again);
* ``Partial`` with the turn's text so far: its finals joined, plus the open segment's interim;
* ``Eager`` (``turn_eager``) and ``Resumed`` (``turn_resumed``, with the text so far);
* ``Committed`` (``commit``: the server's end of turn) or ``Filtered`` (``filtered``: the turn
  was not addressed to the assistant, or had nothing to commit: noise, the wake phrase alone;
  the adapters ask for those with ``turn_ends``), both ending the turn;
* ``ServerError`` for an ``error`` frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kitt_stt.integrations.link import ReplayBuffer
from kitt_stt.pipeline.text_join import join_texts


@dataclass(frozen=True)
class TurnStarted:
    audio_ms: int


@dataclass(frozen=True)
class Partial:
    text: str


@dataclass(frozen=True)
class Eager:
    text: str
    probability: float


@dataclass(frozen=True)
class Resumed:
    text: str


@dataclass(frozen=True)
class Committed:
    text: str
    reason: str | None  # the end-of-turn decision's reason: model, timeout, finalize, stop, max_duration
    start_ms: int | None  # audio time of the turn's first speech on this connection
    end_ms: int | None
    language: str | None
    frame: dict[str, Any]
    words: tuple[dict[str, Any], ...] = ()  # the turn's finals' words (sessions with ``words: true``)


@dataclass(frozen=True)
class Filtered:
    text: str


@dataclass(frozen=True)
class ServerError:
    code: str
    message: str
    fatal: bool


TurnEvent = TurnStarted | Partial | Eager | Resumed | Committed | Filtered | ServerError


class TurnTracker:
    def __init__(self, seat: str, replay: ReplayBuffer) -> None:
        self.seat = seat
        self._replay = replay
        self._finals: list[str] = []
        self._words: list[dict[str, Any]] = []
        self._start_ms: int | None = None
        self._end_ms: int | None = None
        self._language: str | None = None

    @property
    def in_turn(self) -> bool:
        return self._replay.in_turn

    def reconnected(self) -> None:
        """A new connection replays the turn's audio from its start: its finals will come again."""
        self._finals.clear()
        self._words.clear()
        self._start_ms = self._end_ms = None

    def on_frame(self, frame: dict[str, Any]) -> list[TurnEvent]:
        kind = frame.get("type")
        if kind == "error":
            return [ServerError(str(frame.get("code")), str(frame.get("message")), bool(frame.get("fatal")))]
        if frame.get("seat") not in (None, self.seat):
            return []
        if kind == "speech_start":
            if self._start_ms is None:
                self._start_ms = int(frame.get("audio_ms", 0))
            if self.in_turn:
                return []
            self._replay.in_turn = True
            return [TurnStarted(int(frame.get("audio_ms", 0)))]
        if kind == "interim":
            return [Partial(join_texts([*self._finals, str(frame.get("text", ""))]))]
        if kind == "final":
            self._finals.append(str(frame.get("text", "")))
            self._words.extend(frame.get("words") or [])
            self._end_ms = frame.get("end_ms")
            self._language = frame.get("lang") or self._language
            text = join_texts(self._finals)
            return [Partial(text)] if text else []
        if kind == "turn_eager":
            return [Eager(str(frame.get("text", "")), float(frame.get("probability", 0.0)))]
        if kind == "turn_resumed":
            return [Resumed(join_texts(self._finals))]
        if kind == "commit":
            decision = (frame.get("metadata") or {}).get("eot", {}).get("decision", {})
            event = Committed(str(frame.get("text", "")), decision.get("reason"), self._start_ms, self._end_ms,
                              self._language, frame, tuple(self._words))
            self._settle()
            return [event]
        if kind == "filtered":
            text = str(frame.get("text", ""))
            self._settle()
            return [Filtered(text)]
        return []

    def _settle(self) -> None:
        self._finals.clear()
        self._words.clear()
        self._start_ms = self._end_ms = None
        self._language = None
        self._replay.committed()
