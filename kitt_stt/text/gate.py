"""Whether a seat's turn is committed, by its wake phrase: the turn-level half of wake handling.

A turn that is only the wake phrase ("你好小凯", then a pause) is not committed but opens a
follow-up window: the next turn starting within ``follow_up_ms`` of audio counts as woken.  A
woken commit opens one too ("小凯打开车窗", then "再开大一点"), so a conversation goes on without
the wake phrase before every request.  In
``required`` mode a turn neither woken nor a follow-up is filtered instead of committed; in
``detect`` mode every turn is committed with what was found.  Audio time (the seat's clock), not
wall time, so a client streaming faster than real time gets the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from kitt_stt.str_enum import StrEnum
from kitt_stt.text.stage import StagedText
from kitt_stt.text.wake import WakeMode, WakeSettings


class TurnAction(StrEnum):
    COMMIT = "commit"
    WAKE_ONLY = "wake_only"  # only the wake phrase: not committed, the next turn is a follow-up
    FILTER = "no_wake"  # required mode, not addressed to the assistant: a ``filtered`` frame


@dataclass(frozen=True)
class TurnWake:
    action: TurnAction
    woken: bool
    phrase: str | None
    follow_up: bool

    def metadata(self) -> dict[str, object]:
        """``commit.metadata.wake``."""
        return {"woken": self.woken, "phrase": self.phrase, "follow_up": self.follow_up}


class WakeGate:
    """One per seat: remembers the follow-up window the last woken turn opened."""

    def __init__(self) -> None:
        self._window_end_ms: int | None = None
        self._window_phrase: str | None = None

    def decide(self, settings: WakeSettings, staged: StagedText, start_ms: int, end_ms: int) -> TurnWake | None:
        """What to do with a turn whose joined text went through :meth:`TextStage.final`
        (``staged``), spoken from ``start_ms`` to ``end_ms`` of the seat's audio, and remember the
        follow-up window it opens.  ``None``: wake handling is off; commit as before, without
        ``metadata.wake``.  A turn with no words and no wake phrase (noise) must not be passed:
        it would close the window, or reopen it."""
        decision = self.peek(settings, staged, start_ms)
        if decision is not None:
            if decision.woken:
                self._window_end_ms, self._window_phrase = end_ms + settings.follow_up_ms, decision.phrase
            else:
                self._window_end_ms = self._window_phrase = None
        return decision

    def peek(self, settings: WakeSettings, staged: StagedText, start_ms: int) -> TurnWake | None:
        """What :meth:`decide` would say now, without changing the window (for ``turn_eager``)."""
        if settings.mode is WakeMode.OFF:
            return None
        follow_up = self._window_end_ms is not None and start_ms <= self._window_end_ms
        wake = staged.wake
        if wake is not None and wake.alone:
            return TurnWake(TurnAction.WAKE_ONLY, True, wake.phrase, follow_up)
        if wake is not None or follow_up:  # a woken commit keeps the conversation open as well
            phrase = wake.phrase if wake is not None else self._window_phrase
            return TurnWake(TurnAction.COMMIT, True, phrase, follow_up and wake is None)
        action = TurnAction.FILTER if settings.mode is WakeMode.REQUIRED else TurnAction.COMMIT
        return TurnWake(action, False, None, False)
